"""The Kafka port bounds what a connection may hold before it authenticates: the
TLS handshake, SASL and the first request within connection_authentication_timeout_s
of the accept, a total and a per-address cap counted from the accept, and an idle
timeout once authenticated [Kafka: connections.max.idle.ms, max.connections,
max.connections.per.ip]."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from stableline.testing import BrokerProcess
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import RawKafka
from tests.stableline.broker.kafka.test_security import SUPERUSER, SecureKafka

AUTH_TIMEOUT_S = 2.0
MAX_IDLE_MS = 4000
PER_ADDRESS = 4
# What a close may lag its deadline by on a loaded machine.
SLACK_S = 3.0


@pytest.fixture(scope="module")
def limited(tmp_path_factory) -> Iterator[SecureKafka]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("kafka-limits") / "data",
        kafka_port=0,
        extra_args=["--secure"],
        env={
            "STABLELINE_CONNECTION_AUTHENTICATION_TIMEOUT_S": str(AUTH_TIMEOUT_S),
            "STABLELINE_KAFKA_CONNECTIONS_MAX_IDLE_MS": str(MAX_IDLE_MS),
            "STABLELINE_KAFKA_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
        },
    )
    process.start()
    try:
        yield SecureKafka(process)
    finally:
        assert process.stop() == 0, process.log()


def closed_within(sock: socket.socket, timeout_s: float) -> float | None:
    """Seconds until the broker closed `sock` (None: still open after timeout_s)."""
    started = time.monotonic()
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    return time.monotonic() - started


def stats(secure: SecureKafka) -> dict:
    request = urllib.request.Request(
        secure.process.http_url + "/admin/v2/broker-stats/kafka-connections",
        headers={"Authorization": f"Bearer {secure.token(SUPERUSER)}"},
    )
    context = ssl.create_default_context(cafile=str(secure.ca_file))
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())


def health(secure: SecureKafka, source: str = "127.0.0.1") -> bytes:
    """The status line of the superuser's health check, sent from `source`."""
    context = ssl.create_default_context(cafile=str(secure.ca_file))
    raw = socket.create_connection(
        ("127.0.0.1", secure.process.http_port), timeout=10, source_address=(source, 0)
    )
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(
            b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n"
            b"Authorization: Bearer " + secure.token(SUPERUSER).encode() + b"\r\n\r\n"
        )
        return sock.recv(4096).split(b"\r\n", 1)[0]


def test_connections_that_do_not_authenticate_are_closed_at_the_deadline(limited):
    port = limited.process.kafka_port
    silent_tcp = socket.create_connection(("127.0.0.1", port), timeout=10)  # no TLS hello
    silent_tls = RawKafka(port, limited.ca_file)  # TLS done, then nothing
    after_handshake = RawKafka(port, limited.ca_file)
    versions = after_handshake.send(ApiVersionsRequest[0](), 0, ApiVersionsResponse[0])
    assert versions is not None and versions.error_code == 0
    handshake = after_handshake.send(
        SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse
    )
    assert handshake.error_code == 0  # and then no SaslAuthenticate
    try:
        for sock in (silent_tcp, silent_tls.sock, after_handshake.sock):
            waited = closed_within(sock, AUTH_TIMEOUT_S + SLACK_S)
            assert waited is not None, "a connection outlived the authentication deadline"
        counts = stats(limited)
        assert counts["authenticationTimeouts"] >= 2
        assert counts["handshakeFailures"] >= 1
    finally:
        for sock in (silent_tcp, silent_tls.sock, after_handshake.sock):
            sock.close()


def test_an_authenticated_connection_is_closed_once_idle(limited):
    connection = RawKafka(limited.process.kafka_port, limited.ca_file)
    try:
        assert connection.authenticate(limited.token(SUPERUSER)).error_code == 0
        opened = time.monotonic()
        waited = closed_within(connection.sock, MAX_IDLE_MS / 1000 + SLACK_S)
        assert waited is not None, "an idle connection outlived kafka_connections_max_idle_ms"
        # Not at the authentication deadline: authenticated, it had the idle one.
        assert time.monotonic() - opened >= MAX_IDLE_MS / 1000 - 0.5
    finally:
        connection.close()


def refused_at_once(port: int) -> bool:
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
    except ConnectionResetError:
        return True  # reset before connect() returned
    with extra:
        return closed_within(extra, AUTH_TIMEOUT_S / 2) is not None


def test_silent_sockets_filling_an_address_cannot_keep_a_client_out(limited):
    port = limited.process.kafka_port
    # The earlier tests' connections are let go first (a loaded broker releases a
    # closed TLS connection's slot a little after the close): the address is then
    # filled by the silent sockets alone.
    wait_until(lambda: stats(limited)["connections"] == 0, 10.0, "earlier connections gone")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(PER_ADDRESS)]
    logged_in: list[RawKafka] = []
    try:
        wait_until(lambda: stats(limited)["connections"] >= PER_ADDRESS, 5.0, "silent counted")
        # The address is full of sockets that never authenticate: a client from it
        # logs in at once, in the place of the one that waited longest.
        started = time.monotonic()
        client = RawKafka(port, limited.ca_file)
        logged_in.append(client)
        assert client.authenticate(limited.token(SUPERUSER)).error_code == 0
        assert time.monotonic() - started < AUTH_TIMEOUT_S
        assert closed_within(silent[0], AUTH_TIMEOUT_S / 2) is not None
        # Another address is not touched by any of it.
        other = RawKafka(port, limited.ca_file, source="127.0.0.2")
        try:
            assert other.authenticate(limited.token(SUPERUSER)).error_code == 0
            assert other.metadata(None) is not None
        finally:
            other.close()
        # With the address full of authenticated clients, one more is refused.
        for _ in range(PER_ADDRESS - 1):
            client = RawKafka(port, limited.ca_file)
            logged_in.append(client)
            assert client.authenticate(limited.token(SUPERUSER)).error_code == 0
        assert refused_at_once(port), "the connection past the per-address cap was kept"
        assert health(limited) == b"HTTP/1.1 200 OK"
        counts = stats(limited)
        assert counts["maxConnectionsPerAddress"] == PER_ADDRESS
        assert counts["evictedConnections"] >= PER_ADDRESS
        assert counts["refusedPerAddress"] >= 1
    finally:
        for sock in silent:
            sock.close()
        for client in logged_in:
            client.close()


def test_a_stop_ends_open_connections_quietly(tmp_path):
    """A broker stopped with Kafka clients still connected ends their connections
    without an error in its log (a cancelled connection task is the stop's doing)."""
    broker = BrokerProcess(tmp_path / "data", kafka_port=0)
    broker.start()
    clients = [RawKafka(broker.kafka_port) for _ in range(3)]
    try:
        for client in clients:
            assert client.metadata(["quiet-stop"], auto_create=True) == {"quiet-stop": 0}
        assert broker.stop() == 0
    finally:
        for client in clients:
            client.close()
        broker.stop()
    assert "Exception in callback" not in broker.log()
    assert " ERROR " not in broker.log()
