"""Kafka transactions on two brokers of a cluster (a real etcd).

A transactional id's record is the cluster's, so a producer initialised through one
broker fences one initialised through the other and aborts its transaction wherever
that transaction's shard is led; AddPartitionsToTxn and EndTxn through one broker,
the batches through the partition's owner, which reads the id's record to admit
them (raw frames, tests/stableline/broker/kafka/test_api_txn.py's TxnWire, so each broker is asked
exactly). And a real transactional producer over a partitioned topic whose
partitions both brokers own: an aborted transaction shows nothing, a committed one
all, to Kafka read_committed consumers and an SDK READ_COMMITTED subscription."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

import stableline
from tests.cluster.conftest import Cluster, cluster_brokers, new_cluster_name
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S
from tests.stableline.broker.kafka.conftest import confluent_consume, end_offset
from tests.stableline.broker.kafka.test_api_txn import FENCED, OLD_EPOCH, TxnWire

pytestmark = pytest.mark.slow

TOPIC = "ledger"


@pytest.fixture(scope="module")
def kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    name = new_cluster_name()
    root = tmp_path_factory.mktemp("kafka-cluster")
    brokers = cluster_brokers(cluster_etcd, name, root, 2, SHORT_SESSION_TIMEOUT_S)
    try:
        for broker in brokers:
            broker.kafka_port = 0
            broker.start()
        yield Cluster(cluster_etcd, name, brokers)
    finally:
        for broker in brokers:
            broker.stop()


def kafka_address(broker) -> str:
    return broker.kafka_bootstrap


def test_one_transactional_id_across_brokers_fences_and_commits_through_either(kafka_cluster):
    with stableline.Client(kafka_cluster.brokers[0].service_url) as client:
        client.create_producer(TOPIC).send(b"plain")
    leader = kafka_cluster.by_id(kafka_cluster.topic_leader(f"persistent://public/default/{TOPIC}"))
    (other,) = [broker for broker in kafka_cluster.brokers if broker is not leader]
    at_leader, at_other = kafka_address(leader), kafka_address(other)

    old = TxnWire(at_leader, "ledger-writer")
    assert old.init() == 0
    assert old.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert old.produce([b"doomed"], topic=TOPIC) == (0, 1)
    assert end_offset(at_leader, TOPIC, "read_committed") == 1

    record = kafka_cluster.read_record(
        f"/stableline/broker/kafka/{kafka_cluster.name}/transactional-ids/ledger-writer@"
    )
    shard = int(record["txn"].split(":")[0])
    # Opened on a shard the first broker leads: the other ends it through that one.
    assert kafka_cluster.shard_leader(shard) == f"127.0.0.1:{leader.grpc_port}"
    newer = TxnWire(at_other, "ledger-writer")  # the other broker coordinates it now
    assert newer.init() == 0
    assert (newer.producer_id, newer.epoch) == (old.producer_id, old.epoch + 1)
    # Its transaction was aborted on the broker leading its shard: the marker is in.
    assert end_offset(at_leader, TOPIC, "read_committed") == end_offset(at_leader, TOPIC) == 3
    assert old.end(commit=True) == FENCED
    # The owner had the old epoch cached: refused by the topic, it reads the record.
    assert old.produce([b"late"], topic=TOPIC) == (OLD_EPOCH, -1)

    # Partitions added through one broker, batches through the partition's owner.
    assert newer.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    batches = TxnWire(at_leader, "ledger-writer")
    batches.producer_id, batches.epoch = newer.producer_id, newer.epoch
    assert batches.produce([b"kept"], topic=TOPIC) == (0, 3)
    assert end_offset(at_leader, TOPIC, "read_committed") == 3
    assert newer.end(commit=True) == 0
    assert end_offset(at_leader, TOPIC, "read_committed") == end_offset(at_leader, TOPIC) == 5
    got = confluent_consume(at_leader, TOPIC, 2, "read_committed")
    assert [value for _, value in got] == [b"plain", b"kept"]
    for wire in (old, newer, batches):
        wire.close()


def test_a_kafka_transaction_over_partitions_on_both_brokers_is_all_or_nothing(kafka_cluster):
    from confluent_kafka import Producer

    from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S

    topic, partitions = "spread", 4
    first = kafka_cluster.brokers[0]
    request = urllib.request.Request(
        f"{first.http_url}/admin/v2/persistent/public/default/{topic}/partitions",
        data=str(partitions).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    leaders = {
        kafka_cluster.topic_leader(f"persistent://public/default/{topic}-partition-{index}")
        for index in range(partitions)
    }
    assert len(leaders) == 2, "the partitions were placed on one broker only"
    bootstrap = kafka_address(first)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "spreader", "linger.ms": 5}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for outcome in ("abort", "commit"):
        producer.begin_transaction()
        for index in range(partitions):
            producer.produce(topic, value=f"{outcome}-{index}".encode(), partition=index)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        if outcome == "abort":
            producer.abort_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
    for index in range(partitions):
        got = confluent_consume(bootstrap, topic, 1, "read_committed", partition=index)
        assert [value for _, value in got] == [f"commit-{index}".encode()]
    with stableline.Client(first.service_url) as client:
        consumer = client.subscribe(
            topic,
            "committed-view",
            initial_position=stableline.InitialPosition.Earliest,
            isolation_level=stableline.IsolationLevel.READ_COMMITTED,
        )
        got = sorted(consumer.receive(10_000).value() for _ in range(partitions))
    assert got == [f"commit-{index}".encode() for index in range(partitions)]
