"""The Kafka port of a secure broker (`serve --secure`: TLS, tokens, authorization):
SASL/PLAIN over TLS with a token as the password, as confluent-kafka and kafka-python
send it; a bad token refused; nothing before authentication but ApiVersions and
the handshake; and the gRPC side's permissions on every request."""

from __future__ import annotations

import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
)

from stableline.broker.security.tokens import create_secret_key, create_token, read_secret_key
from stableline.testing import BrokerProcess
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import (
    CLIENT_TIMEOUT_S,
    RawKafka,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
)

SUPERUSER = "admin"


class SecureKafka:
    """A `serve --secure` broker with its Kafka port open, and tokens for any role."""

    def __init__(self, process: BrokerProcess):
        self.process = process

    @property
    def ca_file(self) -> Path:
        return self.process.data_dir / "security" / "ca.pem"

    def token(self, role: str, expiry_seconds: float | None = None) -> str:
        secret = read_secret_key(self.process.data_dir / "security" / "secret.key")
        return create_token(role, secret_key=secret, expiry_seconds=expiry_seconds)

    def confluent(self, role: str, password: str | None = None) -> dict:
        """confluent-kafka's settings for `role` over SASL_SSL."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": role,
            "sasl.password": self.token(role) if password is None else password,
            "ssl.ca.location": str(self.ca_file),
        }

    def kafka_python(self, role: str) -> dict:
        """kafka-python's, with KoP's `token:` form of the password."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": role,
            "sasl_plain_password": "token:" + self.token(role),
            "ssl_cafile": str(self.ca_file),
        }

    def grant(self, role: str, actions: list[str], topic: str | None = None) -> None:
        import json
        import urllib.request

        target = f"persistent/public/default/{topic}" if topic else "namespaces/public/default"
        request = urllib.request.Request(
            f"{self.process.http_url}/admin/v2/{target}/permissions/{role}",
            json.dumps(actions).encode(),
            {
                "Authorization": f"Bearer {self.token(SUPERUSER)}",
                "Content-Type": "application/json",
            },
            method="POST" if actions else "DELETE",
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            assert response.status == 204

    def connect(self) -> RawKafka:
        return RawKafka(self.process.kafka_port, self.ca_file)


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[SecureKafka]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("secure-kafka") / "data", kafka_port=0, extra_args=["--secure"]
    )
    process.start()
    try:
        yield SecureKafka(process)
    finally:
        assert process.stop() == 0, process.log()


def test_confluent_and_kafka_python_round_trip_with_a_token_over_tls(secure):
    secure.grant("app", ["produce", "consume"], "tls-orders")
    values = [f"secret-{i}".encode() for i in range(20)]
    confluent_produce(
        secure.process.kafka_bootstrap, "tls-orders", values, **secure.confluent("app")
    )
    expected = list(enumerate(values))
    got = confluent_consume(
        secure.process.kafka_bootstrap, "tls-orders", 20, **secure.confluent("app")
    )
    assert got == expected
    got = kafka_python_consume(
        secure.process.kafka_bootstrap, "tls-orders", 20, **secure.kafka_python("app")
    )
    assert got == expected


def test_a_bad_token_is_refused_with_an_authentication_error(secure):
    from confluent_kafka import Producer

    errors = []
    settings = secure.confluent("app", password="not-a-token")
    producer = Producer(
        {
            "bootstrap.servers": secure.process.kafka_bootstrap,
            "error_cb": errors.append,
            **settings,
        }
    )
    producer.produce("tls-orders", value=b"never")

    def refused() -> bool:
        producer.poll(0.1)  # runs error_cb
        return bool(errors)

    wait_until(refused, CLIENT_TIMEOUT_S, "the authentication error")
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "authentication failed" in errors[0].str()

    raw = secure.connect()
    try:
        refused = raw.authenticate("not-a-token")
        assert refused.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "token" in refused.error_message
        assert raw.list_offsets("tls-orders") is None, "closed after the refusal"
    finally:
        raw.close()


def test_only_api_versions_and_the_handshake_come_before_authentication(secure):
    raw = secure.connect()
    try:
        versions = raw.send(ApiVersionsRequest(), 0, ApiVersionsResponse)
        assert versions.error_code == 0
        assert raw.list_offsets("tls-orders") is None, "closed unanswered"
    finally:
        raw.close()
    # A frame larger than any handshake is refused before it is read (1 MiB, under
    # the limit an authenticated connection has).
    raw = secure.connect()
    try:
        raw.sock.sendall(struct.pack(">i", 1 << 20))
        assert raw.closed_by_broker()
    finally:
        raw.close()
    # A client without TLS gets nothing from the TLS port.
    plain = RawKafka(secure.process.kafka_port, None)
    try:
        assert plain.send(ApiVersionsRequest(), 0, ApiVersionsResponse) is None
    finally:
        plain.close()


def test_every_request_has_the_grpc_sides_permissions(secure):
    secure.grant("reader", ["consume"], "guarded")
    secure.grant("writer", ["produce"], "guarded")
    reader, writer, nobody, admin = (secure.connect() for _ in range(4))
    try:
        for raw, role in ((reader, "reader"), (writer, "writer"), (nobody, "nobody")):
            assert raw.authenticate(secure.token(role)).error_code == 0
        assert admin.authenticate(secure.token(SUPERUSER)).error_code == 0
        # Metadata makes a topic on first use, for a role that may produce to it.
        assert reader.metadata(["guarded"], auto_create=True) == {"guarded": 3}
        assert writer.metadata(["guarded"], auto_create=True) == {"guarded": 0}
        assert writer.produce("guarded") == 0
        assert reader.produce("guarded") == 29  # TOPIC_AUTHORIZATION_FAILED
        assert reader.list_offsets("guarded") == 0
        assert writer.list_offsets("guarded") == 29
        assert nobody.metadata(["guarded"]) == {"guarded": 29}
        assert "guarded" not in nobody.metadata(None)
        assert "guarded" in reader.metadata(None)
        # A revoked grant applies to the next request of an open connection.
        secure.grant("reader", [], "guarded")
        assert reader.list_offsets("guarded") == 29

        new_topic = CreateTopicsRequest.CreatableTopic(
            name="made-by-admin", num_partitions=2, replication_factor=1, assignments=[], configs=[]
        )
        request = CreateTopicsRequest(topics=[new_topic], timeout_ms=5000, validate_only=False)
        refused = writer.send(request, 4, CreateTopicsResponse)
        assert refused.topics[0].error_code == 29
        assert admin.send(request, 4, CreateTopicsResponse).topics[0].error_code == 0
    finally:
        for raw in (reader, writer, nobody, admin):
            raw.close()


def test_a_session_ends_with_its_token(secure):
    secure.grant("brief", ["consume"], "tls-orders")
    raw = secure.connect()
    try:
        answer = raw.authenticate(secure.token("brief", expiry_seconds=2))
        assert answer.error_code == 0
        assert 0 < answer.session_lifetime_ms <= 2000  # KIP-368: when to authenticate again
        assert raw.list_offsets("tls-orders") in (0, 3)
        started = time.monotonic()
        wait_until(lambda: raw.list_offsets("tls-orders") is None, 10, "the session to end")
        assert time.monotonic() - started < 5
    finally:
        raw.close()


@pytest.fixture(scope="module")
def sasl_plaintext(tmp_path_factory) -> Iterator[tuple[BrokerProcess, bytes]]:
    directory = tmp_path_factory.mktemp("sasl-plaintext")
    secret = directory / "secret.key"
    secret.write_bytes(create_secret_key())
    process = BrokerProcess(
        directory / "data",
        kafka_port=0,
        extra_args=["--auth-token-secret-key", str(secret), "--superuser-roles", SUPERUSER],
    )
    process.start()
    try:
        yield process, secret.read_bytes()
    finally:
        assert process.stop() == 0, process.log()


def test_without_tls_the_token_goes_over_sasl_plaintext(sasl_plaintext):
    process, secret = sasl_plaintext
    settings = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": SUPERUSER,
        "sasl.password": create_token(SUPERUSER, secret_key=secret),
    }
    confluent_produce(process.kafka_bootstrap, "plain-sasl", [b"a", b"b"], **settings)
    assert confluent_consume(process.kafka_bootstrap, "plain-sasl", 2, **settings) == [
        (0, b"a"),
        (1, b"b"),
    ]
