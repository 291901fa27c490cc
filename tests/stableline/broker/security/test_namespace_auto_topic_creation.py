"""A namespace's auto topic creation policy (Pulsar's set-auto-topic-creation), on a
real `serve --secure` broker whose config lets every role create topics on first use
(`allow_auto_topic_creation = true`): the policy, set, overrides that for its
namespace, needs a superuser, survives a restart, and shows in the namespace's
policies. Enabled, creating still needs `produce` on the topic."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

import stableline
from stableline.testing import BrokerProcess
from tests.stableline.broker.security.conftest import SecureBroker

_names = itertools.count()
ENABLE = {"allowAutoTopicCreation": True, "topicType": "non-partitioned"}
DISABLE = {"allowAutoTopicCreation": False, "topicType": "non-partitioned"}


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("namespace-policy")
    config = directory / "broker.toml"
    config.write_text("allow_auto_topic_creation = true\n")
    process = BrokerProcess(directory / "data", extra_args=["--secure", "--config", str(config)])
    process.start()
    try:
        yield SecureBroker(process)
    finally:
        assert process.stop() == 0, process.log()


def policy_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/autoTopicCreation"


def set_policy(broker: SecureBroker, namespace: str, body: object) -> None:
    status, answer = broker.http("POST", policy_path(namespace), body=body)
    assert status == 204, answer


def topics_in(broker: SecureBroker, namespace: str) -> list[str]:
    status, body = broker.http("GET", f"/admin/v2/persistent/{namespace}")
    return body if status == 200 else []


def test_without_a_policy_the_broker_default_applies(broker):
    namespace = "default/ns"
    broker.grant("watcher", ["consume"], namespace)
    topic = f"persistent://{namespace}/{unique('t')}"
    assert broker.http("GET", policy_path(namespace)) == (200, None)
    with broker.client("watcher") as watcher:
        watcher.subscribe(topic, "s")  # allow_auto_topic_creation: any role allowed the call
    assert topic in topics_in(broker, namespace)


def test_a_disabled_namespace_creates_no_topic_on_first_use_whoever_asks(broker):
    namespace = "closed/ns"
    broker.grant("writer", ["produce", "consume"], namespace)
    set_policy(broker, namespace, DISABLE)
    topic = f"persistent://{namespace}/{unique('t')}"
    for role in ("writer", "admin"):
        with broker.client(role) as client:
            # A lookup answers as the first use would: not found.
            with pytest.raises(stableline.TopicNotFound, match="policy is disabled"):
                client.lookup_topic(topic)
            with pytest.raises(stableline.TopicNotFound, match="policy is disabled"):
                client.create_producer(topic)
            with pytest.raises(stableline.TopicNotFound, match="policy is disabled"):
                client.subscribe(topic, "s")
    assert topics_in(broker, namespace) == []
    # An admin still creates it, and then it is used as any topic.
    status, body = broker.http("PUT", f"/admin/v2/persistent/{namespace}/{topic.rsplit('/')[-1]}")
    assert status == 204, body
    with broker.client("writer") as writer:
        consumer = writer.subscribe(topic, "s")
        writer.create_producer(topic).send(b"made by an admin")
        assert consumer.receive(timeout_millis=10_000).data() == b"made by an admin"


def test_an_enabled_namespace_still_needs_produce_to_create(broker):
    namespace = "open/ns"
    broker.grant("reader", ["consume"], namespace)
    broker.grant("writer", ["produce"], namespace)
    set_policy(broker, namespace, ENABLE)
    by_reader = f"persistent://{namespace}/{unique('read')}"
    with (
        broker.client("reader") as reader,
        pytest.raises(stableline.TopicNotFound, match="may not create it"),
    ):
        reader.subscribe(by_reader, "s")
    by_writer = f"persistent://{namespace}/{unique('written')}"
    with broker.client("writer") as writer:
        writer.create_producer(by_writer).send(b"x")
    assert topics_in(broker, namespace) == [by_writer]


def test_only_a_superuser_reads_or_changes_the_policy(broker):
    namespace = "guarded/ns"
    broker.grant("writer", ["produce", "consume"], namespace)
    for method, body in (("GET", None), ("POST", DISABLE), ("DELETE", None)):
        status, _ = broker.http(method, policy_path(namespace), role="writer", body=body)
        assert status == 403, method
    assert broker.http("GET", f"/admin/v2/namespaces/{namespace}", role="writer")[0] == 403
    assert broker.http("GET", policy_path(namespace)) == (200, None)


@pytest.mark.parametrize(
    "body, reason",
    [
        ([True], "JSON object"),
        ({"allowAutoTopicCreation": "yes"}, "JSON object"),
        ({"allowAutoTopicCreation": True, "topicType": "partitioned"}, "not partitioned"),
        ({"allowAutoTopicCreation": True, "numPartitions": 3}, "unknown fields"),
    ],
)
def test_a_bad_policy_is_refused_and_changes_nothing(broker, body, reason):
    namespace = "strict/ns"
    status, answer = broker.http("POST", policy_path(namespace), body=body)
    assert status == 400 and reason in answer["reason"], answer
    assert broker.http("GET", policy_path(namespace)) == (200, None)


def test_the_policy_shows_in_the_namespace_policies_is_removed_and_survives_a_restart(broker):
    namespace = "kept/ns"
    set_policy(broker, namespace, DISABLE)
    set_policy(broker, "dropped/ns", ENABLE)
    assert broker.http("DELETE", policy_path("dropped/ns"))[0] == 204
    broker.process.stop()
    broker.process.start()
    assert broker.http("GET", policy_path(namespace)) == (200, DISABLE)
    assert broker.http("GET", policy_path("dropped/ns")) == (200, None)
    status, policies = broker.http("GET", f"/admin/v2/namespaces/{namespace}")
    assert status == 200 and policies["autoTopicCreationOverride"] == DISABLE, policies
    with broker.client("admin") as admin, pytest.raises(stableline.TopicNotFound):
        admin.create_producer(f"persistent://{namespace}/{unique('t')}")
