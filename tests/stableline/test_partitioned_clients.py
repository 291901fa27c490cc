"""Producing to and consuming from partitioned topics through a real broker: per-key
order, round robin by whole batches, the routing modes, transactions over several
partitions at both isolation levels, acks by partition, and what is refused."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from collections import defaultdict

import pytest

import stableline
from stableline import InitialPosition, IsolationLevel, MessageRoutingMode, aio
from stableline._routing import key_partition

EARLIEST = InitialPosition.Earliest
RU = IsolationLevel.READ_UNCOMMITTED


def _partitioned(broker, topic: str, count: int, method: str = "PUT") -> None:
    """Create a partitioned topic (PUT), or grow it to `count` (POST)."""
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/partitions",
        data=str(count).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    urllib.request.urlopen(request, timeout=10).close()


def _drain(consumer, timeout_ms: int = 500) -> list:
    messages = []
    while True:
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except stableline.Timeout:
            return messages
        consumer.acknowledge(message)
        messages.append(message)


def test_each_key_keeps_its_order_across_six_partitions(broker, client):
    _partitioned(broker, "keyed", 6)
    consumer = client.subscribe("keyed", "orders", initial_position=EARLIEST)
    producer = client.create_producer("keyed", batching_type=stableline.BatchingType.KeyBased)
    keys = [f"customer-{i}" for i in range(40)]
    sent: dict[str, list[bytes]] = defaultdict(list)
    for n in range(1200):
        key = keys[(n * 7) % len(keys)]
        value = f"{key}:{n}".encode()
        producer.send_async(value, None, partition_key=key)
        sent[key].append(value)
    producer.flush()
    received: dict[str, list[bytes]] = defaultdict(list)
    partition_of: dict[str, set[int]] = defaultdict(set)
    for message in _drain(consumer):
        received[message.partition_key()].append(message.data())
        partition_of[message.partition_key()].add(message.message_id().partition())
    assert received == sent
    assert {key: parts for key, parts in partition_of.items()} == {
        key: {key_partition(key, 6)} for key in keys
    }
    assert set().union(*partition_of.values()) == set(range(6))


def test_round_robin_sends_whole_batches_to_one_partition_then_the_next(broker, client):
    _partitioned(broker, "spread", 4)
    producer = client.create_producer(
        "spread", batching_max_messages=10, batching_max_publish_delay_ms=1000
    )
    settled: dict[int, stableline.MessageId] = {}
    for n in range(80):
        producer.send_async(f"m{n}".encode(), lambda error, mid, n=n: settled.__setitem__(n, mid))
    producer.flush()
    receipts = [settled[n] for n in range(80)]
    # A batch is one entry of one partition; in send order, the partition changes
    # only where a batch ends, and each next batch goes to the next partition.
    batches: list[tuple[int, int, int]] = []
    for message_id in receipts:
        batch = (message_id.partition(), message_id.ledger_id, message_id.entry_id)
        if not batches or batches[-1] != batch:
            batches.append(batch)
    assert len(batches) == 8
    partitions = [partition for partition, _, _ in batches]
    assert all(b == (a + 1) % 4 for a, b in itertools.pairwise(partitions))


def test_single_partition_and_a_custom_router(broker, client):
    _partitioned(broker, "routed", 3)
    single = client.create_producer(
        "routed", message_routing_mode=MessageRoutingMode.SinglePartition
    )
    assert len({single.send(b"m").partition() for _ in range(20)}) == 1
    # A keyed message still goes by its key.
    assert single.send(b"k", partition_key="hello").partition() == key_partition("hello", 3)
    custom = client.create_producer(
        "routed",
        message_routing_mode=MessageRoutingMode.CustomPartition,
        message_router=lambda message, count: len(message.data()) % count,
    )
    assert [custom.send(b"x" * n).partition() for n in range(6)] == [0, 1, 2, 0, 1, 2]
    wrong = client.create_producer(
        "routed",
        message_routing_mode=MessageRoutingMode.CustomPartition,
        message_router=lambda message, count: count,
    )
    with pytest.raises(ValueError, match=r"partition index in 0\.\.2"):
        wrong.send(b"x")


def test_a_transaction_over_several_partitions_is_all_or_nothing_at_each_level(broker, client):
    _partitioned(broker, "txn", 4)
    committed = client.subscribe("txn", "business", initial_position=EARLIEST)
    uncommitted = client.subscribe("txn", "monitor", initial_position=EARLIEST, isolation_level=RU)
    producer = client.create_producer("txn")
    keys = [next(f"k{i}" for i in range(100) if key_partition(f"k{i}", 4) == p) for p in range(4)]

    txn = client.new_transaction()
    for key in keys:
        producer.send(f"c-{key}".encode(), partition_key=key, txn=txn)
    seen_uncommitted = _drain(uncommitted)
    assert sorted(m.data() for m in seen_uncommitted) == sorted(f"c-{k}".encode() for k in keys)
    assert {m.message_id().partition() for m in seen_uncommitted} == set(range(4))
    assert _drain(committed, 300) == []
    txn.commit()
    assert sorted(m.data() for m in _drain(committed)) == sorted(f"c-{k}".encode() for k in keys)

    aborted = client.new_transaction()
    for key in keys:
        producer.send(f"a-{key}".encode(), partition_key=key, txn=aborted)
    producer.send(b"after", partition_key=keys[0])
    aborted.abort()
    assert [m.data() for m in _drain(committed)] == [b"after"]
    assert sorted(m.data() for m in _drain(uncommitted)) == sorted(
        [b"after", *(f"a-{k}".encode() for k in keys)]
    )


def test_acks_by_message_id_and_nacks_reach_the_right_partition(broker, client):
    _partitioned(broker, "acks", 3)
    consumer = client.subscribe(
        "acks",
        "s",
        consumer_type=stableline.ConsumerType.Shared,
        initial_position=EARLIEST,
        negative_ack_redelivery_delay_ms=100,
        ack_grouping_time_ms=0,
    )
    assert consumer.topic() == "persistent://public/default/acks"
    producer = client.create_producer("acks")
    for i in range(9):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    first = consumer.receive(timeout_millis=5000)
    consumer.negative_acknowledge(first)
    rest = [consumer.receive(timeout_millis=5000) for _ in range(8)]
    for message in rest:
        consumer.acknowledge(message.message_id())  # a bare id finds its partition
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == first.data() and again.redelivery_count() == 1
    assert again.message_id().partition() == first.message_id().partition() >= 0
    consumer.acknowledge(again.message_id())
    stats = json.loads(
        urllib.request.urlopen(
            f"{broker.http_url}/admin/v2/persistent/public/default/acks/partitioned-stats"
        ).read()
    )
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0


def test_a_reader_on_a_partitioned_topic_is_refused_with_what_to_do(broker, client):
    _partitioned(broker, "unread", 2)
    with pytest.raises(stableline.OperationNotSupported, match="unread-partition-0"):
        client.create_reader("unread", stableline.MessageId.earliest)
    assert client.get_partitioned_topic_metadata("unread") == 2
    assert client.get_topic_partitions("unread") == [
        "persistent://public/default/unread-partition-0",
        "persistent://public/default/unread-partition-1",
    ]
    assert client.get_topic_partitions("other") == ["persistent://public/default/other"]


def test_the_asyncio_client_routes_and_consumes_partitions(broker):
    _partitioned(broker, "aio", 3)

    async def run() -> list:
        async with aio.Client(broker.service_url) as client:
            consumer = await client.subscribe("aio", "s", initial_position=EARLIEST)
            producer = await client.create_producer("aio")
            assert isinstance(producer, aio.PartitionedProducer)
            ids = [await producer.send(b"v", partition_key=f"k{i}") for i in range(12)]
            receipt = producer.send_nowait(b"w", partition_key="k0")
            assert (await receipt).partition() == key_partition("k0", 3)
            got = [await consumer.receive(timeout_millis=5000) for _ in range(13)]
            await consumer.acknowledge(got)
            return ids

    ids = asyncio.run(run())
    assert [i.partition() for i in ids] == [key_partition(f"k{i}", 3) for i in range(12)]


async def _until(condition, what: str, deadline_s: float = 20.0) -> None:
    """Wait for condition() with a deadline, looking again every 20 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while not condition():
        assert loop.time() < deadline, f"not within {deadline_s} s: {what}"
        await asyncio.sleep(0.02)


def test_producers_and_consumers_follow_a_topic_grown_while_they_run(broker):
    _partitioned(broker, "growing", 3)

    async def run() -> tuple[list, dict, list]:
        async with aio.Client(broker.service_url) as client:
            consumer = await client.subscribe(
                "growing", "s", initial_position=EARLIEST, partitions_update_interval_s=0.1
            )
            producer = await client.create_producer("growing", partitions_update_interval_s=0.1)
            received: dict[bytes, int] = {}

            async def consume() -> None:
                while True:
                    message = await consumer.receive()
                    await consumer.acknowledge(message)
                    received[message.data()] = message.message_id().partition()

            consuming = asyncio.create_task(consume())
            counter = itertools.count()
            sent: list[tuple[bytes, int]] = []

            async def send_some(n: int) -> None:
                for _ in range(n):
                    value = b"m%05d" % next(counter)
                    sent.append((value, (await producer.send(value)).partition()))

            await send_some(30)
            assert producer.num_partitions() == 3
            grown = asyncio.create_task(
                asyncio.to_thread(_partitioned, broker, "growing", 5, "POST")
            )
            deadline = asyncio.get_running_loop().time() + 20
            while producer.num_partitions() < 5:  # producing while the topic grows
                assert asyncio.get_running_loop().time() < deadline, "the producer did not grow"
                await send_some(5)
            await grown
            await send_some(50)  # round robin over all five now
            keyed = [await producer.send(b"k", partition_key=f"key-{i}") for i in range(10)]
            await _until(
                lambda: all(value in received for value, _ in sent),
                "every message delivered",
            )
            consuming.cancel()
            return sent, received, keyed

    sent, received, keyed = asyncio.run(run())
    assert len({value for value, _ in sent}) == len(sent)
    assert {value: partition for value, partition in sent} == {
        value: received[value] for value, _ in sent
    }  # each delivered from the partition its receipt named
    assert {3, 4} <= {partition for _, partition in sent}  # the new partitions are used
    # Keys hash over the new count, as Pulsar's producer does once it sees it.
    assert [i.partition() for i in keyed] == [key_partition(f"key-{i}", 5) for i in range(10)]
