"""Stableline entries <-> Kafka record batches.

Produce: a Kafka batch becomes one entry per run of records with one key (an
entry holds messages of at most one key, for Key_Shared dispatch), each entry's
payload a MessageBatch: value -> payload, key -> partition key, headers ->
properties, timestamp -> event time. A null value is stored as an empty payload
(there is no tombstone yet); a key or header value that is not UTF-8 is refused
(stableline keys and properties are text).
Fetch: an entry becomes one batch at its base offset. A transaction's entries
and markers carry the transaction's own producer id (producer_ids.py), marked
transactional; a marker becomes a control batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dispatcher import key_hash
from managed_ledger import Entry, EntryHeader, EntryType
from stableline._proto import broker_pb2 as pb
from stableline.kafka.producer_ids import SDK_TXN_EPOCH, sdk_txn_producer_id
from stableline.kafka.records import (
    ControlType,
    Record,
    RecordBatch,
    control_batch,
    encode_batch,
)


class InvalidRecord(ValueError):
    """A record stableline cannot store as it is (INVALID_RECORD)."""


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


def _message(record: Record) -> pb.SingleMessage:
    message = pb.SingleMessage(payload=record.value or b"", event_time_ms=record.timestamp_ms)
    if record.key is not None:
        message.partition_key = _text(record.key, "key")
        message.has_partition_key = True
    for name, value in record.headers:
        message.properties[name] = "" if value is None else _text(value, f"header {name!r}")
    return message


def batch_to_entries(batch: RecordBatch, producer_name: str = "") -> list[EntryToWrite]:
    """The entries a produced batch is stored as, in order. With a producer name
    (an idempotent producer), each entry's sequence id is its last record's."""
    now_ms = int(time.time() * 1000)
    runs: list[list[Record]] = []
    for record in batch.records:
        if runs and runs[-1][0].key == record.key:
            runs[-1].append(record)
        else:
            runs.append([record])
    entries = []
    for run in runs:
        messages = [_message(record) for record in run]
        key = messages[0].partition_key if messages[0].has_partition_key else None
        last_delta = run[-1].offset_delta
        header = EntryHeader(
            num_messages=len(run),
            publish_time_ms=now_ms,
            producer_name=producer_name,
            sequence_id=batch.base_sequence + last_delta if producer_name else -1,
            key_hash=key_hash(key) if key is not None else None,
        )
        payload = pb.MessageBatch(messages=messages).SerializeToString()
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
    messages = pb.MessageBatch.FromString(entry.payload).messages
    records = tuple(
        Record(
            index,
            message.event_time_ms or header.publish_time_ms,
            message.partition_key.encode() if message.has_partition_key else None,
            message.payload,
            tuple((name, value.encode()) for name, value in message.properties.items()),
        )
        for index, message in enumerate(messages)
    )
    if not records:
        return b""
    return encode_batch(
        RecordBatch(
            base_offset,
            records,
            producer_id,
            epoch,
            transactional=txn_id is not None,
        )
    )
