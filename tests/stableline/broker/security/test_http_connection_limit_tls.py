"""On a `serve --secure` broker the HTTP port's header deadline covers the TLS
handshake too: a connection that never handshakes, and one that handshakes and
sends half a request without a token, are both closed."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from stableline.testing import BrokerProcess

HEADER_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("secure-http")
    config = directory / "broker.toml"
    config.write_text(f"http_request_header_timeout_s = {HEADER_TIMEOUT_S}\n")
    process = BrokerProcess(directory / "data", extra_args=["--secure", "--config", str(config)])
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def closed_by_broker(connection) -> bool:
    try:
        return connection.recv(1024) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def test_a_connection_that_never_handshakes_is_closed(secure):
    with socket.create_connection(("127.0.0.1", secure.http_port), timeout=10) as raw:
        assert closed_by_broker(raw)


def test_a_half_sent_request_over_tls_without_a_token_is_closed(secure):
    context = ssl.create_default_context(cafile=str(secure.data_dir / "security" / "ca.pem"))
    raw = socket.create_connection(("127.0.0.1", secure.http_port), timeout=10)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: broker\r\n")
        assert closed_by_broker(tls)
