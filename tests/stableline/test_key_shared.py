"""Key_Shared through a real broker: real consumers, messages held across joins and leaves.

Each key's messages reach one consumer at a time, in send order: a consumer that
takes over a key gets nothing of it until the one before has acknowledged (or given
back) what it held. Stats show the hashes draining and each consumer's ranges.
"""

from __future__ import annotations

import itertools
import json

import pytest

import stableline
from dispatcher import key_hash, sticky_hash
from stableline import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    KeySharedMode,
    KeySharedPolicy,
)
from stableline._proto import admin_pb2 as admin_pb
from stableline._proto import admin_pb2_grpc

EARLIEST = InitialPosition.Earliest
KEYS = [f"k{i}" for i in range(16)]
TOPIC = "persistent://public/default/keyed"


def _subscribe(client, name: str, level=IsolationLevel.READ_COMMITTED, **options):
    return client.subscribe(
        TOPIC,
        "ks",
        consumer_type=ConsumerType.KeyShared,
        initial_position=EARLIEST,
        isolation_level=level,
        consumer_name=name,
        **options,
    )


def _send(client, rounds: int, start: int = 0, txn=None) -> None:
    """`rounds` messages for every key; each value is "key:sequence"."""
    producer = client.create_producer(TOPIC, batching_max_publish_delay_ms=5)
    for sequence in range(start, start + rounds):
        for key in KEYS:
            producer.send_async(
                f"{key}:{sequence}".encode(), lambda error, _id: None, partition_key=key, txn=txn
            )
    producer.flush()
    producer.close()


def _receive(consumer, count: int) -> list[stableline.Message]:
    return [consumer.receive(timeout_millis=10_000) for _ in range(count)]


def _parsed(messages) -> list[tuple[str, int]]:
    pairs = []
    for message in messages:
        key, sequence = message.value().decode().split(":")
        assert key == message.partition_key()
        pairs.append((key, int(sequence)))
    return pairs


def _stats(broker) -> dict:
    return broker.admin("/admin/v2/persistent/public/default/keyed/stats")["subscriptions"]["ks"]


def _consumer_stats(stats: dict, name: str) -> dict:
    return next(c for c in stats["consumers"] if c["consumerName"] == name)


def _owns(stats: dict, name: str, key: str) -> bool:
    wanted = sticky_hash(key_hash(key))
    return any(s <= wanted <= e for s, e in _consumer_stats(stats, name)["keyHashRangeArrays"])


def _assert_per_key_order(received: dict[str, list[tuple[str, int]]], rounds: int) -> None:
    """Every message once; each consumer sees each key in order; a key that moved from
    one consumer to another moved once, at a point in its sequence."""
    for key in KEYS:
        got = {name: [s for k, s in pairs if k == key] for name, pairs in received.items()}
        assert sorted(s for seqs in got.values() for s in seqs) == list(range(rounds)), key
        holders = [seqs for seqs in got.values() if seqs]
        for seqs in holders:
            assert seqs == sorted(seqs), f"{key} out of order: {seqs}"
        holders.sort()
        for before, after in itertools.pairwise(holders):
            assert before[-1] < after[0], f"{key} interleaved between consumers: {holders}"


@pytest.mark.parametrize("level", [IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED])
def test_a_joining_consumer_gets_a_moved_key_only_after_the_old_owner_acks(
    broker, client, wait, level
):
    first = _subscribe(client, "first", level)
    _send(client, 5)
    held = _receive(first, 5 * len(KEYS))  # every key held, none acknowledged
    second = _subscribe(client, "second", level)
    _send(client, 5, start=5)

    wait(
        lambda: (
            _stats(broker)["drainingHashesCount"] > 0
            and _stats(broker)["lookAheadEntries"] > 0
            and _consumer_stats(_stats(broker), "first")["msgOutCounter"]
            + _stats(broker)["lookAheadEntries"]
            == 10 * len(KEYS)
        ),
        message="the second consumer's keys kept aside while they drain",
    )
    stats = _stats(broker)
    assert _consumer_stats(stats, "second")["msgOutCounter"] == 0
    assert _consumer_stats(stats, "first")["drainingHashesCount"] == stats["drainingHashesCount"]
    assert stats["keySharedMode"] == "AUTO_SPLIT"
    moved = [k for k in KEYS if _owns(stats, "second", k)]
    assert moved, "the second consumer owns some of the keys"

    for message in held:
        first.acknowledge(message)
    second_got = _receive(second, 5 * len(moved))
    first_got = _receive(first, 5 * (len(KEYS) - len(moved)))
    for message in second_got + first_got:
        (second if message in second_got else first).acknowledge(message)
    _assert_per_key_order(
        {"first": _parsed(held) + _parsed(first_got), "second": _parsed(second_got)}, 10
    )
    assert {k for k, _ in _parsed(second_got)} == set(moved)
    wait(lambda: _stats(broker)["drainingHashesCount"] == 0, message="nothing draining")


def test_a_consumer_closing_with_unacked_messages_hands_its_keys_over_in_order(client):
    leaving = _subscribe(client, "leaving")
    _send(client, 4)
    held = _receive(leaving, 2 * len(KEYS))  # the first half, held; the rest is prefetched
    staying = _subscribe(client, "staying")
    leaving.close()

    got = _receive(staying, 4 * len(KEYS))
    assert all(m.redelivery_count() == 1 for m in got if _parsed([m])[0][1] < 4)
    _assert_per_key_order({"staying": _parsed(got)}, 4)
    assert len(held) == 2 * len(KEYS)


def test_nacked_messages_come_back_before_later_ones_of_their_key(client):
    first = _subscribe(client, "first", negative_ack_redelivery_delay_ms=0)
    _send(client, 3)
    held = _receive(first, 3 * len(KEYS))
    second = _subscribe(client, "second", negative_ack_redelivery_delay_ms=0)
    _send(client, 2, start=3)
    for message in held:
        first.negative_acknowledge(message)

    received: dict[str, list] = {"first": [], "second": []}
    total = 5 * len(KEYS)
    while len(received["first"]) + len(received["second"]) < total:
        for name, consumer in (("first", first), ("second", second)):
            try:
                message = consumer.receive(timeout_millis=50)
            except stableline.Timeout:
                continue
            consumer.acknowledge(message)
            received[name].append(message)
    parsed = {name: _parsed(messages) for name, messages in received.items()}
    # A key that moved reaches its new owner in order: what came back first, then the
    # later messages, kept aside until then. (A key that stayed may see its own nacked
    # messages after later ones it had prefetched, as with any nack.)
    moved = {k for k, _ in parsed["second"]}
    assert moved, "the second consumer owns some of the keys"
    for key in moved:
        assert [s for k, s in parsed["second"] if k == key] == list(range(5)), key
        assert [s for k, s in parsed["first"] if k == key] == [], key
    assert sorted(p for pairs in parsed.values() for p in pairs) == sorted(
        (k, s) for k in KEYS for s in range(5)
    )


def test_a_transaction_committed_after_a_rebalance_reaches_each_key_s_new_owner(
    broker, client, wait
):
    first = _subscribe(client, "first")
    txn = client.new_transaction()
    _send(client, 3, txn=txn)
    second = _subscribe(client, "second")
    with pytest.raises(stableline.Timeout):
        first.receive(timeout_millis=100)
    txn.commit()

    stats = _stats(broker)
    moved = [k for k in KEYS if _owns(stats, "second", k)]
    second_got = _parsed(_receive(second, 3 * len(moved)))
    first_got = _parsed(_receive(first, 3 * (len(KEYS) - len(moved))))
    assert {k for k, _ in second_got} == set(moved)
    _assert_per_key_order({"first": first_got, "second": second_got}, 3)


def test_sticky_consumers_get_their_ranges_and_an_overlap_is_refused(broker, client):
    low = _subscribe(
        client, "low", key_shared_policy=KeySharedPolicy(KeySharedMode.Sticky, [(0, 32767)])
    )
    high = _subscribe(
        client,
        "high",
        key_shared_policy=KeySharedPolicy(KeySharedMode.Sticky, [(32768, 65535)]),
    )
    with pytest.raises(stableline.ConsumerAssignError, match="overlaps"):
        _subscribe(
            client, "greedy", key_shared_policy=KeySharedPolicy(KeySharedMode.Sticky, [(100, 200)])
        )
    with pytest.raises(stableline.ConsumerAssignError, match="STICKY consumers"):
        _subscribe(client, "auto")
    _send(client, 2)
    low_keys = [k for k in KEYS if sticky_hash(key_hash(k)) <= 32767]

    low_got = _parsed(_receive(low, 2 * len(low_keys)))
    high_got = _parsed(_receive(high, 2 * (len(KEYS) - len(low_keys))))
    assert {k for k, _ in low_got} == set(low_keys)
    assert {k for k, _ in high_got} == set(KEYS) - set(low_keys)
    stats = _stats(broker)
    assert stats["keySharedMode"] == "STICKY"
    assert _consumer_stats(stats, "low")["keyHashRanges"] == ["[0, 32767]"]
    assert _consumer_stats(stats, "high")["keyHashRangeArrays"] == [[32768, 65535]]


def test_bad_sticky_ranges_are_refused_by_the_client(client):
    with pytest.raises(ValueError, match="invalid"):
        KeySharedPolicy(KeySharedMode.Sticky, [(5, 70000)])
    with pytest.raises(ValueError, match="needs sticky_ranges"):
        KeySharedPolicy(KeySharedMode.Sticky)


def test_grpc_admin_stats_show_key_shared_fields(broker, client):
    import grpc

    consumer = _subscribe(client, "only")
    _send(client, 1)
    _receive(consumer, len(KEYS))
    with grpc.insecure_channel(broker.target) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        response = stub.GetStats(admin_pb.TopicRequest(topic=TOPIC), timeout=10)
    stats = json.loads(response.json)["subscriptions"]["ks"]
    assert stats["drainingHashesCount"] == 0
    assert _consumer_stats(stats, "only")["keyHashRanges"] == ["[0, 65535]"]


def test_a_raw_subscribe_with_a_bad_range_is_invalid_argument_and_the_broker_stays_up(
    broker, client
):
    import grpc

    from stableline._proto import broker_pb2 as pb
    from stableline._proto import broker_pb2_grpc

    request = pb.SubscribeRequest(
        subscribe=pb.SubscribeOpen(
            topic=TOPIC,
            subscription="ks",
            type=pb.SUBSCRIPTION_TYPE_KEY_SHARED,
            key_shared=pb.KeySharedMeta(
                mode=pb.KEY_SHARED_MODE_STICKY, ranges=[pb.HashRange(start=10, end=70000)]
            ),
        )
    )
    with grpc.insecure_channel(broker.target) as channel:
        responses = broker_pb2_grpc.BrokerStub(channel).Subscribe(iter([request]), timeout=10)
        with pytest.raises(grpc.RpcError) as raised:
            next(responses)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "[10, 70000] is invalid" in raised.value.details()
    consumer = _subscribe(client, "after")
    _send(client, 1)
    assert len(_receive(consumer, len(KEYS))) == len(KEYS)
