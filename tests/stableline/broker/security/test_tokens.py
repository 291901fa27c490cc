"""Tokens: what `tokens create` makes, the broker's verifier accepts; nothing else passes."""

from __future__ import annotations

import base64
import time

import jwt
import pytest

from stableline.broker.security import tokens
from stableline.broker.security.tokens import (
    AuthenticationFailed,
    TokenVerifier,
    bearer_token,
    create_key_pair,
    create_secret_key,
    create_token,
    parse_duration,
    read_secret_key,
)


def test_hs256_token_verifies_to_its_subject():
    key = create_secret_key()
    assert TokenVerifier(secret_key=key).role_of(create_token("alice", secret_key=key)) == "alice"


def test_rs256_token_verifies_with_the_public_key_only():
    private, public = create_key_pair()
    token = create_token("bob", private_key=private)
    assert TokenVerifier(public_key=public).role_of(token) == "bob"


def test_token_signed_with_another_key_is_refused():
    token = create_token("alice", secret_key=create_secret_key())
    with pytest.raises(AuthenticationFailed, match="signature"):
        TokenVerifier(secret_key=create_secret_key()).role_of(token)


def test_hs256_token_is_refused_by_an_rs256_broker():
    _, public = create_key_pair()
    token = create_token("alice", secret_key=create_secret_key())
    with pytest.raises(AuthenticationFailed, match="RS256"):
        TokenVerifier(public_key=public).role_of(token)


def test_unsigned_token_is_refused():
    token = jwt.encode({"sub": "alice"}, key=None, algorithm="none")
    with pytest.raises(AuthenticationFailed):
        TokenVerifier(secret_key=create_secret_key()).role_of(token)


def test_expired_token_is_refused():
    key = create_secret_key()
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) - 10}, key, algorithm="HS256")
    with pytest.raises(AuthenticationFailed, match="expired"):
        TokenVerifier(secret_key=key).role_of(token)


def test_cached_token_is_refused_once_it_expires(monkeypatch):
    key = create_secret_key()
    verifier = TokenVerifier(secret_key=key)
    token = create_token("alice", secret_key=key, expiry_seconds=60)
    assert verifier.role_of(token) == "alice"
    later = time.time() + 120
    monkeypatch.setattr(tokens.time, "time", lambda: later)
    with pytest.raises(AuthenticationFailed, match="expired"):
        verifier.role_of(token)


def test_token_without_subject_is_refused():
    key = create_secret_key()
    with pytest.raises(AuthenticationFailed, match="sub"):
        TokenVerifier(secret_key=key).role_of(jwt.encode({"x": 1}, key, algorithm="HS256"))


def test_garbage_is_refused():
    with pytest.raises(AuthenticationFailed):
        TokenVerifier(secret_key=create_secret_key()).role_of("not.a.token")


def test_verified_token_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(tokens, "MAX_CACHED_TOKENS", 4)
    key = create_secret_key()
    verifier = TokenVerifier(secret_key=key)
    for i in range(10):
        verifier.role_of(create_token(f"role-{i}", secret_key=key))
    assert len(verifier._cache) == 4


def test_bearer_header_is_required_and_parsed():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for bad in (None, "", "Basic abc", "Bearer "):
        with pytest.raises(AuthenticationFailed):
            bearer_token(bad)


def test_secret_key_file_may_be_raw_or_base64(tmp_path):
    key = create_secret_key()
    (tmp_path / "raw").write_bytes(key)
    (tmp_path / "b64").write_bytes(b"base64:" + base64.b64encode(key) + b"\n")
    (tmp_path / "pulsar").write_bytes(b"data:;base64," + base64.b64encode(key))
    assert {read_secret_key(tmp_path / name) for name in ("raw", "b64", "pulsar")} == {key}


def test_durations_read_like_pulsars_expiry_time():
    assert parse_duration("90") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("1h") == 3600
    assert parse_duration("2d") == 172_800
    for bad in ("", "soon", "-1h", "0"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_create_token_needs_exactly_one_key():
    with pytest.raises(ValueError):
        create_token("alice")
    with pytest.raises(ValueError):
        create_token("", secret_key=create_secret_key())


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"k", id="one-byte"),
        pytest.param(b"x" * 31, id="31-bytes"),
        pytest.param(b"base64:" + base64.b64encode(b"short"), id="short-base64"),
    ],
)
def test_a_secret_key_shorter_than_32_bytes_is_refused_naming_its_file(tmp_path, content):
    path = tmp_path / "weak.key"
    path.write_bytes(content)
    with pytest.raises(
        ValueError, match=r"weak\.key holds a \d+-byte key; HS256 needs at least 32"
    ):
        read_secret_key(path)


def test_a_32_byte_secret_key_is_accepted(tmp_path):
    path = tmp_path / "ok.key"
    path.write_bytes(b"k" * 32)
    assert read_secret_key(path) == b"k" * 32
