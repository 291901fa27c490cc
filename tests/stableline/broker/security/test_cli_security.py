"""The CLI's security commands: tokens, permissions, and --token on client commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import jwt
import pytest

from stableline.broker.security.tokens import TokenVerifier, read_secret_key
from stableline.testing import BrokerProcess

from .conftest import SUPERUSER, Keys, Pki, tls_args, token_args


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stableline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_tokens_made_by_the_cli_verify_to_their_subject(tmp_path):
    secret = tmp_path / "secret.key"
    assert cli("tokens", "create-secret-key", "--output", str(secret)).returncode == 0
    assert secret.stat().st_mode & 0o077 == 0
    made = cli(
        "tokens", "create", "--secret-key", str(secret), "-s", "alice", "--expiry-time", "1h"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert TokenVerifier(secret_key=read_secret_key(secret)).role_of(token) == "alice"
    assert "exp" in jwt.decode(token, options={"verify_signature": False})


def test_rs256_key_pair_and_token_from_the_cli(tmp_path):
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    made = cli(
        "tokens",
        "create-key-pair",
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    assert made.returncode == 0, made.stderr
    token = cli("tokens", "create", "--private-key", str(private), "-s", "bob").stdout.strip()
    assert TokenVerifier(public_key=public.read_bytes()).role_of(token) == "bob"


def test_token_creation_needs_one_key_and_a_readable_expiry(tmp_path):
    assert cli("tokens", "create", "-s", "alice").returncode == 2
    secret = tmp_path / "secret.key"
    cli("tokens", "create-secret-key", "--output", str(secret))
    bad = cli("tokens", "create", "--secret-key", str(secret), "-s", "a", "--expiry-time", "soon")
    assert bad.returncode == 2
    assert "duration" in bad.stderr


def test_permissions_and_client_commands_take_a_token(auth_broker, keys):
    admin_url = auth_broker.http_url
    service = auth_broker.service_url
    role = "cli-writer"
    produce = ["produce", "cli-secured", "-m", "hi", "--service-url", service]

    refused = cli(*produce)
    assert refused.returncode == 1
    assert "AuthenticationError" in refused.stderr
    refused = cli(*produce, "--token", keys.token(role))
    assert refused.returncode == 1
    assert "AuthorizationError" in refused.stderr

    forbidden = cli(
        "admin", "permissions", "grant", "public/default", role, "-a", "produce",
        "--admin-url", admin_url, "--token", keys.token(role),
    )  # fmt: skip
    assert forbidden.returncode == 1
    assert "403" in forbidden.stderr
    granted = cli(
        "admin", "permissions", "grant", "public/default", role, "-a", "produce",
        "--admin-url", admin_url, "--token", keys.token(SUPERUSER),
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr

    # The token may also come from the environment.
    env = {**os.environ, "STABLELINE_TOKEN": keys.token(role)}
    sent = cli(*produce, env=env)
    assert sent.returncode == 0, sent.stderr
    listed = cli(
        "admin", "permissions", "list", "cli-secured", "--admin-url", admin_url,
        "--token", keys.token(SUPERUSER),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert '"cli-writer"' in listed.stdout
    topics = cli("admin", "topics", "list", "--admin-url", admin_url)
    assert topics.returncode == 1
    assert "401" in topics.stderr


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, keys: Keys, pki: Pki) -> Iterator[BrokerProcess]:
    """TLS on both ports, token authentication and authorization."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("secure") / "data", extra_args=[*tls_args(pki), *token_args(keys)]
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def test_perf_reaches_a_secure_broker_with_a_token_and_a_ca(secure_broker, keys, pki, tmp_path):
    out = tmp_path / "perf.json"
    base = [
        "perf", "e2e", "perf-secure", "-n", "300", "-d", "60", "--warmup", "0",
        "--service-url", secure_broker.service_url, "--tls-trust-certs-file", str(pki.ca_file),
    ]  # fmt: skip
    result = cli(*base, "--token", keys.token(SUPERUSER), "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(out.read_text())
    assert summary["produced"]["messages"] == 300 and summary["consumed"]["messages"] == 300
    assert summary["workload"]["token"] == "(given)"  # the credential stays out of reports
    refused = cli(*base)
    assert refused.returncode == 1
    assert "AuthenticationError" in refused.stderr and "Traceback" not in refused.stderr


def test_a_tls_broker_reached_without_tls_gets_a_hint_in_the_clis_flags(secure_broker, keys):
    plaintext = f"127.0.0.1:{secure_broker.grpc_port}"
    result = cli("consume", "t", "-s", "s", "--service-url", plaintext, "--token", keys.token("r"))
    assert result.returncode == 1
    assert "--tls-trust-certs-file" in result.stderr
    assert "tls_trust_certs_file_path" not in result.stderr
    admin = cli(
        "admin", "topics", "list", "--admin-url", f"http://127.0.0.1:{secure_broker.http_port}"
    )
    assert admin.returncode == 1
    assert "https://" in admin.stderr and "--tls-trust-certs-file" in admin.stderr
    assert "Traceback" not in admin.stderr
