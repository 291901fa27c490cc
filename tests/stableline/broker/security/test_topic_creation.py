"""Who may create a topic by using it first, and how many topics a namespace holds,
on a real `serve --secure` broker."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import grpc
import pytest

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc
from stableline.testing import BrokerProcess
from tests.stableline.broker.security.conftest import SUPERUSER, SecureBroker

MAX_TOPICS = 3
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("creation")
    config = directory / "broker.toml"
    config.write_text(f"max_topics_per_namespace = {MAX_TOPICS}\n")
    process = BrokerProcess(directory / "data", extra_args=["--secure", "--config", str(config)])
    process.start()
    try:
        yield SecureBroker(process)
    finally:
        assert process.stop() == 0, process.log()


def topics_in(broker: SecureBroker, namespace: str) -> list[str]:
    status, body = broker.http("GET", f"/admin/v2/persistent/{namespace}")
    return body if status == 200 else []


def test_a_consume_only_role_cannot_create_a_topic_by_subscribing(broker):
    namespace = "eve/watch"
    broker.grant("eve", ["consume"], namespace)
    topic = f"persistent://{namespace}/{unique('never')}"
    with (
        broker.client("eve") as eve,
        pytest.raises(stableline.TopicNotFound, match="may not create it"),
    ):
        eve.subscribe(topic, "s")
    assert topic not in topics_in(broker, namespace)


def test_a_consume_only_role_subscribes_to_an_existing_topic(broker):
    namespace = "reader/ns"
    broker.grant("reader", ["consume"], namespace)
    topic = f"persistent://{namespace}/{unique('existing')}"
    with broker.client(SUPERUSER) as admin:
        admin.create_producer(topic).send(b"hello")
    with broker.client("reader") as reader:
        consumer = reader.subscribe(
            topic, "s", initial_position=stableline.InitialPosition.Earliest
        )
        assert consumer.receive(timeout_millis=10_000).data() == b"hello"


def test_a_produce_role_creates_a_topic_on_first_use(broker):
    namespace = "writer/ns"
    broker.grant("writer", ["produce", "consume"], namespace)
    by_producing = f"persistent://{namespace}/{unique('produced')}"
    by_subscribing = f"persistent://{namespace}/{unique('subscribed')}"
    with broker.client("writer") as writer:
        writer.create_producer(by_producing).send(b"x")
        writer.subscribe(by_subscribing, "s")
    listed = topics_in(broker, namespace)
    assert by_producing in listed and by_subscribing in listed


def test_the_namespace_topic_limit_refuses_one_more_topic_and_the_broker_stays_up(broker):
    namespace = "full/ns"
    broker.grant("filler", ["produce", "consume"], namespace)
    created = [f"persistent://{namespace}/{unique('t')}" for _ in range(MAX_TOPICS)]
    with broker.client("filler") as filler:
        for topic in created:
            filler.create_producer(topic)
        with pytest.raises(stableline.LimitExceeded, match="max_topics_per_namespace"):
            filler.create_producer(f"persistent://{namespace}/{unique('over')}")
        with pytest.raises(stableline.LimitExceeded, match="max_topics_per_namespace"):
            filler.subscribe(f"persistent://{namespace}/{unique('over')}", "s")
        # An existing topic is still used.
        filler.create_producer(created[0]).send(b"still works")
    status, body = broker.http("PUT", f"/admin/v2/persistent/{namespace}/{unique('admin-over')}")
    assert status == 412, body
    assert "max_topics_per_namespace" in str(body)
    with broker.channel() as channel:
        with pytest.raises(grpc.RpcError) as refused:
            admin_pb2_grpc.AdminStub(channel).CreateTopic(
                admin_pb2.TopicRequest(topic=f"persistent://{namespace}/{unique('rpc')}"),
                metadata=broker.metadata(SUPERUSER),
                timeout=10,
            )
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert sorted(topics_in(broker, namespace)) == sorted(created)
    # Deleting one makes room for one.
    status, _ = broker.http("DELETE", "/admin/v2/persistent/" + created[0][len("persistent://") :])
    assert status == 204
    status, body = broker.http("PUT", f"/admin/v2/persistent/{namespace}/{unique('room')}")
    assert status == 204, body
    # Other namespaces are not affected, and the broker serves on.
    with broker.client(SUPERUSER) as admin:
        admin.create_producer(unique("elsewhere")).send(b"up")
        admin.create_producer(created[1]).send(b"still up")
