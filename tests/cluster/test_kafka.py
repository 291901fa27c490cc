"""Kafka clients on three real brokers on one real etcd: every broker's Metadata names
the same nodes and each partition's owner as its leader, clients given one broker
produce to and consume from every partition wherever it lives, a broker that does
not lead a partition answers NOT_LEADER_OR_FOLLOWER, and a topic a Kafka client
creates on first use is placed like any other."""

from __future__ import annotations

import itertools
import urllib.request
from collections.abc import Iterator

import pytest

from stableline.testing import BrokerProcess
from tests.stableline.broker.kafka.conftest import (
    CLIENT_TIMEOUT_S,
    RawKafka,
    confluent_consume,
    kafka_python_consume,
)

from .conftest import Cluster, running_cluster

_names = itertools.count()
PARTITIONS = 6


@pytest.fixture(scope="module")
def kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    with running_cluster(cluster_etcd, tmp_path_factory.mktemp("kafka"), kafka=True) as started:
        yield started


def _partitioned(cluster: Cluster, count: int) -> str:
    """A new partitioned topic made through broker 0: its short name."""
    topic = f"kp-{next(_names)}"
    request = urllib.request.Request(
        f"{cluster.brokers[0].http_url}/admin/v2/persistent/public/default/{topic}/partitions",
        data=str(count).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    return topic


def _node_ids(cluster: Cluster) -> dict[str, int]:
    """Broker id -> its Kafka node id, from the brokers' registrations."""
    ids = {}
    for broker in cluster.brokers:
        broker_id = f"127.0.0.1:{broker.grpc_port}"
        record = cluster.read_record(f"/stableline/brokers/{cluster.name}/{broker_id}")
        assert record["kafka_address"] == broker.kafka_bootstrap
        ids[broker_id] = record["kafka_node_id"]
    return ids


def _metadata(broker: BrokerProcess, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """Broker `broker`'s Metadata: (node id -> Kafka port, partition -> leader)."""
    from confluent_kafka.admin import AdminClient

    # One bootstrap address and no other: this broker answers.
    listed = AdminClient({"bootstrap.servers": broker.kafka_bootstrap}).list_topics(
        topic, timeout=10
    )
    nodes = {node.id: node.port for node in listed.brokers.values()}
    leaders = {p.id: p.leader for p in listed.topics[topic].partitions.values()}
    return nodes, leaders


def test_every_broker_names_the_same_nodes_and_each_partitions_owner(kafka_cluster):
    topic = _partitioned(kafka_cluster, PARTITIONS)
    node_of = _node_ids(kafka_cluster)
    assert sorted(node_of.values()) == [0, 1, 2]
    owners = {
        i: kafka_cluster.topic_leader(f"persistent://public/default/{topic}-partition-{i}")
        for i in range(PARTITIONS)
    }
    assert len(set(owners.values())) == 3, "placement spread the partitions"
    expected_nodes = {
        node_of[f"127.0.0.1:{b.grpc_port}"]: b.kafka_port for b in kafka_cluster.brokers
    }
    for broker in kafka_cluster.brokers:
        nodes, leaders = _metadata(broker, topic)
        assert nodes == expected_nodes
        assert leaders == {i: node_of[owner] for i, owner in owners.items()}


@pytest.mark.parametrize("producer", ["confluent-kafka", "kafka-python"])
def test_a_client_given_one_broker_produces_and_consumes_every_partition(kafka_cluster, producer):
    topic = _partitioned(kafka_cluster, PARTITIONS)
    bootstrap = kafka_cluster.brokers[2].kafka_bootstrap
    sent = {p: [f"{topic}-{p}-{i}".encode() for i in range(10)] for p in range(PARTITIONS)}
    if producer == "confluent-kafka":
        from confluent_kafka import Producer

        client = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for partition, values in sent.items():
            for value in values:
                client.produce(topic, value=value, partition=partition)
        assert client.flush(CLIENT_TIMEOUT_S) == 0
    else:
        from kafka import KafkaProducer

        client = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for partition, values in sent.items():
            for value in values:
                client.send(topic, value=value, partition=partition)
        client.flush(CLIENT_TIMEOUT_S)
        client.close()
    other = kafka_cluster.brokers[0].kafka_bootstrap
    for partition, values in sent.items():
        expected = list(enumerate(values))
        assert confluent_consume(other, topic, 10, partition=partition) == expected
        assert kafka_python_consume(bootstrap, topic, 10, partition=partition) == expected


def test_a_broker_that_does_not_lead_a_partition_answers_not_leader(kafka_cluster):
    topic = _partitioned(kafka_cluster, PARTITIONS)
    for partition in range(PARTITIONS):
        owner = kafka_cluster.by_id(
            kafka_cluster.topic_leader(f"persistent://public/default/{topic}-partition-{partition}")
        )
        for broker in kafka_cluster.brokers:
            raw = RawKafka(broker.kafka_port)
            try:
                error = raw.list_offsets(topic, partition)
            finally:
                raw.close()
            assert error == (0 if broker is owner else 6), (partition, broker.grpc_port)


def test_a_topic_made_by_a_kafka_producers_first_use_is_placed_over_the_brokers(kafka_cluster):
    from kafka import KafkaProducer

    topics = [f"kafka-made-{next(_names)}" for _ in range(6)]
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.brokers[1].kafka_bootstrap)
    for topic in topics:
        producer.send(topic, value=topic.encode())
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()
    owners = [kafka_cluster.topic_leader(f"persistent://public/default/{t}") for t in topics]
    assert len(set(owners)) > 1, "placed like any topic, not all on the broker asked"
    node_of = _node_ids(kafka_cluster)
    for topic, owner in zip(topics, owners, strict=True):
        assert _metadata(kafka_cluster.brokers[0], topic)[1] == {0: node_of[owner]}
        assert confluent_consume(kafka_cluster.brokers[0].kafka_bootstrap, topic, 1) == [
            (0, topic.encode())
        ]


def test_topics_created_and_deleted_through_any_broker_are_the_clusters(kafka_cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"kafka-admin-{next(_names)}"
    first = AdminClient({"bootstrap.servers": kafka_cluster.brokers[1].kafka_bootstrap})
    first.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(CLIENT_TIMEOUT_S)
    partitions = [f"persistent://public/default/{topic}-partition-{i}" for i in range(PARTITIONS)]
    owners = {kafka_cluster.topic_leader(p) for p in partitions}
    assert len(owners) == 3, "placed over the brokers like an admin's creation"
    count = kafka_cluster.read_record(f"/stableline/partitioned-topics/public/default/{topic}")
    assert count == {"partitions": PARTITIONS}
    last = AdminClient({"bootstrap.servers": kafka_cluster.brokers[2].kafka_bootstrap})
    last.delete_topics([topic])[topic].result(CLIENT_TIMEOUT_S)
    assert (
        kafka_cluster.read_record(f"/stableline/partitioned-topics/public/default/{topic}") is None
    )
    for partition in partitions:
        local = partition.removeprefix("persistent://")
        path = f"/stableline/ownership/{kafka_cluster.name}/topics/{local}"
        assert kafka_cluster.read_record(path) is None, partition


# Last: a restart moves the restarted broker's replicated partitions to the others
# (they fail over), so placement after it leans on the restarted broker.
def test_a_restarted_broker_is_the_same_kafka_node(kafka_cluster):
    before = _node_ids(kafka_cluster)
    recorded = kafka_cluster.read_record(f"/stableline/kafka/{kafka_cluster.name}/node-ids")
    assert recorded == before
    kafka_cluster.brokers[1].restart()
    assert _node_ids(kafka_cluster) == before
    topic = _partitioned(kafka_cluster, 3)
    nodes, _ = _metadata(kafka_cluster.brokers[1], topic)
    assert sorted(nodes) == sorted(before.values())
