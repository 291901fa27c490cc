"""Kafka clients, unchanged, while a partition's leader is killed (three real brokers on
one real etcd, the default 3/3/2 policy): a confluent-kafka transactional producer
carries on through the new leader, and a read_committed consumer reads every
committed message once, in order, and nothing of an aborted transaction. (The
consumer is assigned its partition: a group's coordinator shard stays with its
broker for now.)"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

import pytest

from stableline.broker.txn.coordinators import named_shard
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S

from .conftest import Cluster, cluster_brokers, new_cluster_name

_names = itertools.count()
SHARDS = 4  # a new cluster's coordinator shards
# A killed leader's lease lapses after SHORT_SESSION_TIMEOUT_S; then a member takes it.
SERVED_AGAIN_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    brokers = cluster_brokers(
        cluster_etcd,
        new_cluster_name(),
        tmp_path_factory.mktemp("kafka-failover"),
        3,
        SHORT_SESSION_TIMEOUT_S,
    )
    for broker in brokers:
        broker.kafka_port = 0
    try:
        for broker in brokers:
            broker.start()
        yield Cluster(cluster_etcd, brokers[0].extra_args[-1], brokers)
    finally:
        for broker in brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.stop()


def _bootstrap(brokers) -> str:
    return ",".join(b.kafka_bootstrap for b in brokers)


def _transaction(producer, topic: str, payloads: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for payload in payloads:
        producer.produce(topic, payload)
    producer.flush(CLIENT_TIMEOUT_S)
    if commit:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    else:
        producer.abort_transaction(CLIENT_TIMEOUT_S)


def _committed_through_a_failover(producer, topic: str, payloads: list[bytes]) -> None:
    """Commit `payloads` in one transaction, retrying it whole while the partition's
    leader moves (Kafka's way: abort what is abortable, then try again)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
    while True:
        try:
            _transaction(producer, topic, payloads, commit=True)
            return
        except KafkaException as error:
            if time.monotonic() > deadline or error.args[0].fatal():
                raise
            if error.args[0].txn_requires_abort():
                producer.abort_transaction(CLIENT_TIMEOUT_S)


def test_a_transactional_producer_and_a_read_committed_consumer_ride_out_a_leader_kill(
    kafka_cluster: Cluster,
):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    transactional_id = f"kfo-{uuid.uuid4().hex}"
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(kafka_cluster.brokers),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    # The partition's leader is killed, never the producer's coordinator shard's: shard
    # logs do not move with their broker yet.
    coordinator = kafka_cluster.shard_leader(named_shard("", transactional_id, SHARDS))
    for _ in range(20):
        topic = f"kfo-{next(_names)}"
        _transaction(producer, topic, [b"before-%d" % i for i in range(20)], commit=True)
        leader_id = kafka_cluster.topic_leader(f"persistent://public/default/{topic}")
        if leader_id != coordinator:
            break
    else:
        pytest.fail("every topic was placed on the coordinator's broker")
    _transaction(producer, topic, [b"aborted-%d" % i for i in range(5)], commit=False)
    leader = kafka_cluster.by_id(leader_id)
    leader.kill()
    try:
        _committed_through_a_failover(producer, topic, [b"after-%d" % i for i in range(20)])
        live = [b for b in kafka_cluster.brokers if b is not leader]
        consumer = Consumer(
            {
                "bootstrap.servers": _bootstrap(live),
                "group.id": f"kfo-reader-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            # Assigned, not subscribed: a group's coordinator shard does not move with
            # its broker yet, and this is about the partition's leader.
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            received: list[bytes] = []
            deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
            while len(received) < 40 and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None:
                    received.append(message.value())
        finally:
            consumer.close()
        assert received == [b"before-%d" % i for i in range(20)] + [
            b"after-%d" % i for i in range(20)
        ]
    finally:
        leader.start()
