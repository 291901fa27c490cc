"""The executor's row building: Arrow columns with every message's fields."""

from __future__ import annotations

import pytest

from stableline._proto import broker_pb2 as pb
from stableline.spark._read import _Columns

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
