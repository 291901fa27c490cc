"""The broker's side of one connected consumer: its permits and what it holds."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from dispatcher.key_shared import KeySharedPolicy
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
    # How it takes part in a Key_Shared subscription (other types ignore it).
    key_shared: KeySharedPolicy = field(default_factory=KeySharedPolicy)
    consumer_id: int = field(default_factory=lambda: next(_ids))
    permits: int = 0
    # Entries delivered and not yet acknowledged: position -> message count. Changed
    # only through hold/release/release_all, which keep unacked_messages its sum.
    pending: dict[Position, int] = field(default_factory=dict)
    unacked_messages: int = 0
    # Dispatch to it stopped at the unacked limit (dispatcher/limits.py).
    blocked: bool = False
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    messages_out: int = 0
    bytes_out: int = 0
    connected_since_ms: int = 0

    def hold(self, position: Position, num_messages: int) -> None:
        assert position not in self.pending
        self.pending[position] = num_messages
        self.unacked_messages += num_messages

    def release(self, position: Position) -> int:
        """Forget a held entry; the number of messages it held (0 if it held none)."""
        num_messages = self.pending.pop(position, 0)
        self.unacked_messages -= num_messages
        return num_messages

    def release_all(self) -> int:
        released = self.unacked_messages
        self.pending.clear()
        self.unacked_messages = 0
        return released

    def push(self, deliveries: list[Delivery]) -> None:
        self.outbox.put_nowait(deliveries)
