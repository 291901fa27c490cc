"""The executor's row building: Arrow columns with every message's fields."""

from __future__ import annotations

import pytest

from stableline._proto import broker_pb2 as pb
from stableline.spark._read import _Columns
from stableline.wire import plain_layout

pytest.importorskip("pyarrow")


def _entry(messages: list[pb.SingleMessage]) -> pb.EntryDelivery:
    return pb.EntryDelivery(
        ledger_id=3,
        entry_id=9,
        metadata=pb.EntryMetadata(num_messages=len(messages), publish_time_ms=1_700_000_000_000),
        payload=pb.MessageBatch(messages=messages).SerializeToString(),
    )


@pytest.mark.parametrize(
    "odd_one",
    [
        pb.SingleMessage(payload=b"x" * 10, partition_key="k", has_partition_key=True),
        pb.SingleMessage(payload=b"x" * 10, properties={"a": "b"}),
        pb.SingleMessage(payload=b"x" * 10, event_time_ms=5),
        pb.SingleMessage(payload=b"x" * 11),
    ],
)
def test_rows_carry_each_message_s_key_and_properties(odd_one):
    messages = [pb.SingleMessage(payload=b"x" * 10) for _ in range(64)]
    messages[7] = odd_one
    entry = _entry(messages)

    columns = _Columns("persistent://public/default/t")
    columns.add(entry)
    batch = columns.take().to_pydict()
    assert batch["value"] == [m.payload for m in messages]
    assert batch["message_id"][7] == "3:9:7"
    assert batch["key"][7] == (odd_one.partition_key or None)
    assert dict(batch["properties"][7]) == dict(odd_one.properties)


def test_a_batch_of_plain_payloads_has_no_keys_or_properties():
    entry = _entry([pb.SingleMessage(payload=b"p" * n) for n in (0, 5, 200)])
    columns = _Columns("persistent://public/default/t")
    columns.add(entry)
    batch = columns.take().to_pydict()
    assert batch["value"] == [b"", b"ppppp", b"p" * 200]
    assert batch["key"] == [None] * 3 and batch["properties"] == [[]] * 3
    assert batch["message_id"] == ["3:9:0", "3:9:1", "3:9:2"]


def _plain_entry(entry_id: int, payloads: list[bytes]) -> pb.EntryDelivery:
    entry = _entry([pb.SingleMessage(payload=p) for p in payloads])
    entry.entry_id = entry_id
    return entry


def test_a_batch_that_only_looks_plain_is_decoded():
    # Same stride as plain 8-byte payloads (12 bytes a message), but the second message
    # has 6 bytes and an event time: its prefix differs, so it is decoded.
    messages = [pb.SingleMessage(payload=b"a" * 8) for _ in range(4)]
    messages[1] = pb.SingleMessage(payload=b"b" * 6, event_time_ms=5)
    entry = _entry(messages)
    assert len(entry.payload) == 4 * 12 and plain_layout(entry.payload) is None
    columns = _Columns("persistent://public/default/t")
    columns.add(entry)
    assert columns.take().to_pydict()["value"] == [m.payload for m in messages]


def test_plain_and_decoded_entries_keep_log_order_and_their_ids():
    columns = _Columns("persistent://public/default/t")
    columns.add(_plain_entry(1, [b"x" * 3] * 2))
    columns.add(_plain_entry(2, [b"y" * 3] * 3))  # joined with entry 1: same length
    keyed = _entry([pb.SingleMessage(payload=b"k", partition_key="p", has_partition_key=True)])
    keyed.entry_id = 3
    columns.add(keyed)
    columns.add(_plain_entry(4, [b"z" * 200]))
    columns.add(_plain_entry(5, [b""] * 2))
    batch = columns.take().to_pydict()
    assert batch["value"] == [b"xxx"] * 2 + [b"yyy"] * 3 + [b"k", b"z" * 200, b"", b""]
    assert batch["message_id"] == [
        "3:1:0",
        "3:1:1",
        "3:2:0",
        "3:2:1",
        "3:2:2",
        "3:3:0",
        "3:4:0",
        "3:5:0",
        "3:5:1",
    ]
    assert batch["key"] == [None] * 5 + ["p", None, None, None]
    assert batch["topic"] == ["persistent://public/default/t"] * 9
    assert len(columns) == 0  # taken


def test_only_the_columns_asked_for_are_made():
    columns = _Columns("persistent://public/default/t", ("txn_id", "value"))
    entry = _plain_entry(1, [b"v"] * 3)
    entry.metadata.txn_id.most_bits, entry.metadata.txn_id.least_bits = 7, 8
    columns.add(entry)
    batch = columns.take()
    assert batch.schema.names == ["txn_id", "value"]
    assert batch.to_pydict() == {"txn_id": ["7:8"] * 3, "value": [b"v"] * 3}
