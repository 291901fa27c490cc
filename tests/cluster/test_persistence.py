"""Persistence policies on three real brokers and a real etcd: a topic is placed on an
ensemble of three distinct brokers, its leader first, with the cluster default 3/3/2;
a namespace asking for more copies than there are live brokers refuses its topics
with NotEnoughBrokers (retryable) on every face; Kafka's replication factor is the
created topic's policy and Kafka Metadata reports its replicas from the ensemble."""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

import stableline
from stableline.testing import BrokerProcess
from tests.conftest import wait_until

from .conftest import Cluster, running_cluster

_names = itertools.count()
FOUR = {"bookkeeperEnsemble": 4, "bookkeeperWriteQuorum": 4, "bookkeeperAckQuorum": 2}


@pytest.fixture(scope="module")
def persistence_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("persistence")
    with running_cluster(cluster_etcd, root, kafka=True) as started:
        yield started


def _http(broker: BrokerProcess, method: str, path: str, body: object = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        broker.http_url + path, data, {"X-Stableline-Request": "test"}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


def _record(cluster: Cluster, topic: str) -> dict:
    local = topic.removeprefix("persistent://")
    record = cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{local}")
    assert record is not None, f"no ownership record for {topic}"
    return record


def _service_url(cluster: Cluster) -> str:
    return ",".join(f"127.0.0.1:{broker.grpc_port}" for broker in cluster.brokers)


def test_a_topic_is_placed_on_three_distinct_brokers_leader_first(persistence_cluster):
    cluster = persistence_cluster
    topic = f"persistent://public/default/replicated-{next(_names)}"
    with stableline.Client(_service_url(cluster)) as client:
        client.create_producer(topic).send(b"placed")
    record = _record(cluster, topic)
    brokers = {f"127.0.0.1:{broker.grpc_port}" for broker in cluster.brokers}
    assert set(record["ensemble"]) == brokers and len(record["ensemble"]) == 3
    assert record["ensemble"][0] == record["leader"]
    assert (record["write_quorum"], record["ack_quorum"]) == (3, 2)

    leader = cluster.by_id(record["leader"])
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    status, stats = _http(leader, "GET", path)
    assert status == 200, stats
    assert stats["persistence"] == {
        "ensemble": 3,
        "writeQuorum": 3,
        "ackQuorum": 2,
        "ensembleBrokers": record["ensemble"],
    }


def test_a_namespace_asking_for_four_copies_of_three_brokers_refuses_its_topics(
    persistence_cluster,
):
    cluster = persistence_cluster
    namespace = f"public/four-{next(_names)}"
    base = f"/admin/v2/namespaces/{namespace}/persistence"
    assert _http(cluster.brokers[1], "POST", base, FOUR)[0] == 204
    topic = f"persistent://{namespace}/t"
    # Through any broker once its watch has the policy: the one that set it has it now.
    with (
        stableline.Client(f"127.0.0.1:{cluster.brokers[1].grpc_port}") as client,
        pytest.raises(stableline.NotEnoughBrokers) as refused,
    ):
        client.create_producer(topic)
    assert isinstance(refused.value, stableline.TopicUnavailable)  # retry later
    text = str(refused.value)
    assert "3 live brokers" in text and "ensemble of 4" in text
    assert f"set-persistence {namespace}" in text

    status, body = _http(
        cluster.brokers[1], "PUT", topic.replace("persistent://", "/admin/v2/persistent/")
    )
    assert status == 503 and "ensemble of 4" in body["reason"], body
    assert (
        cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{namespace}/t") is None
    )  # nothing placed

    # Lowered to what three brokers hold, the same call goes through.
    assert _http(cluster.brokers[0], "DELETE", base)[0] == 204
    # Broker 1 learns of it by its watch on the namespace records.
    wait_until(
        lambda: _http(cluster.brokers[1], "GET", base) == (200, None),
        timeout_s=10,
        message="the removal seen by another broker",
    )
    with stableline.Client(f"127.0.0.1:{cluster.brokers[1].grpc_port}") as client:
        client.create_producer(topic).send(b"placed after all")
    assert len(_record(cluster, topic)["ensemble"]) == 3


def test_a_bad_policy_is_refused_400_naming_the_rule(persistence_cluster):
    broker = persistence_cluster.brokers[0]
    bad = {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    status, body = _http(broker, "POST", "/admin/v2/namespaces/public/bad/persistence", bad)
    assert status == 400 and "write quorum 3 is larger than ensemble 2" in body["reason"]


def test_kafkas_replication_factor_is_the_topics_policy_and_metadata_reports_the_ensemble(
    persistence_cluster,
):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = persistence_cluster
    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].kafka_bootstrap})
    too_many, two = f"k-four-{next(_names)}", f"k-two-{next(_names)}"
    futures = admin.create_topics(
        [
            NewTopic(too_many, num_partitions=1, replication_factor=4),
            NewTopic(two, num_partitions=1, replication_factor=2),
        ],
        request_timeout=30,
    )
    with pytest.raises(KafkaException) as refused:
        futures[too_many].result(timeout=30)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "3 live brokers" in error.str() and "ensemble of 4" in error.str()
    futures[two].result(timeout=30)

    record = _record(cluster, f"persistent://public/default/{two}")
    assert len(set(record["ensemble"])) == 2 and record["ensemble"][0] == record["leader"]
    # E = Qw = 2; Qa = min(2, the namespace's 2).
    assert (record["write_quorum"], record["ack_quorum"]) == (2, 2)

    node_of = {}
    for broker in cluster.brokers:
        broker_id = f"127.0.0.1:{broker.grpc_port}"
        registration = cluster.read_record(f"/stableline/brokers/{cluster.name}/{broker_id}")
        node_of[broker_id] = registration["kafka_node_id"]
    for broker in cluster.brokers:  # every broker answers alike
        metadata = AdminClient({"bootstrap.servers": broker.kafka_bootstrap}).list_topics(
            two, timeout=10
        )
        partition = metadata.topics[two].partitions[0]
        expected = [node_of[member] for member in record["ensemble"]]
        assert partition.leader == expected[0]
        assert partition.replicas == expected and partition.isrs == expected
