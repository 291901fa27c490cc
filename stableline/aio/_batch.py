"""A producer batch: the messages of one entry, waiting to be sent.

A batch holds messages of one partition key at most (None: messages without a key):
the broker stores the key's hash with the entry and Key_Shared routes by it.

One future per batch, not per message: it resolves to the entry's (ledger_id,
entry_id), and each message's MessageId is that plus its index. A message in a
batch costs two list appends; MessageIds are made only for the sends awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId


@dataclass(slots=True, eq=False)
class Batch:
    """Messages of one transaction (or none) and one key (or none) waiting to be sent
    as one entry."""

    txn: tuple[int, int] | None
    future: asyncio.Future  # -> (ledger_id, entry_id) once the entry is durable
    parts: list[bytes] = field(default_factory=list)  # encoded fields, joined on send
    count: int = 0
    size_bytes: int = 0
    key: str | None = None

    def __len__(self) -> int:
        return self.count

    def to_send(self, sequence_id: int, producer_name: str) -> pb.ProduceRequest:
        metadata = pb.EntryMetadata(
            num_messages=self.count,
            publish_time_ms=int(time.time() * 1000),
            producer_name=producer_name,
            sequence_id=sequence_id,
        )
        if self.txn is not None:
            metadata.txn_id.most_bits, metadata.txn_id.least_bits = self.txn
        send = pb.ProducerSend(
            sequence_id=sequence_id, metadata=metadata, payload=b"".join(self.parts)
        )
        if self.key is not None:
            send.partition_key = self.key
            send.has_partition_key = True
        return pb.ProduceRequest(send=send)


class SendReceipt(tuple):
    """Awaitable for one message's MessageId; done when its batch is durable.

    A (batch future, index) tuple: one is made per send, and a tuple is made in C,
    several times faster than an object with an __init__.
    """

    __slots__ = ()

    def __new__(cls, batch_future: asyncio.Future, index: int) -> SendReceipt:
        return tuple.__new__(cls, (batch_future, index))

    @property
    def _future(self) -> asyncio.Future:
        return self[0]

    def __await__(self) -> Generator[Any, None, MessageId]:
        future, index = self
        ledger_id, entry_id = yield from future.__await__()
        return MessageId(ledger_id, entry_id, index)

    def done(self) -> bool:
        return self[0].done()

    def cancelled(self) -> bool:
        return self[0].cancelled()

    def exception(self) -> BaseException | None:
        """The send's failure once done (None if it succeeded), as Future.exception()."""
        return self[0].exception()

    def add_done_callback(self, fn: Callable[[SendReceipt], None]) -> None:
        """Call fn(receipt) once the send is durable or failed; no task is made
        (asyncio.ensure_future on a receipt would wrap it in one)."""
        self[0].add_done_callback(lambda _batch_future: fn(self))

    def result(self) -> MessageId:
        future, index = self
        ledger_id, entry_id = future.result()
        return MessageId(ledger_id, entry_id, index)

    def __repr__(self) -> str:
        return f"SendReceipt(index={self[1]}, done={self.done()})"


# Makes a receipt without calling SendReceipt.__new__ in Python: the producer's hot path.
new_receipt = tuple.__new__
