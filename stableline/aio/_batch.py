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
    # key_fields(key), cached when a key's batch opens: a keyed send's fast path
    # appends it after the payload instead of encoding a SingleMessage.
    key_fields: bytes = b""
    # The prefix keyed_prefix gave for the last payload length seen (-1: none yet).
    prefix_length: int = -1
    prefix: bytes = b""

    def __len__(self) -> int:
        return self.count

    def to_send(self, sequence_id: int, producer_name: str) -> pb.ProduceRequest:
        """The request that sends this batch alone."""
        return pb.ProduceRequest(send=self.to_proto(sequence_id, producer_name))

    def to_proto(self, sequence_id: int, producer_name: str) -> pb.ProducerSend:
        """This batch as one entry's send (alone, or among others in one frame)."""
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
        return send


def frames(
    batches: list[tuple[int, Batch]], producer_name: str, max_bytes: int
) -> list[tuple[tuple[int, ...], pb.ProduceRequest]]:
    """(sequence ids, request) for batches given with their sequence ids, ascending:
    as few frames as hold them, each at most max_bytes as encoded (its entries'
    keys, names and sequence ids counted with their payloads: the broker refuses a
    frame past max_message_size + 1 MiB, and ten thousand keyed entries of a few
    bytes carry more of those than of payload). A frame holds at least one batch;
    one batch alone goes as a plain send."""
    if len(batches) == 1:
        sequence_id, batch = batches[0]
        return [((sequence_id,), batch.to_send(sequence_id, producer_name))]
    out: list[tuple[tuple[int, ...], pb.ProduceRequest]] = []
    group: list[tuple[int, Batch, pb.ProducerSend]] = []
    size = 0
    for sequence_id, batch in batches:
        send = batch.to_proto(sequence_id, producer_name)
        encoded = send.ByteSize() + _REPEATED_FIELD_OVERHEAD
        if group and size + encoded > max_bytes:
            out.append(_frame(group, producer_name))
            group, size = [], 0
        group.append((sequence_id, batch, send))
        size += encoded
    out.append(_frame(group, producer_name))
    return out


# A repeated message field's tag (1 byte) and its length varint (at most 5 bytes).
_REPEATED_FIELD_OVERHEAD = 6


def _frame(
    group: list[tuple[int, Batch, pb.ProducerSend]], producer_name: str
) -> tuple[tuple[int, ...], pb.ProduceRequest]:
    sequence_ids = tuple(sequence_id for sequence_id, _, _ in group)
    if len(group) == 1:
        sequence_id, batch, _ = group[0]
        return sequence_ids, batch.to_send(sequence_id, producer_name)
    sends = [send for _, _, send in group]
    return sequence_ids, pb.ProduceRequest(sends=pb.ProducerSends(sends=sends))


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
