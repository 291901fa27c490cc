"""Limits and back-pressure against a real broker: each limit is hit, refuses or holds
with a clear error, loses nothing, and the broker stays up.

One broker with small limits serves the module (each test uses its own topics and
clients); the connection limit, which would get in every other test's way, has a
broker of its own.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from stableline import ConsumerType, InitialPosition, aio
from stableline.testing import BrokerProcess
from tests.conftest import wait_until

EARLIEST = InitialPosition.Earliest
PER_CONSUMER = 10
PER_SUBSCRIPTION = 15
MAX_CONSUMERS = 2
MAX_OPEN_TXNS = 5
MAX_OPEN_TXNS_PER_CLIENT = 3
MAX_PENDING_PUBLISHES = 4
HELD_TOPIC = "held"  # its appends wait at a failpoint until SIGUSR1
# Time given to a consumer to show that nothing more arrives while it is blocked.
QUIET_MS = 300


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("limits") / "data",
        env={
            "STABLELINE_MAX_UNACKED_MESSAGES_PER_CONSUMER": str(PER_CONSUMER),
            "STABLELINE_MAX_UNACKED_MESSAGES_PER_SUBSCRIPTION": str(PER_SUBSCRIPTION),
            "STABLELINE_MAX_CONSUMERS_PER_SUBSCRIPTION": str(MAX_CONSUMERS),
            "STABLELINE_MAX_OPEN_TRANSACTIONS": str(MAX_OPEN_TXNS),
            "STABLELINE_MAX_OPEN_TRANSACTIONS_PER_CLIENT": str(MAX_OPEN_TXNS_PER_CLIENT),
            "STABLELINE_MAX_PENDING_PUBLISHES_PER_PRODUCER": str(MAX_PENDING_PUBLISHES),
            "STABLELINE_FAILPOINTS": f"publish:persistent://public/default/{HELD_TOPIC}",
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        code = broker.stop()
        assert code == 0, f"broker exited with {code}\n{broker.log()}"


def healthy(broker: BrokerProcess) -> bool:
    with urllib.request.urlopen(broker.http_url + "/admin/v2/brokers/health") as response:
        return response.status == 200 and response.read() == b"ok"


def subscription_stats(broker: BrokerProcess, topic: str, subscription: str) -> dict:
    stats = broker.admin(f"/admin/v2/persistent/public/default/{topic}/stats")
    return stats["subscriptions"][subscription]


def produce(client: stableline.Client, topic: str, count: int) -> list[bytes]:
    """`count` messages, one entry each, all acknowledged."""
    producer = client.create_producer(topic, batching_max_messages=1)
    values = [f"{topic}-{i}".encode() for i in range(count)]
    for value in values:
        producer.send_async(value, lambda error, _id: None)
    producer.flush()
    producer.close()
    return values


def receive_until_quiet(consumer, limit: int = 1000) -> list:
    messages = []
    while len(messages) < limit:
        try:
            messages.append(consumer.receive(timeout_millis=QUIET_MS))
        except stableline.Timeout:
            break
    return messages


# ---------------------------------------------------------------- unacked messages


def test_consumer_at_max_unacked_gets_nothing_more_until_its_acks_halve_the_count(limited):
    with stableline.Client(limited.service_url) as client:
        consumer = client.subscribe(
            "unacked-consumer", "sub", initial_position=EARLIEST, receiver_queue_size=100
        )
        sent = produce(client, "unacked-consumer", 30)

        first = receive_until_quiet(consumer)
        assert len(first) == PER_CONSUMER
        stats = subscription_stats(limited, "unacked-consumer", "sub")
        assert stats["consumers"][0]["blockedConsumerOnUnackedMsgs"] is True
        assert stats["consumers"][0]["unackedMessages"] == PER_CONSUMER
        assert stats["msgBacklog"] == 30

        for message in first[: PER_CONSUMER // 2]:
            consumer.acknowledge(message)
        # Half acknowledged: dispatch resumes until the consumer holds the limit again.
        second = [consumer.receive(timeout_millis=5000) for _ in range(PER_CONSUMER // 2)]
        assert receive_until_quiet(consumer) == []
        received = first + second
        for message in received:
            consumer.acknowledge(message)
        while len(received) < len(sent):
            message = consumer.receive(timeout_millis=5000)
            consumer.acknowledge(message)
            received.append(message)
        assert [m.data() for m in received] == sent
        wait_until(
            lambda: subscription_stats(limited, "unacked-consumer", "sub")["msgBacklog"] == 0,
            message="every message acknowledged",
        )
        stats = subscription_stats(limited, "unacked-consumer", "sub")
        assert stats["consumers"][0]["blockedConsumerOnUnackedMsgs"] is False
    assert healthy(limited)


def test_subscription_at_max_unacked_stops_all_its_consumers(limited):
    with stableline.Client(limited.service_url) as client:
        consumers = [
            client.subscribe(
                "unacked-subscription",
                "shared",
                consumer_type=ConsumerType.Shared,
                initial_position=EARLIEST,
                receiver_queue_size=100,
                consumer_name=f"c{i}",
            )
            for i in range(2)
        ]
        sent = produce(client, "unacked-subscription", 40)

        held = [receive_until_quiet(consumer) for consumer in consumers]
        assert sum(map(len, held)) == PER_SUBSCRIPTION
        stats = subscription_stats(limited, "unacked-subscription", "shared")
        assert stats["blockedSubscriptionOnUnackedMsgs"] is True
        assert stats["unackedMessages"] == PER_SUBSCRIPTION

        received = [m for messages in held for m in messages]
        for consumer, messages in zip(consumers, held, strict=True):
            for message in messages:
                consumer.acknowledge(message)
        while len(received) < len(sent):
            progressed = False
            for consumer in consumers:
                for message in receive_until_quiet(consumer, limit=PER_SUBSCRIPTION):
                    consumer.acknowledge(message)
                    received.append(message)
                    progressed = True
            assert progressed, f"stalled at {len(received)} of {len(sent)}"
        assert sorted(m.data() for m in received) == sorted(sent)
        assert not subscription_stats(limited, "unacked-subscription", "shared")[
            "blockedSubscriptionOnUnackedMsgs"
        ]
    assert healthy(limited)


# ---------------------------------------------------------------- consumers


def test_one_consumer_past_max_consumers_is_refused_and_the_others_go_on(limited):
    def join(client: stableline.Client, name: str):
        return client.subscribe(
            "crowded",
            "shared",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            consumer_name=name,
        )

    with stableline.Client(limited.service_url) as client:
        members = [join(client, f"c{i}") for i in range(MAX_CONSUMERS)]
        with pytest.raises(stableline.LimitExceeded, match="max_consumers_per_subscription"):
            join(client, "one-too-many")
        assert len(subscription_stats(limited, "crowded", "shared")["consumers"]) == MAX_CONSUMERS

        members[0].close()
        late = join(client, "late")
        sent = produce(client, "crowded", 6)
        received = []
        while len(received) < len(sent):
            for consumer in (members[1], late):
                for message in receive_until_quiet(consumer):
                    consumer.acknowledge(message)
                    received.append(message.data())
        assert sorted(received) == sorted(sent)
    assert healthy(limited)


# ---------------------------------------------------------------- transactions


def test_open_transactions_are_bounded_per_client_and_in_all(limited):
    with (
        stableline.Client(limited.service_url) as first,
        stableline.Client(limited.service_url) as second,
    ):
        mine = [first.new_transaction() for _ in range(MAX_OPEN_TXNS_PER_CLIENT)]
        with pytest.raises(stableline.LimitExceeded, match="max_open_transactions_per_client"):
            first.new_transaction()
        theirs = [second.new_transaction() for _ in range(MAX_OPEN_TXNS - MAX_OPEN_TXNS_PER_CLIENT)]
        with pytest.raises(stableline.LimitExceeded, match="max_open_transactions allows"):
            second.new_transaction()
        coordinator = limited.admin("/admin/v3/transactions/coordinatorStats")
        assert coordinator["openTxns"] == MAX_OPEN_TXNS
        assert coordinator["maxOpenTxns"] == MAX_OPEN_TXNS

        # The open ones still work; ending one makes room.
        producer = first.create_producer("txn-limits")
        consumer = first.subscribe("txn-limits", "sub", initial_position=EARLIEST)
        producer.send(b"committed", txn=mine[0])
        mine[0].commit()
        replacement = first.new_transaction()
        assert consumer.receive(timeout_millis=5000).data() == b"committed"
        for txn in [*mine[1:], *theirs, replacement]:
            txn.abort()
        assert limited.admin("/admin/v3/transactions/coordinatorStats")["openTxns"] == 0
    assert healthy(limited)


# ---------------------------------------------------------------- pending publishes


def test_broker_reads_at_most_max_pending_publishes_of_a_stream_and_loses_none(limited):
    # Appends to the topic wait at a failpoint, as if its disk were slow: the broker
    # holds MAX_PENDING_PUBLISHES of them and leaves the rest unread in the stream.
    with stableline.Client(limited.service_url) as client:
        consumer = client.subscribe(HELD_TOPIC, "sub", initial_position=EARLIEST)
        producer = client.create_producer(HELD_TOPIC, batching_max_messages=1)
        sent = [f"held-{i}".encode() for i in range(3 * MAX_PENDING_PUBLISHES)]
        results: list = []
        for value in sent:
            producer.send_async(value, lambda error, msg_id: results.append((error, msg_id)))

        def publisher() -> dict:
            stats = limited.admin(f"/admin/v2/persistent/public/default/{HELD_TOPIC}/stats")
            return stats["publishers"][0] if stats["publishers"] else {}

        wait_until(
            lambda: publisher().get("pendingPublishes") == MAX_PENDING_PUBLISHES,
            message="the broker to hold the most sends it may",
        )
        for _ in range(5):
            assert publisher()["pendingPublishes"] == MAX_PENDING_PUBLISHES
            assert results == []
        assert publisher()["maxPendingPublishes"] == MAX_PENDING_PUBLISHES

        limited.signal(signal.SIGUSR1)  # release the failpoint: appends go on
        wait_until(lambda: len(results) == len(sent), message="every send acknowledged")
        assert all(error is None for error, _ in results)
        received = []
        for _ in sent:
            received.append(consumer.receive(timeout_millis=5000))
            consumer.acknowledge(received[-1])
        assert [m.data() for m in received] == sent
        assert publisher()["pendingPublishes"] == 0
    assert healthy(limited)


# ---------------------------------------------------------------- connections


def test_one_connection_past_max_connections_is_refused_until_one_closes(tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data", env={"STABLELINE_MAX_CONNECTIONS": "2"})
    broker.start()
    try:
        clients = [stableline.Client(broker.service_url) for _ in range(3)]
        producers = [clients[i].create_producer(f"conn-{i}") for i in range(2)]
        # A unary call carries its request with the call, so the refusal's status is
        # what the client reads.
        with pytest.raises(stableline.LimitExceeded, match="max_connections"):
            clients[2].get_last_message_id("conn-0")
        stats = broker.admin("/admin/v2/broker-stats/connections")
        assert stats == {
            "connections": 2,
            "maxConnections": 2,
            "maxConnectionsPerAddress": 2,
            "refusedConnections": 1,
            "refusedPerAddress": 0,
        }
        # A stream is refused as well. Its client writes the opening request after the
        # call starts, and when the refusal ends the call first, gRPC fails that write
        # and reports INTERNAL in place of the broker's status (a race the client
        # library can lose under load): the broker's count is what is certain.
        with pytest.raises(stableline.StableLineError):
            clients[2].create_producer("conn-2")
        stats = broker.admin("/admin/v2/broker-stats/connections")
        assert stats["connections"] == 2 and stats["refusedConnections"] == 2
        assert healthy(broker)  # HTTP admin and health are not gRPC connections

        # A counted client opens more streams on its one connection.
        consumer = clients[0].subscribe("conn-0", "sub", initial_position=EARLIEST)
        producers[0].send(b"still served")
        assert consumer.receive(timeout_millis=5000).data() == b"still served"

        clients[1].close()
        wait_until(
            lambda: broker.admin("/admin/v2/broker-stats/connections")["connections"] == 1,
            message="the closed client's calls to end",
        )
        late = clients[2].create_producer("conn-2")
        assert late.send(b"late").entry_id >= 0
        for client in (clients[0], clients[2]):
            client.close()
    finally:
        assert broker.stop() == 0, broker.log()


# ---------------------------------------------------------------- producer queue (client side)


def drain(client: stableline.Client, topic: str, count: int) -> list[bytes]:
    consumer = client.subscribe(topic, "drain", initial_position=EARLIEST)
    values = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(message)
        values.append(message.data())
    assert receive_until_quiet(consumer) == []
    consumer.close()
    return values


def test_full_queue_raises_producer_queue_is_full_and_keeps_what_it_took(limited):
    async def run() -> list[bytes]:
        async with aio.Client(limited.service_url) as client:
            producer = await client.create_producer(
                "queue-raises", batching_max_messages=2, max_pending_messages=5
            )
            # No await in between: no receipt can come back, so the queue fills.
            receipts = [producer.send_nowait(b"m%d" % i) for i in range(5)]
            assert producer.queue_full()
            with pytest.raises(stableline.ProducerQueueIsFull, match="max_pending_messages"):
                producer.send_nowait(b"refused")
            with pytest.raises(stableline.ProducerQueueIsFull):
                await producer.send(b"refused too")
            await asyncio.gather(*receipts)
            assert not producer.queue_full()
            await producer.send(b"after")
            await producer.close()
        return [b"m%d" % i for i in range(5)] + [b"after"]

    sent = asyncio.run(run())
    with stableline.Client(limited.service_url) as client:
        assert drain(client, "queue-raises", len(sent)) == sent


def test_blocking_producer_waits_for_room_and_sends_everything(limited):
    async def run() -> list[bytes]:
        async with aio.Client(limited.service_url) as client:
            producer = await client.create_producer(
                "queue-blocks",
                batching_max_messages=1,
                max_pending_messages=3,
                block_if_queue_full=True,
            )
            values = [b"b%d" % i for i in range(20)]
            sends = [asyncio.create_task(producer.send(value)) for value in values]
            for _ in range(5):
                await asyncio.sleep(0)  # the tasks start; receipts need the broker
            assert producer.queue_full()
            assert sum(task.done() for task in sends) < len(values)
            ids = await asyncio.gather(*sends)
            assert len(set(ids)) == len(values)
            await producer.close()
        return values

    sent = asyncio.run(run())
    with stableline.Client(limited.service_url) as client:
        assert sorted(drain(client, "queue-blocks", len(sent))) == sorted(sent)


@pytest.mark.parametrize("block", [True, False])
def test_send_async_blocks_the_caller_or_reports_a_full_queue_and_loses_nothing(limited, block):
    topic = f"queue-send-async-{block}"
    with stableline.Client(limited.service_url) as client:
        producer = client.create_producer(
            topic, batching_max_messages=4, max_pending_messages=8, block_if_queue_full=block
        )
        results: dict[bytes, Exception | None] = {}
        values = [b"a%04d" % i for i in range(1000)]
        for value in values:
            producer.send_async(value, lambda error, _id, v=value: results.__setitem__(v, error))
        producer.flush()
        wait_until(lambda: len(results) == len(values), message="every callback")
        taken = [v for v in values if results[v] is None]
        refused = [v for v in values if results[v] is not None]
        assert all(isinstance(results[v], stableline.ProducerQueueIsFull) for v in refused)
        if block:
            assert refused == []
        else:
            assert refused, "1000 sends into a queue of 8 should have found it full"
        assert drain(client, topic, len(taken)) == taken
