"""A producer batch: the messages of one entry, encoded as they are added.

One future per batch, not per message: it resolves to the entry's (ledger_id,
entry_id), and each message's MessageId is that plus its index. A message in a
batch costs two list appends; MessageIds are made only for the sends awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId

# Plain payloads up to this size have their field prefix cached by length.
_CACHED_PREFIX_MAX = 64 * 1024
_plain_prefixes: dict[int, bytes] = {}


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(body_length: int) -> bytes:
    """Tag and length of field 1 (length-delimited) holding body_length bytes."""
    return b"\x0a" + _varint(body_length)


def plain_prefix(length: int) -> bytes:
    """What precedes a plain payload of `length` bytes in a MessageBatch.

    MessageBatch.messages (field 1) holding SingleMessage{payload (field 1)}, the
    only field set; proto3 leaves an empty payload out. The bytes are exactly what
    protobuf writes, without a protobuf object per message.
    """
    prefix = _plain_prefixes.get(length)
    if prefix is None:
        inner = _field(length) if length else b""
        prefix = _field(len(inner) + length) + inner
        if length <= _CACHED_PREFIX_MAX:
            _plain_prefixes[length] = prefix
    return prefix


def _varint_width(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def plain_layout(payload: bytes) -> tuple[int, int] | None:
    """(prefix length, stride) when the MessageBatch holds only plain messages of one
    length (as producers write them), else None.

    Such a batch is one record repeated at a fixed stride, so message i's payload is
    payload[i * stride + prefix length : (i + 1) * stride], no decoding needed. Every
    record's prefix is checked (in C, a strided slice per prefix byte), which proves
    the batch parses so: a key, a property or another length breaks a prefix.
    """
    if len(payload) < 2 or payload[0] != 0x0A:
        return None
    inner_length, shift = 0, 0
    for at in range(1, min(6, len(payload))):
        byte = payload[at]
        inner_length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    else:
        return None
    length = 0  # an empty payload is left out of the SingleMessage entirely
    if inner_length:
        for width in range(1, 6):
            candidate = inner_length - 1 - width
            if candidate >= 0 and _varint_width(candidate) == width:
                length = candidate
                break
        else:
            return None
    prefix = plain_prefix(length)
    stride = len(prefix) + length
    count, rest = divmod(len(payload), stride)
    if rest:
        return None
    for at in range(len(prefix)):
        if payload[at::stride] != prefix[at : at + 1] * count:
            return None
    return len(prefix), stride


def encode_message(
    content: bytes,
    properties: dict[str, str] | None,
    partition_key: str | None,
    event_time_ms: int,
) -> bytes:
    """One MessageBatch `messages` field for a message with metadata."""
    message = pb.SingleMessage(payload=content, event_time_ms=event_time_ms)
    if properties:
        message.properties.update(properties)
    if partition_key is not None:
        message.partition_key = partition_key
        message.has_partition_key = True
    body = message.SerializeToString()
    return _field(len(body)) + body


@dataclass(slots=True, eq=False)
class Batch:
    """Messages of one transaction (or none) waiting to be sent as one entry."""

    txn: tuple[int, int] | None
    future: asyncio.Future  # -> (ledger_id, entry_id) once the entry is durable
    parts: list[bytes] = field(default_factory=list)  # encoded fields, joined on send
    count: int = 0
    size_bytes: int = 0

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
        return pb.ProduceRequest(
            send=pb.ProducerSend(
                sequence_id=sequence_id, metadata=metadata, payload=b"".join(self.parts)
            )
        )


class SendReceipt:
    """Awaitable for one message's MessageId; done when its batch is durable."""

    __slots__ = ("_future", "_index")

    def __init__(self, batch_future: asyncio.Future, index: int):
        self._future = batch_future
        self._index = index

    def __await__(self) -> Generator[Any, None, MessageId]:
        ledger_id, entry_id = yield from self._future.__await__()
        return MessageId(ledger_id, entry_id, self._index)

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> MessageId:
        ledger_id, entry_id = self._future.result()
        return MessageId(ledger_id, entry_id, self._index)
