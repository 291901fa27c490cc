"""Kafka record batches (magic v2): decoded from Produce, encoded for Fetch.

A batch is a 61-byte header (base offset, length, leader epoch, magic, CRC-32C
of everything after the CRC, attributes, last offset delta, first and max
timestamps, producer id, epoch, base sequence, record count) and its records.
With compression only the records are compressed, the count stays outside.
The codecs, and the bound on what a batch may inflate to, are compression.py's.
A control batch holds one record whose key says COMMIT or ABORT.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from stableline.broker.kafka.protocol.codec import MalformedRequest, encode_varint
from stableline.broker.kafka.protocol.compression import (
    RECORD_COST_BYTES,
    Compression,
    CorruptCompression,
    InflationBudget,
    RecordsTooLarge,
    deflate,
    inflate,
)

MAGIC = 2
# base offset, batch length, partition leader epoch, magic, crc
_PREFIX = struct.Struct(">qiibI")
# attributes, last offset delta, first timestamp, max timestamp, producer id,
# producer epoch, base sequence, record count
_BODY = struct.Struct(">hiqqqhii")
HEADER_SIZE = _PREFIX.size + _BODY.size  # 61
# Bytes counted by the batch length: everything after the length field itself.
_LENGTH_START = 12
# The CRC covers everything after itself: from the attributes to the batch's end.
_CRC_START = _PREFIX.size

_COMPRESSION_MASK = 0x07
TRANSACTIONAL = 0x10
CONTROL = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
# Most records a decoded batch may claim before its bytes are read (a guard).
_MAX_RECORDS = 1_000_000


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class CorruptBatch(ValueError):
    """A batch whose CRC, magic or lengths are wrong (CORRUPT_MESSAGE)."""


# The most bytes one batch's records may decompress to, unless the caller says.
DEFAULT_MAX_RECORDS_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class RecordBatch:
    base_offset: int
    records: tuple[Record, ...]
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    transactional: bool = False
    control: bool = False
    compression: Compression = Compression.NONE

    @property
    def last_offset_delta(self) -> int:
        return self.records[-1].offset_delta if self.records else 0


def _inflate(codec: Compression, data: bytes, limit: int) -> bytes:
    try:
        return inflate(codec, data, limit)
    except CorruptCompression as error:
        raise CorruptBatch(str(error)) from None


def _decode_records(data: bytes, count: int, base_timestamp: int) -> tuple[Record, ...]:
    """`count` records from `data`, all of it. One loop with the varints read inline:
    a method call per field made decoding the largest cost of a Produce."""
    end = len(data)
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            if at >= end or shift > 63:
                raise MalformedRequest("record varint runs past the batch")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7

    def chunk(length: int) -> bytes:
        nonlocal at
        if at + length > end:
            raise MalformedRequest(f"record field of {length} bytes runs past the batch")
        value = data[at : at + length]
        at += length
        return value

    records = []
    for _ in range(count):
        length = varint()
        if length < 0 or at + length > end:
            raise MalformedRequest(f"record of {length} bytes in {end - at}")
        record_end = at + length
        at += 1  # attributes: unused
        # The usual one-byte varints inline (a call per field was most of the cost).
        byte = data[at] if at < end else 0x80
        if byte < 0x80:
            at += 1
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
        else:
            timestamp_delta = varint()
        byte = data[at] if at < end else 0x80
        if byte < 0x80:
            at += 1
            offset_delta = (byte >> 1) ^ -(byte & 1)
        else:
            offset_delta = varint()
        if at < end and data[at] == 0x01:  # a null key, the common case
            at += 1
            key = None
        else:
            key_length = varint()
            key = chunk(key_length) if key_length >= 0 else None
        value_length = varint()
        value = chunk(value_length) if value_length >= 0 else None
        if at < end and data[at] == 0x00:  # no headers, the common case
            at += 1
            header_count = 0
        else:
            header_count = varint()
        headers = []
        for _ in range(header_count):
            name_length = varint()
            try:
                name = str(chunk(name_length), "utf-8")
            except UnicodeDecodeError:
                raise MalformedRequest("record header name is not UTF-8") from None
            header_length = varint()
            headers.append((name, chunk(header_length) if header_length >= 0 else None))
        if at != record_end:
            raise MalformedRequest("record length disagrees with its fields")
        records.append(
            Record(offset_delta, base_timestamp + timestamp_delta, key, value, tuple(headers))
        )
    if at != end:
        raise MalformedRequest(f"{end - at} bytes after the batch's last record")
    return tuple(records)


def decode_batches(
    data: bytes,
    max_records_bytes: int = DEFAULT_MAX_RECORDS_BYTES,
    budget: InflationBudget | None = None,
) -> list[RecordBatch]:
    """Every batch of a Produce's records; CorruptBatch, MalformedRequest,
    UnsupportedCompression or RecordsTooLarge (a compressed batch's records
    decompress past `max_records_bytes`, or the batches together past what
    `budget`, the request's, has left) when one does not decode."""
    batches: list[RecordBatch] = []
    at = 0
    view = memoryview(data)
    while at < len(data):
        if len(data) - at < HEADER_SIZE:
            raise CorruptBatch(f"{len(data) - at} bytes left, less than a batch header")
        base_offset, length, _epoch, magic, crc = _PREFIX.unpack_from(view, at)
        end = at + _LENGTH_START + length
        if magic != MAGIC:
            raise CorruptBatch(f"record batch magic {magic}: only v2 batches are accepted")
        if length < HEADER_SIZE - _LENGTH_START or end > len(data):
            raise CorruptBatch(f"batch length {length} does not fit the request")
        if crc32c.crc32c(view[at + _CRC_START : end]) != crc:
            raise CorruptBatch("record batch CRC-32C mismatch")
        (attributes, _last_delta, first_ts, _max_ts, producer_id, epoch, base_seq, count) = (
            _BODY.unpack_from(view, at + _PREFIX.size)
        )
        if not 0 <= count <= _MAX_RECORDS:
            raise CorruptBatch(f"record count {count}")
        try:
            codec = Compression(attributes & _COMPRESSION_MASK)
        except ValueError:
            raise CorruptBatch(f"unknown compression {attributes & 7}") from None
        limit = max_records_bytes
        if budget is not None:
            # The count is known before any byte is inflated: its objects first.
            budget.charge(count * RECORD_COST_BYTES)
            limit = min(limit, budget.left)
        try:
            raw = _inflate(codec, bytes(view[at + HEADER_SIZE : end]), limit)
        except RecordsTooLarge:
            if budget is not None and limit < max_records_bytes:
                raise budget.refusal() from None
            raise
        if budget is not None:
            budget.charge(len(raw))
        records = _decode_records(raw, count, first_ts)
        del raw
        batches.append(
            RecordBatch(
                base_offset,
                records,
                producer_id,
                epoch,
                base_seq,
                bool(attributes & TRANSACTIONAL),
                bool(attributes & CONTROL),
                codec,
            )
        )
        at = end
    return batches


def _encode_record(record: Record, base_timestamp: int) -> bytes:
    parts = [
        b"\x00",
        encode_varint(record.timestamp_ms - base_timestamp),
        encode_varint(record.offset_delta),
    ]
    for field in (record.key, record.value):
        if field is None:
            parts.append(encode_varint(-1))
        else:
            parts += (encode_varint(len(field)), field)
    parts.append(encode_varint(len(record.headers)))
    for name, value in record.headers:
        encoded = name.encode()
        parts += (encode_varint(len(encoded)), encoded)
        if value is None:
            parts.append(encode_varint(-1))
        else:
            parts += (encode_varint(len(value)), value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_batch(batch: RecordBatch) -> bytes:
    """One v2 batch, CRC-32C included."""
    assert batch.records, "a batch holds at least one record"
    timestamps = [record.timestamp_ms for record in batch.records]
    first_ts = timestamps[0]
    records = deflate(
        batch.compression, b"".join(_encode_record(r, first_ts) for r in batch.records)
    )
    attributes = (
        batch.compression
        | (TRANSACTIONAL if batch.transactional else 0)
        | (CONTROL if batch.control else 0)
    )
    body = (
        _BODY.pack(
            attributes,
            batch.last_offset_delta,
            first_ts,
            max(timestamps),
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            len(batch.records),
        )
        + records
    )
    crc = crc32c.crc32c(body)
    length = len(body) + _PREFIX.size - _LENGTH_START
    return _PREFIX.pack(batch.base_offset, length, -1, MAGIC, crc) + body


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def control_batch(
    offset: int, control: ControlType, producer_id: int, producer_epoch: int, timestamp_ms: int
) -> RecordBatch:
    """The control batch of a transaction marker at `offset`."""
    record = Record(
        0,
        timestamp_ms,
        _CONTROL_KEY.pack(0, control),
        _CONTROL_VALUE.pack(0, 0),
    )
    return RecordBatch(
        offset,
        (record,),
        producer_id,
        producer_epoch,
        NO_SEQUENCE,
        transactional=True,
        control=True,
    )
