"""The blocking consumer across a broker restart: what its buffer held when the
stream reopened is dropped, so every message reaches the caller exactly once (the
broker's redelivery is the only copy), for one topic and for several."""

from __future__ import annotations

import time

import pytest

import stableline

EARLIEST = stableline.InitialPosition.Earliest
MESSAGES = 3000
WITHIN_S = 60.0


def _fill(client, topic: str, count: int) -> list[bytes]:
    producer = client.create_producer(topic, batching_max_messages=100)
    sent = [f"{topic}-{i}".encode() for i in range(count)]
    for payload in sent:
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    return sent


def _receive_all(consumer, expected: int) -> list[stableline.Message]:
    received = []
    deadline = time.monotonic() + WITHIN_S
    while len(received) < expected:
        assert time.monotonic() < deadline, f"{len(received)} of {expected} received"
        try:
            message = consumer.receive(timeout_millis=1000)
        except stableline.Timeout:
            continue
        received.append(message)
        consumer.acknowledge(message)
    return received


def _subscribed_again(broker, topics: list[str]):
    """Whether every topic's subscription has its consumer back (the stream reopened
    on the restarted broker, which has then redelivered what was unacknowledged)."""

    def subscribed() -> bool:
        for topic in topics:
            stats = broker.admin(f"/admin/v2/persistent/public/default/{topic}/stats")
            subscription = stats["subscriptions"].get("sub")
            if subscription is None or not subscription["consumers"]:
                return False
        return True

    return subscribed


def test_a_restart_under_a_full_buffer_delivers_every_message_once_in_order(broker, wait):
    with stableline.Client(broker.service_url) as client:
        sent = _fill(client, "restarted", MESSAGES)
        consumer = client.subscribe("restarted", "sub", initial_position=EARLIEST)
        before = _receive_all(consumer, 10)  # the buffer now holds a refill's rest
        broker.stop()
        broker.start()
        # The buffer is not drained meanwhile: it holds what the broker redelivers.
        wait(_subscribed_again(broker, ["restarted"]), 30, "the consumer back")
        after = _receive_all(consumer, MESSAGES - len(before))
        with pytest.raises(stableline.Timeout):
            consumer.receive(timeout_millis=500)  # nothing more: no second copy
        assert consumer.is_connected()
        consumer.close()
    assert [m.value() for m in before + after] == sent


def test_a_restart_under_a_consumer_of_several_topics_delivers_every_message_once(broker, wait):
    topics = ["several-a", "several-b"]
    with stableline.Client(broker.service_url) as client:
        sent = {f"persistent://public/default/{t}": _fill(client, t, MESSAGES) for t in topics}
        consumer = client.subscribe(topics, "sub", initial_position=EARLIEST)
        before = _receive_all(consumer, 10)
        broker.stop()
        broker.start()
        wait(_subscribed_again(broker, topics), 30, "the consumers back")
        after = _receive_all(consumer, 2 * MESSAGES - len(before))
        with pytest.raises(stableline.Timeout):
            consumer.receive(timeout_millis=500)
        consumer.close()
    got: dict[str, list[bytes]] = {}
    for message in before + after:
        got.setdefault(message.topic_name(), []).append(message.value())
    assert got == sent
