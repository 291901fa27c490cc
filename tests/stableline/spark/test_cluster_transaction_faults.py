"""A transaction over three replicated topics on three real brokers (one real etcd),
with the broker that leads its coordinator shard, and one of its topics, killed at a
step of the commit: before the commit is asked, once the decision is logged, and
between two topics' markers. The broker that takes the shard over ends it, and all of
it is visible, once, to every reader at READ_COMMITTED: the SDK's subscriptions, a
Kafka read_committed consumer, and the Spark source."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

import stableline
from tests.cluster import conftest as cluster_fixtures
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_transactions import (
    _broker_id,
    _commit_quietly,
    _receive_all,
    _transaction_status,
)
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S

cluster_etcd = cluster_fixtures.cluster_etcd

pytestmark = pytest.mark.slow

EARLIEST = stableline.InitialPosition.Earliest
WAIT_S = 30.0
PER_TOPIC = 3


def _seeds(cluster: Cluster) -> str:
    return ",".join(_broker_id(b) for b in cluster.brokers)


@pytest.mark.parametrize("step", ["open", "decided", "between-markers"])
def test_a_commit_is_all_or_nothing_to_every_reader_when_its_shard_leader_is_killed(
    cluster_etcd, tmp_path, spark, step: str
):
    topics = [f"persistent://public/default/txn-faults-{i}" for i in range(3)]
    # Every broker stops there: the shard's leader, and the one that takes the shard
    # over when it drives the end again (released then, to finish it).
    armed = {"decided": "txn-decided", "between-markers": f"txn-end-topic:{topics[1]}"}
    env = {"STABLELINE_FAILPOINTS": armed[step]} if step in armed else {}
    with running_cluster(cluster_etcd, tmp_path, kafka=True, env=env) as cluster:
        with stableline.Client(_seeds(cluster)) as client:
            for topic in topics:  # placed one on each broker: the first topics of all
                client.create_producer(topic).close()
        assert {cluster.topic_leader(t) for t in topics} == {_broker_id(b) for b in cluster.brokers}
        client = stableline.Client(_seeds(cluster), operation_timeout_seconds=WAIT_S)
        try:
            txn = client.new_transaction(timeout_ms=60_000)
            leader = cluster.by_id(cluster.shard_leader(txn.id[0]))  # it leads a topic too
            for topic in topics:
                producer = client.create_producer(topic)
                for index in range(PER_TOPIC):
                    producer.send(f"{topic}/{index}".encode(), txn=txn)
            if step == "open":
                leader.kill()
                killed_at = time.monotonic()
                txn.commit()  # the client follows the shard to the broker that took it
            else:
                threading.Thread(target=_commit_quietly, args=(txn,), daemon=True).start()
                leader.wait_for_event("failpoint", WAIT_S)
                leader.kill()
                killed_at = time.monotonic()
                _driving_again(cluster, leader)
                for broker in cluster.brokers:
                    if broker is not leader:
                        os.kill(broker.process.pid, signal.SIGUSR1)
            took = time.monotonic() - killed_at
            wait_until(
                lambda: (
                    _transaction_status(cluster.by_id(cluster.shard_leader(txn.id[0])), txn.id)
                    == "COMMITTED"
                ),
                WAIT_S,
                "the shard's new leader to complete the commit",
            )
            print(f"{step}: the new shard leader drove the commit {took:.2f} s after the kill")
        finally:
            client.close()

        expected = {t: [f"{t}/{i}".encode() for i in range(PER_TOPIC)] for t in topics}
        assert _read_committed_by_kafka(cluster, topics) == expected
        assert _read_by_spark(spark, cluster, topics) == expected
        # Last: its acks let retention delete the closed ledger the others read.
        with stableline.Client(_seeds(cluster), operation_timeout_seconds=WAIT_S) as reader:
            for topic in topics:
                consumer = reader.subscribe(topic, "rc", initial_position=EARLIEST)
                assert _receive_all(consumer, PER_TOPIC) == expected[topic]


def _driving_again(cluster: Cluster, killed) -> None:
    """Wait for the broker that took the shard over to stop at the failpoint, driving
    the end again."""

    def stopped() -> bool:
        return any(
            event.get("event") == "failpoint"
            for broker in cluster.brokers
            if broker is not killed
            for event in broker.events()
        )

    wait_until(stopped, WAIT_S, "the shard's new leader to drive the end again")


def _read_committed_by_kafka(cluster: Cluster, topics: list[str]) -> dict[str, list[bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    names = {topic.removeprefix("persistent://public/default/"): topic for topic in topics}
    consumer = Consumer(
        {
            "bootstrap.servers": ",".join(b.kafka_bootstrap for b in cluster.brokers),
            "group.id": f"txn-faults-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    received: dict[str, list[bytes]] = {topic: [] for topic in topics}
    try:
        consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING) for name in names])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while sum(map(len, received.values())) < PER_TOPIC * len(topics):
            assert time.monotonic() < deadline, f"read_committed read only {received}"
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received[names[message.topic()]].append(message.value())
    finally:
        consumer.close()
    return received


def _read_by_spark(spark, cluster: Cluster, topics: list[str]) -> dict[str, list[bytes]]:
    rows = (
        spark.read.format("stableline")
        .option("service", _seeds(cluster))
        .option("topics", ",".join(topics))
        .load()
        .select("topic", "value")
        .collect()
    )
    read: dict[str, list[bytes]] = {topic: [] for topic in topics}
    for row in rows:
        read[row.topic].append(bytes(row.value))
    return read
