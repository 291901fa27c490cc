"""Partitioned topics through a real broker and a real local SparkSession: reads by
partition with each stable position pinned, writes routed by key."""

from __future__ import annotations

import urllib.request
from collections import defaultdict

import pytest

import stableline
from stableline._routing import key_partition

RU = stableline.IsolationLevel.READ_UNCOMMITTED
EARLIEST = stableline.InitialPosition.Earliest


def _partitioned(broker, topic: str, count: int) -> None:
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/partitions",
        data=str(count).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    urllib.request.urlopen(request, timeout=10).close()


def _load(spark, broker, topic: str, **options):
    reader = spark.read.format("stableline").option("service", broker.service_url)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _key_on(partition: int, count: int) -> str:
    return next(f"k{i}" for i in range(1000) if key_partition(f"k{i}", count) == partition)


def test_a_partitioned_topic_is_read_by_partition_each_pinned_at_its_stable_position(
    spark, broker, client
):
    _partitioned(broker, "sharded", 3)
    producer = client.create_producer("sharded", batching_max_messages=1)
    keys = [_key_on(p, 3) for p in range(3)]
    for key in keys:
        producer.send(f"plain-{key}".encode(), partition_key=key)
    open_txn = client.new_transaction(timeout_ms=300_000)
    producer.send(b"open", partition_key=keys[1], txn=open_txn)
    for key in keys:  # behind the open transaction on partition 1 only
        producer.send(f"late-{key}".encode(), partition_key=key)

    df = _load(spark, broker, "sharded")
    assert df.rdd.getNumPartitions() >= 3
    rows = df.collect()
    by_topic = defaultdict(set)
    for row in rows:
        by_topic[row.topic].add(bytes(row.value))
    name = "persistent://public/default/sharded-partition-{}"
    assert dict(by_topic) == {
        name.format(0): {f"plain-{keys[0]}".encode(), f"late-{keys[0]}".encode()},
        name.format(1): {f"plain-{keys[1]}".encode()},
        name.format(2): {f"plain-{keys[2]}".encode(), f"late-{keys[2]}".encode()},
    }
    uncommitted = {
        bytes(r.value)
        for r in _load(spark, broker, "sharded", isolationLevel=RU.name.lower()).collect()
    }
    assert b"open" in uncommitted and len(uncommitted) == 7
    open_txn.commit()
    assert len(_load(spark, broker, "sharded").collect()) == 7
    with pytest.raises(Exception, match="partitioned topic"):
        _load(spark, broker, "sharded", startingPositions='{"sharded": "0:0"}').collect()


def test_a_write_to_a_partitioned_topic_routes_rows_by_key_in_one_transaction(
    spark, broker, client
):
    _partitioned(broker, "sink", 4)
    consumer = client.subscribe("sink", "check", initial_position=EARLIEST)
    rows = [(f"acct-{n % 10}", f"{n}".encode()) for n in range(200)]
    rows += [(None, f"nokey-{n}".encode()) for n in range(50)]
    df = spark.createDataFrame(rows, "key string, value binary").coalesce(1)
    (
        df.write.format("stableline")
        .option("service", broker.service_url)
        .option("topic", "sink")
        .option("rowsPerBatch", "10")
        .mode("append")
        .save()
    )
    seen: dict[str | None, list[bytes]] = defaultdict(list)
    partitions_of: dict[str | None, set[int]] = defaultdict(set)
    for _ in range(250):
        message = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(message)
        seen[message.partition_key()].append(message.data())
        partitions_of[message.partition_key()].add(message.message_id().partition())
    for n in range(10):
        key = f"acct-{n}"
        assert seen[key] == [f"{i}".encode() for i in range(n, 200, 10)]  # the key's order
        assert partitions_of[key] == {key_partition(key, 4)}
    assert sorted(seen[None]) == sorted(f"nokey-{n}".encode() for n in range(50))
    assert partitions_of[None] == {0, 1, 2, 3}  # keyless batches of 10 in turn
