"""Connection caps fitted to the open-files limit: with the broker at 1,024 open
files, a thousand sockets that never authenticate (on the Kafka port, or HTTP/2
prefaces on the gRPC port) leave the superuser's health check, Kafka login and SDK
produce working, are closed at the authentication deadline, and do not fill the log
with "Too many open files"."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from stableline import AuthenticationToken
from stableline.broker.config import BrokerConfig
from stableline.broker.connections.caps import RESERVED_FILES, PortCaps, connection_caps
from stableline.testing import BrokerProcess, open_files_limited
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import RawKafka

OPEN_FILES = 1024
ATTACKERS = 1000
AUTH_TIMEOUT_S = 5.0
SLACK_S = 4.0
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def test_caps_fit_what_the_open_files_limit_leaves():
    config = BrokerConfig()
    roomy = connection_caps(config, 100_000, 50_000)
    assert not roomy.reduced
    assert roomy.kafka == PortCaps(4096, 1024)
    assert roomy.http == PortCaps(1024, 64)
    assert roomy.grpc_sockets >= roomy.grpc.total
    tight = connection_caps(config, OPEN_FILES, OPEN_FILES // 2)
    assert tight.reduced and tight.budget == OPEN_FILES // 2 - RESERVED_FILES
    ports = (tight.grpc, tight.kafka, tight.http)
    assert sum(port.total for port in ports) <= tight.budget
    assert tight.grpc_sockets == tight.grpc.total
    # Cut, one address may hold at most half a port.
    assert all(port.per_address <= port.total // 2 for port in ports)
    no_kafka = connection_caps(BrokerConfig(kafka_address=""), OPEN_FILES, OPEN_FILES // 2)
    assert no_kafka.grpc.total > tight.grpc.total


class Secure:
    def __init__(self, process: BrokerProcess) -> None:
        self.process = process
        security = process.data_dir / "security"
        self.ca_file = security / "ca.pem"
        self.token = (security / "admin.token").read_text().strip()

    def _get(self, path: str) -> bytes:
        request = urllib.request.Request(
            self.process.http_url + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            assert response.status == 200
            return response.read()

    def get(self, path: str) -> dict:
        return json.loads(self._get(path))

    def health_s(self) -> float:
        """Seconds the superuser's health check took (it must answer 200)."""
        started = time.monotonic()
        self._get("/admin/v2/brokers/health")
        return time.monotonic() - started

    def produce(self, topic: str) -> None:
        with stableline.Client(
            self.process.service_url,
            tls_trust_certs_file_path=self.ca_file,
            authentication=AuthenticationToken(self.token),
            operation_timeout_seconds=30,
        ) as client:
            client.create_producer(topic).send(b"through the attack")

    def too_many_open_files(self) -> int:
        return self.process.log().count("Too many open files")


@pytest.fixture(scope="module")
def starved(tmp_path_factory) -> Iterator[Secure]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("starved") / "data",
        kafka_port=0,
        extra_args=["--secure"],
        interpreter_args=open_files_limited(OPEN_FILES),
        env={"STABLELINE_CONNECTION_AUTHENTICATION_TIMEOUT_S": str(AUTH_TIMEOUT_S)},
    )
    process.start()
    try:
        yield Secure(process)
    finally:
        assert process.stop() == 0, process.log()


def attack(port: int) -> list[socket.socket]:
    """ATTACKERS connections to `port` that send nothing."""
    sockets = []
    for _ in range(ATTACKERS):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def tls_prefaces(port: int, ca_file: Path) -> list[socket.socket]:
    """Up to ATTACKERS connections to `port` that finish TLS, send HTTP/2's preface
    and no call (those the broker refuses during the handshake are left out)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2"])
    sockets = []
    for _ in range(ATTACKERS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
            sock.sendall(HTTP2_PREFACE)
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def open_count(sockets: list[socket.socket]) -> int:
    """How many of `sockets` the broker has not closed."""
    count = 0
    for sock in sockets:
        try:
            while data := sock.recv(65536):
                del data
        except (BlockingIOError, ssl.SSLWantReadError):
            count += 1
        except OSError:
            pass
    return count


def test_a_thousand_silent_kafka_sockets_leave_the_broker_serving(starved: Secure):
    caps = starved.get("/admin/v2/broker-stats/kafka-connections")
    sockets = attack(starved.process.kafka_port)
    try:
        # Past the address's cap each new one took the place of an older one.
        wait_until(
            lambda: open_count(sockets) <= caps["maxConnectionsPerAddress"],
            10.0,
            "the sockets past the cap closed",
        )
        held = starved.get("/admin/v2/broker-stats/kafka-connections")["connections"]
        assert held <= caps["maxConnectionsPerAddress"]
        latencies = [starved.health_s() for _ in range(5)]
        starved.produce("attacked-kafka")
        # Kafka logins, from the attacker's address and another, while it is full.
        for source in ("127.0.0.1", "127.0.0.2"):
            login = RawKafka(starved.process.kafka_port, starved.ca_file, source=source)
            try:
                assert login.authenticate(starved.token).error_code == 0
            finally:
                login.close()
        wait_until(lambda: open_count(sockets) == 0, AUTH_TIMEOUT_S + SLACK_S, "sockets closed")
        after = starved.get("/admin/v2/broker-stats/kafka-connections")
        print(
            f"\nkafka attack: {ATTACKERS} sockets, {held} held, {after['evictedConnections']} "
            f"closed for newer ones; health {max(latencies) * 1000:.0f} ms at most; after the "
            f"deadline {after['connections']} held; 'Too many open files' lines: "
            f"{starved.too_many_open_files()}"
        )
        assert max(latencies) < 2.0
        assert after["connections"] == 0
        assert starved.too_many_open_files() <= 3
    finally:
        for sock in sockets:
            sock.close()


def test_a_thousand_grpc_sockets_without_a_call_are_capped_and_closed(starved: Secure):
    caps = starved.get("/admin/v2/broker-stats/connections")
    started = time.monotonic()
    sockets = tls_prefaces(starved.process.grpc_port, starved.ca_file)
    try:
        # Past the port's cap gRPC closed them at the accept.
        held = open_count(sockets)
        assert held <= caps["maxConnections"]
        latencies = [starved.health_s() for _ in range(5)]
        # Past the address's cap the guard shuts the rest down, well before the
        # deadline: a client from the same address gets in.
        wait_until(
            lambda: open_count(sockets) <= caps["maxConnectionsPerAddress"],
            AUTH_TIMEOUT_S - 2,
            "the sockets past the per-address cap shut down",
        )
        starved.produce("attacked-grpc")
        assert "past max_connections_per_address" in starved.process.log()
        wait_until(lambda: open_count(sockets) == 0, AUTH_TIMEOUT_S + SLACK_S, "sockets closed")
        closed_after = time.monotonic() - started
        print(
            f"\ngrpc attack: {ATTACKERS} TLS + HTTP/2 prefaces, {held} held, all closed "
            f"{closed_after:.1f} s after the first; health {max(latencies) * 1000:.0f} ms at "
            f"most; 'Too many open files' lines: {starved.too_many_open_files()}"
        )
        assert max(latencies) < 2.0
        assert starved.too_many_open_files() <= 3
    finally:
        for sock in sockets:
            sock.close()


def test_the_banner_says_the_caps_were_cut(starved: Secure):
    assert "connection caps cut to" in starved.process.log()
