"""Kafka batches <-> stableline entries: what a Kafka producer wrote is what the SDK
reads (payload, key, properties, event time), and back again for Kafka readers."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from managed_ledger import Entry, EntryHeader, EntryType, Position, TxnId
from stableline._proto import broker_pb2 as pb
from stableline.broker.kafka.coordinator.producer_ids import sdk_txn_producer_id
from stableline.broker.kafka.protocol.records import Record, RecordBatch
from stableline.broker.kafka.server.convert import InvalidRecord, batch_to_entries, entry_to_batch

RECORDS = (
    Record(0, 1000, b"k1", b"a", (("trace", b"t1"),)),
    Record(1, 1001, b"k1", b"b", ()),
    Record(2, 1002, None, b"", ()),
    Record(3, 1003, b"k2", b"d", ()),
)


def test_records_become_one_entry_per_run_of_one_key_parsed_by_protobuf():
    entries = batch_to_entries(RecordBatch(0, RECORDS))
    assert [e.header.num_messages for e in entries] == [2, 1, 1]
    assert [e.last_offset_delta for e in entries] == [1, 2, 3]
    assert entries[1].header.key_hash is None and entries[0].header.key_hash is not None
    first = pb.MessageBatch.FromString(entries[0].payload).messages
    assert [m.payload for m in first] == [b"a", b"b"]
    assert first[0].partition_key == "k1" and first[0].has_partition_key
    assert dict(first[0].properties) == {"trace": "t1"}
    assert [m.event_time_ms for m in first] == [1000, 1001]
    [keyless] = pb.MessageBatch.FromString(entries[1].payload).messages
    assert not keyless.has_partition_key and keyless.payload == b""


def test_an_idempotent_producers_entries_carry_its_name_and_last_sequences():
    entries = batch_to_entries(RecordBatch(0, RECORDS, 5, 0, 10), "kafka-5")
    assert [e.header.sequence_id for e in entries] == [11, 12, 13]
    assert {e.header.producer_name for e in entries} == {"kafka-5"}


@pytest.mark.parametrize(
    "record",
    [Record(0, 1, b"\xff", b"v", ()), Record(0, 1, None, b"v", (("h", b"\xfe"),))],
)
def test_a_key_or_header_that_is_not_utf8_is_refused(record):
    with pytest.raises(InvalidRecord, match="not UTF-8"):
        batch_to_entries(RecordBatch(0, (record,)))


def test_an_entry_reads_back_as_the_records_it_was_made_of():
    [entry] = batch_to_entries(RecordBatch(0, RECORDS[:2]))
    stored = Entry(Position(3, 4), entry.header, entry.payload)
    read = DefaultRecordBatch(entry_to_batch(stored, 70))
    assert read.validate_crc() and not read.is_transactional
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read] == [
        (70, 1000, b"k1", b"a", [("trace", b"t1")]),
        (71, 1001, b"k1", b"b", []),
    ]


def test_a_transactions_entries_and_marker_carry_its_own_producer_id():
    txn = TxnId(0, 42)
    [entry] = batch_to_entries(RecordBatch(0, RECORDS[:1]))
    data = Entry(Position(1, 0), EntryHeader(num_messages=1, txn_id=txn), entry.payload)
    marker = Entry(Position(1, 1), EntryHeader(type=EntryType.TXN_ABORT, txn_id=txn), b"")
    read_data = DefaultRecordBatch(entry_to_batch(data, 5))
    read_marker = DefaultRecordBatch(entry_to_batch(marker, 6))
    assert read_data.is_transactional and not read_data.is_control_batch
    assert read_marker.is_control_batch and read_marker.is_transactional
    assert read_data.producer_id == read_marker.producer_id == sdk_txn_producer_id(txn)
    assert sdk_txn_producer_id(txn) >= 2**62
    assert sdk_txn_producer_id(TxnId(0, 43)) != sdk_txn_producer_id(txn)
