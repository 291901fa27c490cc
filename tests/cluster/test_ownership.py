"""Topic ownership over three real brokers on one real etcd: placement spreads topics,
a client given one address reaches them all, a broker that does not own a topic
refuses it naming the owner, and a killed owner's topics of one copy are unavailable
(and only those) until it is back, with nothing acknowledged lost."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.error
import urllib.request

import grpc
import pytest

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.metadata import open_metadata_store
from tests.conftest import wait_until
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S

from .conftest import Cluster, one_copy_namespace

_topics = itertools.count()


def _new_topics(count: int) -> list[str]:
    base = next(_topics)
    return [f"persistent://public/default/own-{base}-{i}" for i in range(count)]


def _leaders(cluster: Cluster, topics: list[str]) -> dict[str, str]:
    async def read() -> dict[str, str]:
        store = await open_metadata_store(cluster.etcd.url)
        try:
            leaders = {}
            for topic in topics:
                local = topic.removeprefix("persistent://")
                result = await store.get(f"/stableline/ownership/{cluster.name}/topics/{local}")
                assert result is not None, f"no ownership record for {topic}"
                leaders[topic] = json.loads(result.value)["leader"]
            return leaders
        finally:
            await store.close()

    return asyncio.run(read())


def _create_through(broker, topic: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        admin_pb2_grpc.AdminStub(channel).CreateTopic(admin_pb2.TopicRequest(topic=topic))


def test_topics_created_through_one_broker_are_placed_on_all_three(cluster):
    topics = _new_topics(6)
    for topic in topics:
        _create_through(cluster.brokers[0], topic)
    leaders = _leaders(cluster, topics)
    assert set(leaders.values()) == {f"127.0.0.1:{b.grpc_port}" for b in cluster.brokers}


def test_a_client_given_one_address_produces_and_consumes_every_topic(cluster):
    topics = _new_topics(6)
    client = stableline.Client(cluster.brokers[0].service_url)
    try:
        consumers = [
            client.subscribe(t, "s", initial_position=stableline.InitialPosition.Earliest)
            for t in topics
        ]
        for topic in topics:
            producer = client.create_producer(topic)
            producer.send(topic.encode())
            producer.close()
        for topic, consumer in zip(topics, consumers, strict=True):
            message = consumer.receive(timeout_millis=5000)
            assert message.data() == topic.encode()
            consumer.acknowledge(message)
    finally:
        client.close()
    assert len(set(_leaders(cluster, topics).values())) == 3


def test_a_broker_that_does_not_own_a_topic_refuses_it_naming_the_owner(cluster):
    (topic,) = _new_topics(1)
    _create_through(cluster.brokers[0], topic)
    owner_id = _leaders(cluster, [topic])[topic]
    other = next(b for b in cluster.brokers if f"127.0.0.1:{b.grpc_port}" != owner_id)
    with grpc.insecure_channel(f"127.0.0.1:{other.grpc_port}") as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert owner_id in refused.value.details()
        assert ("stableline-error", "NotOwner") in refused.value.trailing_metadata()
        looked_up = stub.Lookup(broker_pb2.LookupRequest(topic=topic))
        assert looked_up.grpc_address == owner_id
    # A client pointed at that broker follows the refusal to the owner.
    client = stableline.Client(other.service_url)
    try:
        client.create_producer(topic).send(b"redirected")
        reader = client.create_reader(topic, stableline.MessageId.earliest)
        assert reader.read_next(5000).data() == b"redirected"
    finally:
        client.close()


def test_a_killed_owner_makes_only_its_one_copy_topics_unavailable_and_loses_nothing(cluster):
    # Replicated topics are taken by another member (test_failover.py); one copy waits.
    namespace = one_copy_namespace(cluster.brokers[0])
    topics = [t.replace("public/default", namespace) for t in _new_topics(6)]
    client = stableline.Client(cluster.brokers[0].service_url)
    try:
        sent = {}
        for topic in topics:
            producer = client.create_producer(topic)
            sent[topic] = [producer.send(f"{topic}/{i}".encode()) for i in range(3)]
            producer.close()
        leaders = _leaders(cluster, topics)
        victim_id = next(
            owner
            for owner in leaders.values()
            if owner != f"127.0.0.1:{cluster.brokers[0].grpc_port}"
        )
        victim = cluster.by_id(victim_id)
        victim.kill()
        wait_until(
            lambda: victim_id not in cluster.brokers[0].admin(f"/admin/v2/brokers/{cluster.name}"),
            timeout_s=SHORT_SESSION_TIMEOUT_S * 5,
            message="the killed broker's registration to lapse",
        )
        gone = [t for t in topics if leaders[t] == victim_id]
        kept = [t for t in topics if leaders[t] != victim_id]
        assert gone and kept
        fresh = stableline.Client(cluster.brokers[0].service_url)
        try:
            for topic in gone:
                with pytest.raises(stableline.TopicUnavailable, match=victim_id):
                    fresh.create_producer(topic)
            for topic in kept:
                fresh.create_producer(topic).send(b"still served")
        finally:
            fresh.close()
        victim.start()
        for topic in gone:
            reader = client.create_reader(topic, stableline.MessageId.earliest)
            values = [reader.read_next(5000).data() for _ in range(3)]
            assert values == [f"{topic}/{i}".encode() for i in range(3)]
    finally:
        client.close()


def test_the_http_admin_redirects_a_topic_call_to_its_owner(cluster):
    (topic,) = _new_topics(1)
    _create_through(cluster.brokers[0], topic)
    owner_id = _leaders(cluster, [topic])[topic]
    owner = cluster.by_id(owner_id)
    other = next(b for b in cluster.brokers if b is not owner)
    path = "/admin/v2/" + topic.replace("://", "/") + "/stats"
    request = urllib.request.Request(other.http_url + path)
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirected:
        opener.open(request)
    assert redirected.value.code == 307
    assert redirected.value.headers["Location"] == owner.http_url + path
    with urllib.request.urlopen(other.http_url + path) as followed:  # follows the 307
        assert "publishers" in json.loads(followed.read())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_a_partitioned_topic_places_each_partition_and_serves_them_through_one_address(cluster):
    (topic,) = _new_topics(1)
    with grpc.insecure_channel(f"127.0.0.1:{cluster.brokers[0].grpc_port}") as channel:
        admin_pb2_grpc.AdminStub(channel).CreatePartitionedTopic(
            admin_pb2.PartitionedTopicRequest(topic=topic, partitions=3)
        )
    partitions = [f"{topic}-partition-{i}" for i in range(3)]
    # Each partition has its record (the spread is the placement's, tested above).
    assert set(_leaders(cluster, partitions).values()) <= {
        f"127.0.0.1:{b.grpc_port}" for b in cluster.brokers
    }
    client = stableline.Client(cluster.brokers[0].service_url)
    try:
        consumer = client.subscribe(
            topic, "s", initial_position=stableline.InitialPosition.Earliest
        )
        producer = client.create_producer(topic)
        for key in "abcdef":
            producer.send(key.encode(), partition_key=key)
        received = sorted(consumer.receive(timeout_millis=5000).data() for _ in range(6))
        assert received == [key.encode() for key in "abcdef"]
    finally:
        client.close()


def test_a_topic_listing_through_any_broker_names_every_brokers_topics(cluster):
    topics = _new_topics(6)
    for topic in topics:
        _create_through(cluster.brokers[0], topic)
    assert len(set(_leaders(cluster, topics).values())) > 1
    for broker in cluster.brokers:
        wait_until(
            lambda broker=broker: (
                set(topics) <= set(broker.admin("/admin/v2/persistent/public/default"))
            ),
            timeout_s=10,
            message="every topic in the listing",
        )
