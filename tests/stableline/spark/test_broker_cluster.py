"""The Spark source and sink against a real cluster of three brokers on one etcd, given
every broker's address: each topic is planned and read on its owner, and a write
reaches a topic another broker owns."""

from __future__ import annotations

import pytest

import stableline
from tests.cluster import conftest as cluster_fixtures
from tests.cluster.conftest import Cluster

# tests/cluster's fixtures, here beside the Spark session of this directory.
cluster_etcd = cluster_fixtures.cluster_etcd
cluster = cluster_fixtures.cluster

pytestmark = pytest.mark.slow


def _service(cluster: Cluster) -> str:
    return ",".join(f"127.0.0.1:{b.grpc_port}" for b in cluster.brokers)


def _id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def test_a_batch_read_plans_and_reads_each_topic_on_its_owner(spark, cluster: Cluster):
    topics = [f"persistent://public/default/spark-read-{i}" for i in range(3)]
    with stableline.Client(_service(cluster)) as client:
        owners = {t: client.lookup_topic(t).grpc_address for t in topics}
        for topic in topics:
            producer = client.create_producer(topic)
            for i in range(50):
                producer.send_async(f"{topic}/{i}".encode(), lambda *_: None)
            producer.flush()
            producer.close()
    assert set(owners.values()) == {_id(b) for b in cluster.brokers}

    from stableline.spark._options import parse_options
    from stableline.spark._source import _layouts

    options = parse_options({"service": _service(cluster), "topics": ",".join(topics)})
    planned = {t: layout.owner.target for t, layout in _layouts(options, {}).items()}
    assert planned == owners, "each topic's layout comes from its owner"

    rows = (
        spark.read.format("stableline")
        .option("service", _service(cluster))
        .option("topics", ",".join(topics))
        .load()
        .select("topic", "value")
        .collect()
    )
    by_topic: dict[str, list[str]] = {}
    for row in rows:
        by_topic.setdefault(row.topic, []).append(bytes(row.value).decode())
    assert by_topic == {t: [f"{t}/{i}" for i in range(50)] for t in topics}


def test_a_write_through_one_broker_reaches_a_topic_another_owns(spark, cluster: Cluster):
    first = cluster.brokers[0]
    with stableline.Client(first.service_url) as client:
        topic = next(
            t
            for t in (f"persistent://public/default/spark-write-{i}" for i in range(10))
            if client.lookup_topic(t).grpc_address != _id(first)
        )
    frame = spark.createDataFrame([(f"row {i}",) for i in range(20)], "value string")
    frame.write.format("stableline").option("service", first.service_url).option(
        "topic", topic
    ).mode("append").save()
    with stableline.Client(first.service_url) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest)
        values = sorted(reader.read_next(10_000).data().decode() for _ in range(20))
    assert values == sorted(f"row {i}" for i in range(20))
