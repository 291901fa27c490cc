"""A topic-level grant on a partitioned topic reaches its partitions, on gRPC and on
the Kafka port alike (one Guard), as Pulsar's does. A `serve --secure` broker with
its Kafka port open."""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest

import stableline
from stableline import AuthenticationToken
from tests.stableline.broker.kafka.conftest import confluent_consume, confluent_produce
from tests.stableline.broker.kafka.test_security import SUPERUSER, SecureKafka, secure  # noqa: F401 - fixture

TOPIC = "persistent://public/default/pgrants"


def _admin(broker: SecureKafka, method: str, path: str, body: object) -> int:
    request = urllib.request.Request(
        f"{broker.process.http_url}{path}",
        json.dumps(body).encode(),
        {"Authorization": f"Bearer {broker.token(SUPERUSER)}", "Content-Type": "application/json"},
        method=method,
    )
    context = ssl.create_default_context(cafile=str(broker.ca_file))
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.status


def _client(broker: SecureKafka, role: str) -> stableline.Client:
    return stableline.Client(
        broker.process.service_url,
        tls_trust_certs_file_path=broker.ca_file,
        authentication=AuthenticationToken(broker.token(role)),
    )


def test_a_grant_on_a_partitioned_topic_reaches_its_partitions(secure):  # noqa: F811
    assert _admin(secure, "PUT", "/admin/v2/persistent/public/default/pgrants/partitions", 2) == 204
    secure.grant("pwriter", ["produce"], "pgrants")
    secure.grant("preader", ["consume"], "pgrants")

    # gRPC: the SDK opens each partition, checked against the partitioned topic's grant.
    with _client(secure, "preader") as reader_client:
        consumer = reader_client.subscribe(
            TOPIC, "audit", initial_position=stableline.InitialPosition.Earliest
        )
        with _client(secure, "pwriter") as writer_client:
            producer = writer_client.create_producer(TOPIC)
            sent = {producer.send(b"grpc", partition_key=f"k{i}").partition() for i in range(20)}
            assert sent == {0, 1}
            # The reader may consume but not produce, on the partitions as on the topic.
            with pytest.raises(stableline.AuthorizationError):
                reader_client.create_producer(TOPIC)
        received = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
        assert {m.message_id().partition() for m in received} == {0, 1}

    # Kafka: the same grants, on the partitions Kafka clients name.
    bootstrap = secure.process.kafka_bootstrap
    confluent_produce(bootstrap, "pgrants", [b"kafka"] * 4, **secure.confluent("pwriter"))
    got = confluent_consume(bootstrap, "pgrants", 1, partition=1, **secure.confluent("preader"))
    assert got and got[0][1] in (b"grpc", b"kafka")
