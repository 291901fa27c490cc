"""Security fixtures: keys, tokens and certificates made at test time (none are committed)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

import stableline
from stableline import AuthenticationToken
from stableline.broker.security.certificates import CertificateAuthority
from stableline.broker.security.tokens import (
    create_key_pair,
    create_secret_key,
    create_token,
    read_secret_key,
)
from stableline.testing import BrokerProcess

SUPERUSER = "admin"


@dataclass(frozen=True)
class Keys:
    secret_key_file: Path
    private_key_file: Path
    public_key_file: Path

    def token(self, role: str, expiry_seconds: float | None = None) -> str:
        return create_token(
            role, secret_key=self.secret_key_file.read_bytes(), expiry_seconds=expiry_seconds
        )

    def rs256_token(self, role: str) -> str:
        return create_token(role, private_key=self.private_key_file.read_bytes())


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_cert_file: Path
    client_key_file: Path
    # A client certificate from a CA the broker does not trust.
    stranger_cert_file: Path
    stranger_key_file: Path


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> Keys:
    directory = tmp_path_factory.mktemp("keys")
    secret = directory / "secret.key"
    secret.write_bytes(create_secret_key())
    private, public = create_key_pair()
    (directory / "private.pem").write_bytes(private)
    (directory / "public.pem").write_bytes(public)
    return Keys(secret, directory / "private.pem", directory / "public.pem")


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    authority = CertificateAuthority("test CA")
    server = authority.issue_server(("localhost", "127.0.0.1"))
    client = authority.issue_client("test-client")
    stranger = CertificateAuthority("some other CA").issue_client("stranger")
    files = {
        "ca.pem": authority.cert_pem,
        "server.pem": server.cert_pem,
        "server-key.pem": server.key_pem,
        "client.pem": client.cert_pem,
        "client-key.pem": client.key_pem,
        "stranger.pem": stranger.cert_pem,
        "stranger-key.pem": stranger.key_pem,
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return Pki(*(directory / name for name in files))


def token_args(keys: Keys) -> list[str]:
    return ["--auth-token-secret-key", str(keys.secret_key_file), "--superuser-roles", SUPERUSER]


def tls_args(pki: Pki) -> list[str]:
    return ["--tls-cert", str(pki.server_cert_file), "--tls-key", str(pki.server_key_file)]


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory, keys: Keys) -> Iterator[BrokerProcess]:
    """One broker per module with token authentication and authorization (plaintext)."""
    process = BrokerProcess(tmp_path_factory.mktemp("auth") / "data", extra_args=token_args(keys))
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def http(
    broker: BrokerProcess,
    method: str,
    path: str,
    token: str | None = None,
    body: object = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, object]:
    """(status, JSON or bytes) of one admin call; error statuses are returned, not raised."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers["X-Stableline-Request"] = "test"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(broker.http_url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            status, raw, kind = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers
    if raw and kind.get_content_type() == "application/json":
        return status, json.loads(raw)
    return status, raw


# The limits the `secure_broker` runs with, small enough to reach in a test.
SECURE_MAX_OPEN_TXNS_PER_CLIENT = 3
SECURE_MAX_ACKS_PER_TXN = 5


@dataclass(frozen=True)
class SecureBroker:
    """A broker started with `serve --secure` (TLS, tokens, authorization), and how to
    reach it as any role: the SDK client, raw gRPC stubs (what an attacker sends), HTTPS."""

    process: BrokerProcess

    @property
    def security_dir(self) -> Path:
        return self.process.data_dir / "security"

    def token(self, role: str) -> str:
        secret = read_secret_key(self.security_dir / "secret.key")
        return create_token(role, secret_key=secret)

    def client(self, role: str, **options) -> stableline.Client:
        return stableline.Client(
            self.process.service_url,
            tls_trust_certs_file_path=self.security_dir / "ca.pem",
            authentication=AuthenticationToken(self.token(role)),
            **options,
        )

    def channel(self) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials((self.security_dir / "ca.pem").read_bytes())
        return grpc.secure_channel(f"127.0.0.1:{self.process.grpc_port}", credentials)

    def metadata(self, role: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token(role)}"),)

    def http(self, method: str, path: str, role: str = SUPERUSER, body: object = None):
        context = ssl.create_default_context(cafile=str(self.security_dir / "ca.pem"))
        return http(self.process, method, path, self.token(role), body, context)

    def grant(self, role: str, actions: list[str], namespace: str = "public/default") -> None:
        status, body = self.http(
            "POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", body=actions
        )
        assert status == 204, body


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory) -> Iterator[SecureBroker]:
    """One `serve --secure` broker per module, with small transaction limits."""
    directory = tmp_path_factory.mktemp("secure")
    config = directory / "broker.toml"
    config.write_text(
        f"max_open_transactions_per_client = {SECURE_MAX_OPEN_TXNS_PER_CLIENT}\n"
        f"max_acks_per_transaction = {SECURE_MAX_ACKS_PER_TXN}\n"
    )
    process = BrokerProcess(directory / "data", extra_args=["--secure", "--config", str(config)])
    process.start()
    try:
        assert process.tls
        yield SecureBroker(process)
    finally:
        assert process.stop() == 0, process.log()
