"""Stableline entries <-> Kafka record batches.

Produce: a Kafka batch becomes one entry per run of records with one key (an
entry holds messages of at most one key, for Key_Shared dispatch), each entry's
payload a MessageBatch: value -> payload, key -> partition key, headers ->
properties, timestamp -> event time. A null value is stored as an empty payload
(there is no tombstone yet); a key or header value that is not UTF-8 is refused
(stableline keys and properties are text). A transactional batch's entries are
in the stableline transaction its producer has open.
Fetch: an entry becomes one batch at its base offset. A transaction's entries
and markers carry the transaction's own producer id (producer_ids.py), marked
transactional, whoever wrote them; a marker becomes a control batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dispatcher import key_hash
from managed_ledger import Entry, EntryHeader, EntryType, TxnId
from stableline._proto import broker_pb2 as pb
from stableline.broker.errors import BrokerError
from stableline.broker.kafka.coordinator.producer_ids import SDK_TXN_EPOCH, sdk_txn_producer_id
from stableline.broker.kafka.protocol.codec import encode_uvarint
from stableline.broker.kafka.protocol.records import (
    ControlType,
    Record,
    RecordBatch,
    control_batch,
    encode_batch,
)
from stableline.wire import plain_layout


class InvalidRecord(BrokerError, ValueError):
    """A record stableline cannot store as it is (INVALID_RECORD)."""

    code = "InvalidArgument"


@dataclass(frozen=True, slots=True)
class EntryToWrite:
    header: EntryHeader
    payload: bytes
    # The offset delta of the entry's last record within its Kafka batch.
    last_offset_delta: int


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRecord(f"record {what} is not UTF-8 text") from None


def _field(tag: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return bytes((tag,)) + encode_uvarint(len(data)) + data


def _message(record: Record) -> bytes:
    """One MessageBatch `messages` field (a SingleMessage), written by hand: the
    bytes protobuf would parse, without an object per record."""
    parts = []
    if record.value:
        parts.append(_field(0x0A, record.value))  # payload = 1
    if record.key is not None:
        _text(record.key, "key")
        if record.key:
            parts.append(_field(0x12, record.key))  # partition_key = 2
        parts.append(b"\x28\x01")  # has_partition_key = 5
    for name, value in record.headers:
        encoded = b"" if value is None else value
        _text(encoded, f"header {name!r}")
        parts.append(_field(0x1A, _field(0x0A, name.encode()) + _field(0x12, encoded)))
    if record.timestamp_ms:
        parts.append(b"\x20" + encode_uvarint(record.timestamp_ms & _U64))  # event_time_ms
    return _field(0x0A, b"".join(parts))


_U64 = (1 << 64) - 1


def batch_to_entries(
    batch: RecordBatch, producer_name: str = "", txn_id: TxnId | None = None
) -> list[EntryToWrite]:
    """The entries a produced batch is stored as, in order. With a producer name
    (an idempotent producer), each entry's sequence id is its last record's; with a
    transaction (a transactional batch), each entry is in it."""
    now_ms = int(time.time() * 1000)
    runs: list[list[Record]] = []
    for record in batch.records:
        if runs and runs[-1][0].key == record.key:
            runs[-1].append(record)
        else:
            runs.append([record])
    entries = []
    for run in runs:
        key = _text(run[0].key, "key") if run[0].key is not None else None
        last_delta = run[-1].offset_delta
        header = EntryHeader(
            num_messages=len(run),
            publish_time_ms=now_ms,
            producer_name=producer_name,
            sequence_id=batch.base_sequence + last_delta if producer_name else -1,
            key_hash=key_hash(key) if key is not None else None,
            txn_id=txn_id,
        )
        payload = b"".join(_message(record) for record in run)
        entries.append(EntryToWrite(header, payload, last_delta))
    return entries


def entry_to_batch(entry: Entry, base_offset: int) -> bytes:
    """The Kafka batch of one entry at its base offset."""
    header = entry.header
    txn_id = header.txn_id
    producer_id = sdk_txn_producer_id(txn_id) if txn_id is not None else -1
    epoch = SDK_TXN_EPOCH if txn_id is not None else -1
    if header.type is not EntryType.DATA:
        control = ControlType.COMMIT if header.type is EntryType.TXN_COMMIT else ControlType.ABORT
        return encode_batch(
            control_batch(base_offset, control, producer_id, epoch, header.publish_time_ms)
        )
    payload = entry.payload
    layout = plain_layout(payload)
    if layout is not None:  # plain messages of one length, as SDK producers write them
        prefix, stride = layout
        timestamp = header.publish_time_ms
        records = tuple(
            Record(index, timestamp, None, payload[at + prefix : at + stride])
            for index, at in enumerate(range(0, len(payload), stride))
        )
        return _batch(base_offset, records, producer_id, epoch, txn_id is not None)
    messages = pb.MessageBatch.FromString(payload).messages
    records = tuple(
        Record(
            index,
            message.event_time_ms or header.publish_time_ms,
            message.partition_key.encode() if message.has_partition_key else None,
            message.payload,
            # An empty map's items() still cost microseconds: asked only when set.
            tuple((name, value.encode()) for name, value in message.properties.items())
            if message.properties
            else (),
        )
        for index, message in enumerate(messages)
    )
    return _batch(base_offset, records, producer_id, epoch, txn_id is not None)


def _batch(
    base_offset: int,
    records: tuple[Record, ...],
    producer_id: int,
    epoch: int,
    transactional: bool,
) -> bytes:
    if not records:
        return b""
    return encode_batch(
        RecordBatch(base_offset, records, producer_id, epoch, transactional=transactional)
    )
