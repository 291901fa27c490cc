"""The broker's side of one connected consumer: its permits and what it holds."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from managed_ledger import Entry, Position

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Delivery:
    """An entry sent to a consumer, with what the consumer must skip in it."""

    entry: Entry
    redelivery_count: int
    acked_batch_indexes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ControlEvent:
    """A non-message event for the consumer's stream (e.g. becoming active)."""

    kind: str
    value: object = None


@dataclass(eq=False)
class Consumer:
    """Outbound events go to `outbox`, which the connection drains in order."""

    name: str
    priority_level: int = 0
    consumer_id: int = field(default_factory=lambda: next(_ids))
    permits: int = 0
    # Entries delivered and not yet acknowledged: position -> message count.
    pending: dict[Position, int] = field(default_factory=dict)
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    messages_out: int = 0
    bytes_out: int = 0
    connected_since_ms: int = 0

    @property
    def unacked_messages(self) -> int:
        return sum(self.pending.values())

    def push(self, deliveries: list[Delivery]) -> None:
        self.outbox.put_nowait(deliveries)
