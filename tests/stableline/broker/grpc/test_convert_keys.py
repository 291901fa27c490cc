"""The broker's edge for keys: a send's key becomes the stored hash; Key_Shared policies."""

from __future__ import annotations

import pytest

from dispatcher import HashRange, KeySharedMode, KeySharedPolicy, key_hash
from stableline._proto import broker_pb2 as pb
from stableline.broker.grpc import convert


def _send(**key) -> pb.ProducerSend:
    return pb.ProducerSend(sequence_id=1, metadata=pb.EntryMetadata(num_messages=1), **key)


def test_a_send_with_a_key_stores_its_hash_and_one_without_stores_none():
    assert convert.header_from_send(_send(), "p").key_hash is None
    keyed = convert.header_from_send(_send(partition_key="acct-7", has_partition_key=True), "p")
    assert keyed.key_hash == key_hash("acct-7")
    empty = convert.header_from_send(_send(partition_key="", has_partition_key=True), "p")
    assert empty.key_hash == key_hash("")


def test_key_shared_meta_becomes_a_policy():
    meta = pb.KeySharedMeta(mode=pb.KEY_SHARED_MODE_STICKY, ranges=[pb.HashRange(start=0, end=99)])
    assert convert.key_shared_policy(meta) == KeySharedPolicy(
        KeySharedMode.STICKY, (HashRange(0, 99),)
    )
    assert convert.key_shared_policy(pb.KeySharedMeta()) == KeySharedPolicy()


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (pb.KeySharedMeta(mode=7), "unknown Key_Shared mode"),
        (pb.KeySharedMeta(mode=pb.KEY_SHARED_MODE_STICKY), "at least one hash range"),
        (
            pb.KeySharedMeta(
                mode=pb.KEY_SHARED_MODE_STICKY, ranges=[pb.HashRange(start=9, end=70000)]
            ),
            "invalid",
        ),
    ],
)
def test_bad_key_shared_meta_is_a_value_error(meta, message):
    with pytest.raises(ValueError, match=message):
        convert.key_shared_policy(meta)
