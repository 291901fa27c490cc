"""The HTTP admin port caps its connections (max_http_connections) and closes one
that has not sent its request's headers within http_request_header_timeout_s."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest

from stableline.testing import BrokerProcess

MAX_HTTP_CONNECTIONS = 4
HEADER_TIMEOUT_S = 2
HALF_A_REQUEST = b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: broker\r\nX-Half: "


@pytest.fixture
def capped(tmp_path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data",
        env={
            "STABLELINE_MAX_HTTP_CONNECTIONS": str(MAX_HTTP_CONNECTIONS),
            "STABLELINE_HTTP_REQUEST_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        },
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def half_sent(broker: BrokerProcess) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", broker.http_port), timeout=10)
    connection.sendall(HALF_A_REQUEST)
    return connection


def closed_by_broker(connection: socket.socket) -> bool:
    """Waits (up to the socket's timeout) for the broker to close the connection."""
    try:
        return connection.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def health(broker: BrokerProcess) -> int:
    with urllib.request.urlopen(broker.http_url + "/admin/v2/brokers/health", timeout=10) as r:
        return r.status


def test_half_sent_requests_are_closed_at_the_header_deadline(capped):
    connections = [half_sent(capped) for _ in range(MAX_HTTP_CONNECTIONS)]
    try:
        # One more, the port full, takes the place of the half-sent request that
        # waited longest (closed at once), and is held to the deadline in its turn.
        extra = socket.create_connection(("127.0.0.1", capped.http_port), timeout=10)
        assert closed_by_broker(extra)
        extra.close()
        # Each half-sent request is closed by the broker (the socket timeout, 10 s,
        # is five times the deadline).
        assert all(closed_by_broker(c) for c in connections)
    finally:
        for connection in connections:
            connection.close()
    assert health(capped) == 200
    stats = capped.admin("/admin/v2/broker-stats/http-connections")
    assert stats["maxHttpConnections"] == MAX_HTTP_CONNECTIONS
    assert stats["evictedHttpConnections"] >= 1
    assert stats["httpHeaderTimeouts"] >= MAX_HTTP_CONNECTIONS


def test_a_request_sent_in_time_is_answered_and_keeps_its_connection(capped):
    connection = socket.create_connection(("127.0.0.1", capped.http_port), timeout=10)
    try:
        for _ in range(2):  # two requests on one keep-alive connection
            connection.sendall(HALF_A_REQUEST + b"1\r\n\r\n")
            assert connection.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        connection.close()


PER_ADDRESS = 2


@pytest.fixture
def capped_per_address(tmp_path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data",
        env={
            "STABLELINE_MAX_HTTP_CONNECTIONS": "8",
            "STABLELINE_HTTP_MAX_CONNECTIONS_PER_ADDRESS": str(PER_ADDRESS),
            "STABLELINE_HTTP_REQUEST_HEADER_TIMEOUT_S": "30",
        },
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def health_from(broker: BrokerProcess, source: str) -> bytes:
    """The status line of a health check sent from `source` (127.0.0.2 is loopback too)."""
    with socket.create_connection(
        ("127.0.0.1", broker.http_port), timeout=10, source_address=(source, 0)
    ) as connection:
        connection.sendall(
            b"GET /admin/v2/brokers/health HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n"
        )
        return connection.recv(4096).split(b"\r\n", 1)[0]


def served_from(broker: BrokerProcess, source: str) -> bool:
    try:
        return health_from(broker, source) == b"HTTP/1.1 200 OK"
    except ConnectionError:
        return False


def test_one_address_holding_half_sent_requests_does_not_starve_the_others(capped_per_address):
    broker = capped_per_address
    # One client reopening half-sent requests holds its address's share at most.
    connections = [half_sent(broker) for _ in range(PER_ADDRESS)]
    try:
        # Another address (the operator's) is answered, again and again.
        for _ in range(PER_ADDRESS + 3):
            assert health_from(broker, "127.0.0.2") == b"HTTP/1.1 200 OK"
        # And so is a health check from the client's own address: it takes the place
        # of the half-sent request that waited longest, which is closed.
        assert health_from(broker, "127.0.0.1") == b"HTTP/1.1 200 OK"
        assert closed_by_broker(connections[0])
        # Past its share, a new half-sent request displaces an older one, never a
        # connection that has sent its headers.
        newer = [half_sent(broker) for _ in range(3)]
        connections.extend(newer)
        assert all(closed_by_broker(c) for c in connections[:-PER_ADDRESS])
        stats = broker.admin("/admin/v2/broker-stats/http-connections")
    finally:
        for connection in connections:
            connection.close()
    assert stats["maxHttpConnectionsPerAddress"] == PER_ADDRESS
    assert stats["evictedHttpConnections"] >= 4
