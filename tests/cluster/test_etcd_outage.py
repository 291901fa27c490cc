"""etcd stopped under a running cluster (an etcd of this module's own and two brokers,
with a session timeout of SESSION_TIMEOUT_S): while the brokers' sessions hold they
serve the topics they own and refuse a placement at once (Kafka's Metadata too); once a session is LOST its
broker refuses writes with BrokerFenced and writes nothing, while reads go on; when
etcd returns everything recovers by itself, the producer left open included, and
every acknowledged message is there exactly once."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.metadata import open_metadata_store
from stableline.testing import BrokerProcess
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import RawKafka

from .conftest import Cluster, own_etcd, running_cluster

# Long enough that the steps made while the sessions hold (SUSPENDED) fit in the
# time before LOST: at least 1/2 of it after etcd stops (5/6, less a keep-alive's 1/3).
SESSION_TIMEOUT_S = 8.0
TOPICS = [f"persistent://public/default/outage-{i}" for i in range(2)]


@pytest.fixture(scope="module")
def outage_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with (
        own_etcd(tmp_path_factory.mktemp("outage-etcd")) as etcd,
        running_cluster(
            etcd, tmp_path_factory.mktemp("outage-cluster"), 2, SESSION_TIMEOUT_S, kafka=True
        ) as cluster,
    ):
        yield cluster


def _fenced(broker: BrokerProcess) -> bool:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("stableline_writes_fenced "):
                return float(line.split()[1]) == 1.0
    raise AssertionError("no stableline_writes_fenced in /metrics")


def _leaders(cluster: Cluster) -> dict[str, BrokerProcess]:
    async def read() -> dict[str, str]:
        async with await open_metadata_store(cluster.etcd.url) as store:
            root = f"/stableline/ownership/{cluster.name}/topics/"
            return {
                topic: json.loads(
                    (await store.get(root + topic.removeprefix("persistent://"))).value
                )["leader"]
                for topic in TOPICS
            }

    return {topic: cluster.by_id(leader) for topic, leader in asyncio.run(read()).items()}


def _last_confirmed(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    with grpc.insecure_channel(broker.service_url) as channel:
        found = broker_pb2_grpc.BrokerStub(channel).GetLastMessageId(
            broker_pb2.GetLastMessageIdRequest(topic=topic), timeout=5
        )
    return found.last_confirmed_entry.ledger_id, found.last_confirmed_entry.entry_id


def _raw_produce_refusal(broker: BrokerProcess, topic: str) -> grpc.RpcError:
    with grpc.insecure_channel(broker.service_url) as channel:
        stream = broker_pb2_grpc.BrokerStub(channel).Produce(
            iter([broker_pb2.ProduceRequest(open=broker_pb2.ProducerOpen(topic=topic))]),
            timeout=5,
        )
        with pytest.raises(grpc.RpcError) as refused:
            next(stream)
    return refused.value


def _kafka_metadata(broker: BrokerProcess, topic: str) -> int:
    """The error code of a Kafka Metadata request that would create `topic`."""
    raw = RawKafka(broker.kafka_port)
    try:
        return raw.metadata([topic], auto_create=True)[topic]
    finally:
        raw.close()


def _all_values(client: stableline.Client, topic: str, count: int) -> list[bytes]:
    reader = client.create_reader(topic, stableline.MessageId.earliest)
    values = [reader.read_next(5000).data() for _ in range(count)]
    assert not reader.has_message_available(), f"{topic} holds more than {count} messages"
    reader.close()
    return values


@pytest.mark.slow
def test_etcd_stopped_owned_topics_are_served_until_the_session_is_lost_then_all_recovers(
    outage_cluster,
):
    cluster = outage_cluster
    with grpc.insecure_channel(cluster.brokers[0].service_url) as channel:
        for topic in TOPICS:
            admin_pb2_grpc.AdminStub(channel).CreateTopic(admin_pb2.TopicRequest(topic=topic))
    owners = _leaders(cluster)
    assert sorted(b.grpc_port for b in owners.values()) == sorted(
        b.grpc_port for b in cluster.brokers
    ), "one topic on each broker"
    client = stableline.Client(",".join(b.service_url for b in cluster.brokers))
    try:
        producers = {topic: client.create_producer(topic) for topic in TOPICS}
        consumers = {
            topic: client.subscribe(
                topic, "s", initial_position=stableline.InitialPosition.Earliest
            )
            for topic in TOPICS
        }
        sent = {topic: [f"{topic}/before".encode()] for topic in TOPICS}
        for topic in TOPICS:
            producers[topic].send(sent[topic][0])

        cluster.etcd.stop()
        # The sessions hold (SUSPENDED): owned topics are served, acks included.
        for topic in TOPICS:
            payload = f"{topic}/suspended".encode()
            producers[topic].send(payload)
            sent[topic].append(payload)
            for expected in sent[topic]:
                message = consumers[topic].receive(timeout_millis=5000)
                assert message.data() == expected
                consumers[topic].acknowledge(message)
        # A topic never used needs a placement: refused at once, saying why.
        started = time.monotonic()
        with pytest.raises(stableline.TopicUnavailable) as refused:
            client.create_producer("persistent://public/default/outage-never-used")
        assert time.monotonic() - started < 2.0
        assert f"etcd at {cluster.etcd.url}" in str(refused.value)
        # So is a Kafka client's first use: LEADER_NOT_AVAILABLE, which it retries.
        assert _kafka_metadata(cluster.brokers[0], "outage-kafka-new") == 5
        assert not any(_fenced(b) for b in cluster.brokers), "LOST before the steps above"

        # LOST: writes are refused, with the reason, and nothing is written.
        wait_until(
            lambda: all(_fenced(b) for b in cluster.brokers),
            timeout_s=SESSION_TIMEOUT_S * 2,
            message="both brokers to fence their writes",
        )
        kept = {topic: _last_confirmed(owners[topic], topic) for topic in TOPICS}
        outcomes: dict[str, list] = {topic: [] for topic in TOPICS}
        for topic in TOPICS:
            for i in range(3):
                payload = f"{topic}/lost-{i}".encode()
                sent[topic].append(payload)
                producers[topic].send_async(
                    payload, lambda error, _id, into=outcomes[topic]: into.append(error)
                )
            owner = owners[topic]
            refusal = _raw_produce_refusal(owner, topic)
            assert refusal.code() == grpc.StatusCode.UNAVAILABLE
            assert ("stableline-error", "BrokerFenced") in refusal.trailing_metadata()
            assert f"broker 127.0.0.1:{owner.grpc_port} is fenced" in refusal.details()
            assert f"metadata session with {cluster.etcd.url} was lost" in refusal.details()
            with pytest.raises(stableline.NotReady, match="is fenced"):
                client.create_producer(topic)
        for topic in TOPICS:  # reads go on, and show nothing new
            assert _last_confirmed(owners[topic], topic) == kept[topic]
        assert outcomes == {topic: [] for topic in TOPICS}  # waiting, not failed

        cluster.etcd.start()
        wait_until(
            lambda: not any(_fenced(b) for b in cluster.brokers),
            timeout_s=SESSION_TIMEOUT_S * 2,
            message="both brokers to take writes again",
        )
        # The producers left open resume by themselves; so do the consumers.
        wait_until(
            lambda: all(len(outcomes[t]) == 3 for t in TOPICS),
            timeout_s=20,
            message="the sends made while fenced to be acknowledged",
        )
        assert outcomes == {topic: [None] * 3 for topic in TOPICS}
        for topic in TOPICS:
            for expected in sent[topic][2:]:
                message = consumers[topic].receive(timeout_millis=10_000)
                assert message.data() == expected
                consumers[topic].acknowledge(message)
            assert _all_values(client, topic, len(sent[topic])) == sent[topic]
        # Placement works again.
        client.create_producer("persistent://public/default/outage-never-used").send(b"placed")
        assert _kafka_metadata(cluster.brokers[0], "outage-kafka-new") == 0
    finally:
        client.close()
