"""Open Produce and Subscribe streams are re-checked while they last: a revoked grant
ends them with AuthorizationError, an expired token with AuthenticationError
(authentication_refresh_check_seconds, Pulsar's authenticationRefreshCheckSeconds)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import stableline
from stableline import AuthenticationError, AuthenticationToken, AuthorizationError
from stableline.testing import BrokerProcess

from .conftest import SUPERUSER, http, token_args

REFRESH_CHECK_S = 0.5
WITHIN_S = 15.0
NAMESPACE_PERMISSIONS = "/admin/v2/namespaces/public/default/permissions"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, keys) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("open-streams")
    config = directory / "broker.toml"
    config.write_text(f"authentication_refresh_check_seconds = {REFRESH_CHECK_S}\n")
    process = BrokerProcess(
        directory / "data", extra_args=[*token_args(keys), "--config", str(config)]
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def _client(broker, token: str) -> stableline.Client:
    return stableline.Client(broker.service_url, authentication=AuthenticationToken(token))


def _grant(broker, keys, role: str, actions: list[str]) -> None:
    path = f"{NAMESPACE_PERMISSIONS}/{role}"
    assert http(broker, "POST", path, keys.token(SUPERUSER), actions)[0] == 204


def _revoke(broker, keys, role: str) -> None:
    path = f"{NAMESPACE_PERMISSIONS}/{role}"
    assert http(broker, "DELETE", path, keys.token(SUPERUSER))[0] == 204


def _send_until_refused(producer, error_type) -> None:
    """Sends until one fails with error_type (each send is answered or refused)."""
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        try:
            producer.send(b"after")
        except error_type:
            return
        time.sleep(0.05)  # pacing the sends, not waiting for a condition
    raise AssertionError(f"sends still accepted {WITHIN_S} s later")


def _receive_until_refused(consumer, error_type) -> None:
    """Receives (what was sent before the token expired) until receive fails with error_type."""
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        try:
            consumer.receive(timeout_millis=int(WITHIN_S * 1000))
        except error_type:
            return
    raise AssertionError(f"messages still received {WITHIN_S} s later")


def test_a_revoked_grant_ends_an_open_producer_and_consumer(broker, keys):
    _grant(broker, keys, "rita", ["produce", "consume"])
    with _client(broker, keys.token("rita")) as rita:
        producer = rita.create_producer("revoked")
        consumer = rita.subscribe("revoked", "s")
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"
        _revoke(broker, keys, "rita")
        with pytest.raises(AuthorizationError):
            producer.send(b"after the revoke")
        with pytest.raises(AuthorizationError):
            consumer.receive(timeout_millis=int(WITHIN_S * 1000))
    # Nothing was written after the revoke.
    with _client(broker, keys.token(SUPERUSER)) as admin:
        reader = admin.create_reader("revoked", stableline.MessageId.earliest)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        assert values == [b"before"]
    assert "its grant was revoked" in broker.log()


def test_a_grant_that_still_allows_leaves_open_streams_working(broker, keys):
    _grant(broker, keys, "sam", ["produce", "consume"])
    with _client(broker, keys.token("sam")) as sam:
        producer = sam.create_producer("kept")
        consumer = sam.subscribe("kept", "s")
        _grant(broker, keys, "sam", ["produce", "consume"])  # re-granted: a change
        _grant(broker, keys, "someone-else", ["consume"])
        producer.send(b"still allowed")
        assert consumer.receive(timeout_millis=10_000).data() == b"still allowed"


def test_an_expired_token_ends_an_open_producer_and_consumer(broker, keys):
    _grant(broker, keys, "tess", ["produce", "consume"])
    with _client(broker, keys.token("tess", expiry_seconds=3)) as tess:
        producer = tess.create_producer("expiring")
        consumer = tess.subscribe("expiring", "s")
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"
        _send_until_refused(producer, AuthenticationError)
        _receive_until_refused(consumer, AuthenticationError)
    assert "its token expired" in broker.log()
