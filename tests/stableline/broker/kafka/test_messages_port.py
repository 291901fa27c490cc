"""CreateTopics, DeleteTopics, SaslHandshake and SaslAuthenticate schemas against
Kafka's message specs as kafka-python builds them (see test_messages.py), for every
served version."""

from __future__ import annotations

import pytest
from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_sasl as ms
from stableline.broker.kafka.protocol import messages_topics as mt
from tests.stableline.broker.kafka.test_messages import (
    decoded_fully,
    same_bytes_through_spec,
    versions,
)


def in_spec(api: m.ApiKey, spec) -> list[int]:
    return [v for v in versions(api) if spec.min_version <= v <= spec.max_version]


def test_the_served_apis_have_kafkas_keys_and_flexible_versions():
    for cls, key in [
        (CreateTopicsRequest, m.ApiKey.CREATE_TOPICS),
        (DeleteTopicsRequest, m.ApiKey.DELETE_TOPICS),
        (SaslHandshakeRequest, m.ApiKey.SASL_HANDSHAKE),
        (SaslAuthenticateRequest, m.ApiKey.SASL_AUTHENTICATE),
    ]:
        assert key == cls.API_KEY
        assert m.SUPPORTED[key][1] <= cls.max_version
        flexible_from = m.FIRST_FLEXIBLE.get(key, cls.max_version + 1)
        for version in versions(key):
            assert cls.flexible_version_q(version) is (version >= flexible_from)


@pytest.mark.parametrize("version", in_spec(m.ApiKey.CREATE_TOPICS, CreateTopicsRequest))
def test_create_topics_matches_the_spec(version):
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            topic(
                name="orders",
                num_partitions=4,
                replication_factor=-1,
                assignments=[topic.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])],
                configs=[topic.CreatableTopicConfig(name="retention.ms", value=None)],
            )
        ],
        timeout_ms=3000,
        validate_only=True,
    )
    decoded = decoded_fully(mt.read_create_topics, request.encode(version=version), version)
    assert decoded == mt.CreateTopicsRequest(
        [mt.CreatableTopic("orders", 4, -1, [(0, [1])], [("retention.ms", None)])],
        3000,
        version >= 1,  # v0 has no validate_only
    )
    body = mt.write_create_topics(
        version,
        [
            mt.TopicResult("orders", m.ErrorCode.NONE),
            mt.TopicResult("taken", m.ErrorCode.TOPIC_ALREADY_EXISTS, "it exists"),
        ],
    )
    response = same_bytes_through_spec(CreateTopicsResponse, body, version)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("orders", 0),
        ("taken", m.ErrorCode.TOPIC_ALREADY_EXISTS),
    ]
    if version >= 1:  # v0 has no error messages
        assert [t.error_message for t in response.topics] == [None, "it exists"]


@pytest.mark.parametrize("version", in_spec(m.ApiKey.DELETE_TOPICS, DeleteTopicsRequest))
def test_delete_topics_matches_the_spec(version):
    request = DeleteTopicsRequest(topic_names=["a", "b"], timeout_ms=500)
    decoded = decoded_fully(mt.read_delete_topics, request.encode(version=version), version)
    assert decoded == mt.DeleteTopicsRequest(["a", "b"], 500)
    body = mt.write_delete_topics(
        version,
        [
            mt.TopicResult("a", m.ErrorCode.NONE),
            mt.TopicResult("b", m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "not said"),
        ],
    )
    response = same_bytes_through_spec(DeleteTopicsResponse, body, version)
    assert [(r.name, r.error_code) for r in response.responses] == [("a", 0), ("b", 3)]


@pytest.mark.parametrize("version", versions(m.ApiKey.SASL_HANDSHAKE))
def test_sasl_handshake_matches_the_spec(version):
    request = SaslHandshakeRequest(mechanism="PLAIN")
    assert decoded_fully(ms.read_sasl_handshake, request.encode(version=version), version) == (
        "PLAIN"
    )
    body = ms.write_sasl_handshake(version, m.ErrorCode.NONE, ["PLAIN"])
    response = same_bytes_through_spec(SaslHandshakeResponse, body, version)
    assert response.mechanisms == ["PLAIN"]


@pytest.mark.parametrize("version", versions(m.ApiKey.SASL_AUTHENTICATE))
def test_sasl_authenticate_matches_the_spec(version):
    request = SaslAuthenticateRequest(auth_bytes=b"\0user\0token")
    decoded = decoded_fully(ms.read_sasl_authenticate, request.encode(version=version), version)
    assert decoded == b"\0user\0token"
    body = ms.write_sasl_authenticate(
        version, m.ErrorCode.SASL_AUTHENTICATION_FAILED, "bad token", 5000
    )
    response = same_bytes_through_spec(SaslAuthenticateResponse, body, version)
    assert (response.error_code, response.error_message) == (58, "bad token")
    if version >= 1:
        assert response.session_lifetime_ms == 5000
