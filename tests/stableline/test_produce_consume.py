"""Plain messages through a real broker process: every subscription type, acks, seek, readers."""

from __future__ import annotations

import time

import pytest

import stableline
from stableline import ConsumerType, InitialPosition, IsolationLevel, MessageId

EARLIEST = InitialPosition.Earliest


def _send(client, topic: str, count: int, prefix: str = "m") -> list[MessageId]:
    producer = client.create_producer(topic)
    ids = [producer.send(f"{prefix}{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def _drain(consumer, count: int, ack: bool = True) -> list[stableline.Message]:
    messages = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=5000)
        messages.append(message)
        if ack:
            consumer.acknowledge(message)
    return messages


@pytest.mark.parametrize(
    "consumer_type", [ConsumerType.Exclusive, ConsumerType.Shared, ConsumerType.Failover]
)
def test_round_trip_keeps_order_for_each_subscription_type(client, consumer_type):
    consumer = client.subscribe(
        "round-trip", "sub", consumer_type=consumer_type, initial_position=EARLIEST
    )
    producer = client.create_producer("round-trip")
    sent = [f"v{i}".encode() for i in range(300)]
    for value in sent:
        producer.send_async(
            value, lambda error, _id: None, properties={"k": "v"}, partition_key="key"
        )
    producer.flush()
    received = _drain(consumer, len(sent))
    assert [m.data() for m in received] == sent
    assert [m.message_id() for m in received] == sorted(m.message_id() for m in received)
    assert received[0].properties() == {"k": "v"}
    assert received[0].partition_key() == "key"
    assert received[0].txn_id() is None
    assert received[0].publish_timestamp() > 0
    with pytest.raises(stableline.Timeout):
        consumer.receive(timeout_millis=200)


def test_latest_subscription_sees_only_messages_sent_after_it(client):
    _send(client, "latest", 3, "old")
    consumer = client.subscribe("latest", "sub")
    _send(client, "latest", 2, "new")
    assert [m.data() for m in _drain(consumer, 2)] == [b"new0", b"new1"]


def test_unacked_messages_are_redelivered_to_the_next_consumer(client):
    _send(client, "redeliver", 5)
    consumer = client.subscribe("redeliver", "sub", initial_position=EARLIEST)
    first = _drain(consumer, 5, ack=False)
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.close()
    consumer = client.subscribe("redeliver", "sub", initial_position=EARLIEST)
    again = _drain(consumer, 3)
    assert [m.data() for m in again] == [b"m1", b"m3", b"m4"]


def test_negative_ack_redelivers_after_the_delay(client):
    _send(client, "nack", 2)
    consumer = client.subscribe(
        "nack",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        negative_ack_redelivery_delay_ms=100,
    )
    first = consumer.receive(5000)
    consumer.negative_acknowledge(first)
    second = consumer.receive(5000)
    consumer.acknowledge(second)
    again = consumer.receive(5000)
    assert again.data() == first.data()
    assert again.redelivery_count() == 1


def test_ack_timeout_redelivers_unacknowledged_messages(client):
    _send(client, "ack-timeout", 1)
    consumer = client.subscribe(
        "ack-timeout",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        ack_timeout_ms=200,
    )
    first = consumer.receive(5000)
    again = consumer.receive(5000)
    assert again.message_id() == first.message_id()
    consumer.acknowledge(again)
    with pytest.raises(stableline.Timeout):
        consumer.receive(timeout_millis=500)


def test_cumulative_ack_acknowledges_everything_before(client, broker):
    _send(client, "cumulative", 10)
    consumer = client.subscribe("cumulative", "sub", initial_position=EARLIEST)
    messages = _drain(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(messages[5])
    consumer.close()
    consumer = client.subscribe("cumulative", "sub")
    assert [m.data() for m in _drain(consumer, 4)] == [b"m6", b"m7", b"m8", b"m9"]


def test_shared_subscription_splits_messages_between_consumers(client):
    one = client.subscribe(
        "shared",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        receiver_queue_size=10,
    )
    two = client.subscribe(
        "shared",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        receiver_queue_size=10,
    )
    producer = client.create_producer("shared", batching_max_messages=1)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), lambda error, _id: None)
    producer.flush()
    seen: list[bytes] = []
    counts = {}
    for name, consumer in (("one", one), ("two", two)):
        counts[name] = 0
        while True:
            batch = consumer.batch_receive(max_num_messages=100, timeout_millis=300)
            if not batch:
                break
            consumer.acknowledge(batch)
            seen += [m.data() for m in batch]
            counts[name] += len(batch)
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(100))
    assert counts["one"] > 0 and counts["two"] > 0


def test_failover_moves_to_the_standby_when_the_active_consumer_leaves(client):
    active = client.subscribe(
        "failover",
        "sub",
        consumer_type=ConsumerType.Failover,
        initial_position=EARLIEST,
        consumer_name="a",
    )
    standby = client.subscribe(
        "failover",
        "sub",
        consumer_type=ConsumerType.Failover,
        initial_position=EARLIEST,
        consumer_name="b",
    )
    _send(client, "failover", 6)
    got = _drain(active, 3)
    with pytest.raises(stableline.Timeout):
        standby.receive(timeout_millis=200)
    active.close()
    rest = _drain(standby, 3)
    assert [m.data() for m in got + rest] == [f"m{i}".encode() for i in range(6)]


def test_seek_to_message_id_and_to_time_replays(client):
    ids = _send(client, "seek", 5)
    consumer = client.subscribe("seek", "sub", initial_position=EARLIEST)
    _drain(consumer, 5)
    consumer.seek(ids[2])
    assert [m.data() for m in _drain(consumer, 3)] == [b"m2", b"m3", b"m4"]
    consumer.seek(MessageId.earliest)
    assert _drain(consumer, 1)[0].data() == b"m0"
    consumer.seek(int(time.time() * 1000) + 60_000)
    with pytest.raises(stableline.Timeout):
        consumer.receive(timeout_millis=200)
    consumer.seek(0)
    assert _drain(consumer, 1)[0].data() == b"m0"


def test_reader_reads_from_earliest_latest_and_a_message_id(client):
    ids = _send(client, "reader", 4)
    reader = client.create_reader("reader", MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(4)] == [b"m0", b"m1", b"m2", b"m3"]
    assert not reader.has_message_available()
    after = client.create_reader("reader", ids[1])
    assert after.read_next(5000).data() == b"m2"
    latest = client.create_reader("reader", MessageId.latest)
    assert not latest.has_message_available()
    _send(client, "reader", 1, "late")
    assert latest.read_next(5000).data() == b"late0"
    assert reader.read_next(5000).data() == b"late0"
    assert client.get_last_message_id("reader").entry_id == 4


def test_reader_waits_for_a_topic_that_does_not_exist_yet(client):
    reader = client.create_reader("not-yet", MessageId.earliest)
    with pytest.raises(stableline.Timeout):
        reader.read_next(timeout_millis=200)
    _send(client, "not-yet", 1)
    assert reader.read_next(5000).data() == b"m0"


def test_subscription_keeps_its_isolation_level_and_refuses_the_other(client):
    client.subscribe("levels", "monitor", isolation_level=IsolationLevel.READ_UNCOMMITTED).close()
    with pytest.raises(stableline.IsolationLevelMismatch, match="READ_UNCOMMITTED"):
        client.subscribe("levels", "monitor", isolation_level=IsolationLevel.READ_COMMITTED)
    consumer = client.subscribe(
        "levels", "monitor", isolation_level=IsolationLevel.READ_UNCOMMITTED
    )
    _send(client, "levels", 1)
    assert consumer.receive(5000).data() == b"m0"


def test_a_closed_consumers_subscription_can_be_taken_again_at_once(client):
    # close() returns once the broker has let go of the consumer: a bare cancel of
    # the stream raced the next subscribe (24 of 1,000 rounds refused SubscriptionBusy
    # with two busy loops beside the broker).
    for round_ in range(200):
        topic = f"retaken-{round_}"
        client.subscribe(topic, "monitor", isolation_level=IsolationLevel.READ_UNCOMMITTED).close()
        with pytest.raises(stableline.IsolationLevelMismatch):
            client.subscribe(topic, "monitor", isolation_level=IsolationLevel.READ_COMMITTED)
        client.subscribe(topic, "monitor", isolation_level=IsolationLevel.READ_UNCOMMITTED).close()


def test_acks_and_subscriptions_survive_a_restart(broker):
    with stableline.Client(broker.service_url) as client:
        _send(client, "restart", 6)
        consumer = client.subscribe(
            "restart",
            "sub",
            initial_position=EARLIEST,
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
        )
        _drain(consumer, 3)
        consumer.close()
    broker.restart()
    with stableline.Client(broker.service_url) as client:
        with pytest.raises(stableline.IsolationLevelMismatch):
            client.subscribe("restart", "sub")
        consumer = client.subscribe(
            "restart", "sub", isolation_level=IsolationLevel.READ_UNCOMMITTED
        )
        assert [m.data() for m in _drain(consumer, 3)] == [b"m3", b"m4", b"m5"]
        _send(client, "restart", 1, "after")
        assert consumer.receive(5000).data() == b"after0"


def test_unsubscribe_removes_the_subscription(client, broker):
    consumer = client.subscribe("unsub", "sub", initial_position=EARLIEST)
    _send(client, "unsub", 2)
    consumer.unsubscribe()
    consumer = client.subscribe("unsub", "sub")  # Latest: the old position is gone
    with pytest.raises(stableline.Timeout):
        consumer.receive(timeout_millis=200)


def test_batch_receive_cuts_entries_and_acking_every_cut_acks_them_whole(client, broker, wait):
    producer = client.create_producer("cut", batching_max_messages=10)
    for i in range(20):
        producer.send_async(f"m{i}".encode(), lambda error, _id: None)
    producer.flush()  # two entries of 10 messages
    consumer = client.subscribe("cut", "sub", initial_position=EARLIEST)
    received = []
    while len(received) < 20:
        batch = consumer.batch_receive(max_num_messages=3, timeout_millis=5000)
        assert 0 < len(batch) <= 3
        consumer.acknowledge(batch)
        received += batch.values()
    assert received == [f"m{i}".encode() for i in range(20)]
    stats = "/admin/v2/persistent/public/default/cut/stats"
    wait(lambda: broker.admin(stats)["subscriptions"]["sub"]["msgBacklog"] == 0)
    consumer.close()
    again = client.subscribe("cut", "sub", initial_position=EARLIEST)
    assert not again.batch_receive(max_num_messages=3, timeout_millis=300)
