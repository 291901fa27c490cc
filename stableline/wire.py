"""The MessageBatch wire format, written and read without a protobuf object per message.

An entry's payload is a serialized MessageBatch. Producers write plain messages
(payload only) as two field prefixes and the payload; readers recognise a batch
of plain messages of one length and slice payloads out of it directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from stableline._proto import broker_pb2 as pb

# Plain payloads up to this size have their field prefix cached by length.
_CACHED_PREFIX_MAX = 64 * 1024
_plain_prefixes: dict[int, bytes] = {}
# The prefix of a plain payload of a length already seen, or None: a send's fast path.
known_plain_prefix = _plain_prefixes.get


def uvarint(value: int) -> bytes:
    """The base-128 varint of a non-negative int: protobuf's, and Kafka's unsigned one."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(body_length: int) -> bytes:
    """Tag and length of field 1 (length-delimited) holding body_length bytes."""
    return b"\x0a" + uvarint(body_length)


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


_keyed_prefixes: dict[tuple[int, int], bytes] = {}


def key_fields(key: str) -> bytes:
    """A SingleMessage's partition_key and has_partition_key fields (2 and 5), as
    protobuf writes them: what follows the payload of a message with only a key."""
    encoded = key.encode()
    return (b"\x12" + uvarint(len(encoded)) + encoded if encoded else b"") + b"\x28\x01"


def keyed_prefix(length: int, fields_length: int) -> bytes:
    """What precedes a payload of `length` bytes followed by key fields of
    fields_length bytes (key_fields): the batch's field 1 and the payload's field 1.
    prefix + payload + key_fields(key) is exactly encode_message(payload, None, key, 0)."""
    prefix = _keyed_prefixes.get((length, fields_length))
    if prefix is None:
        inner = _field(length) if length else b""
        prefix = _field(len(inner) + length + fields_length) + inner
        if length <= _CACHED_PREFIX_MAX:
            _keyed_prefixes[length, fields_length] = prefix
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


def count_plain(payload: bytes) -> int | None:
    """The messages of a batch of plain messages of one length (what producers
    write), counted from its layout at C speed; None for any other payload."""
    if not payload:
        return 0
    layout = plain_layout(payload)
    return None if layout is None else len(payload) // layout[1]


def count_messages(payload: bytes) -> int | None:
    """The messages of a serialized MessageBatch, or None when it does not parse as one.

    Nothing is decoded but the top level: a batch of plain messages of one length
    is counted from its layout, any other by walking its records' length prefixes
    (one step per message, about 0.2 us each, no object made). Fields other than
    `messages` (which a client of another version might write) are left to protobuf.
    """
    counted = count_plain(payload)
    if counted is not None:
        return counted
    end = len(payload)
    at = count = 0
    while at < end:
        if payload[at] != 0x0A:
            return _count_by_parsing(payload)
        at += 1
        if at < end and payload[at] < 0x80:  # a length under 128: one byte
            at += payload[at] + 1
            count += 1
            continue
        length, shift = 0, 0
        while True:
            if at >= end or shift > 35:
                return None
            byte = payload[at]
            at += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        at += length
        count += 1
    return count if at == end else None


def _count_by_parsing(payload: bytes) -> int | None:
    try:
        return len(pb.MessageBatch.FromString(payload).messages)
    except Exception:  # protobuf's DecodeError: not a batch
        return None


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """One message of a client-encoded batch, for tools that look inside entries."""

    payload: bytes
    partition_key: str | None
    properties: dict[str, str]
    event_time_ms: int


def batch_messages(payload: bytes, limit: int | None = None) -> list[BatchMessage]:
    """The first `limit` (default: all) messages of an entry's payload, decoded one by
    one as the batch is walked: the work is bounded by `limit`, not by the batch.
    Raises ValueError when the payload is not a batch (its first record does not
    parse); a batch damaged further on ends where the damage starts."""
    messages: list[BatchMessage] = []
    for message in _walk_batch(payload):
        if message is None:
            if not messages and payload:
                raise ValueError("entry payload is not a message batch")
            break
        if limit is not None and len(messages) >= limit:
            break
        messages.append(message)
    return messages


def _walk_batch(payload: bytes) -> Iterator[BatchMessage | None]:
    """Each message of the MessageBatch in turn; None where a record does not parse."""
    end = len(payload)
    at = 0
    while at < end:
        if payload[at] != 0x0A:  # only field 1 (messages), length-delimited
            yield None
            return
        at += 1
        length, shift = 0, 0
        while True:
            if at >= end or shift > 35:
                yield None
                return
            byte = payload[at]
            at += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        if at + length > end:
            yield None
            return
        try:
            m = pb.SingleMessage.FromString(payload[at : at + length])
        except Exception:  # protobuf's DecodeError, kept inside this module
            yield None
            return
        at += length
        yield BatchMessage(
            m.payload,
            m.partition_key if m.has_partition_key else None,
            dict(m.properties),
            m.event_time_ms,
        )
