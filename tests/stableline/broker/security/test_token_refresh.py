"""A client given a token provider function carries on across token expiries: when the
broker ends an open stream because its token expired (authentication_refresh_check_
seconds), the SDK asks the provider again and reopens the stream with the fresh token.
Producers resend what is pending without duplicates, consumers resume. A fixed token,
or a provider giving the expired token again, still ends the stream with
AuthenticationError. Against a real `serve --secure` broker (TLS, tokens, authorization)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import jwt
import pytest

import stableline
import stableline.aio
from stableline import AuthenticationError, AuthenticationToken
from stableline.broker.security.tokens import create_token, read_secret_key
from stableline.testing import BrokerProcess

from .conftest import SecureBroker

REFRESH_CHECK_S = 0.2
TOKEN_LIFE_S = 2
EXPIRIES = 3  # each stream is ended by an expired token at least this many times
WITHIN_S = 60.0
ROLE = "renewer"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[SecureBroker]:
    directory = tmp_path_factory.mktemp("token-refresh")
    config = directory / "broker.toml"
    config.write_text(f"authentication_refresh_check_seconds = {REFRESH_CHECK_S}\n")
    process = BrokerProcess(directory / "data", extra_args=["--secure", "--config", str(config)])
    process.start()
    try:
        secure = SecureBroker(process)
        secure.grant(ROLE, ["produce", "consume"])
        yield secure
    finally:
        assert process.stop() == 0, process.log()


class ShortLivedTokens:
    """A token provider as an application writes one: the current token until it has
    expired, then a new one. Counts the tokens it issued."""

    def __init__(self, broker: SecureBroker, life_s: float = TOKEN_LIFE_S):
        self._secret = read_secret_key(broker.security_dir / "secret.key")
        self._life_s = life_s
        self._lock = threading.Lock()
        self._token = ""
        self._expires_at = 0.0
        self.issued = 0

    def __call__(self) -> str:
        with self._lock:
            if time.time() >= self._expires_at:
                self._token = create_token(
                    ROLE, secret_key=self._secret, expiry_seconds=self._life_s
                )
                self._expires_at = jwt.decode(self._token, options={"verify_signature": False})[
                    "exp"
                ]
                self.issued += 1
            return self._token


def _expired_endings(broker: SecureBroker, action: str, topic: str) -> int:
    """How many `action` streams on `topic` the broker ended for an expired token."""
    ending = (
        f"ending the {action} stream of role '{ROLE}' on persistent://public/default/{topic}: "
        "its token expired"
    )
    return broker.process.log().count(ending)


def _client(broker: SecureBroker, token) -> stableline.Client:
    return stableline.Client(
        broker.process.service_url,
        tls_trust_certs_file_path=broker.security_dir / "ca.pem",
        authentication=AuthenticationToken(token),
    )


def _topic_contents(broker: SecureBroker, topic: str) -> list[bytes]:
    with broker.client("admin") as admin:
        reader = admin.create_reader(topic, stableline.MessageId.earliest)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        return values


def _both_streams_ended(broker: SecureBroker, topic: str, times: int) -> bool:
    return (
        _expired_endings(broker, "produce", topic) >= times
        and _expired_endings(broker, "consume", topic) >= times
    )


async def test_a_producer_and_consumer_with_a_token_provider_carry_on_across_expiries(broker):
    topic = "renewed-aio"
    provider = ShortLivedTokens(broker)
    sent: list[bytes] = []
    received: list[bytes] = []
    async with stableline.aio.Client(
        broker.process.service_url,
        tls_trust_certs_file_path=broker.security_dir / "ca.pem",
        authentication=AuthenticationToken(provider),
    ) as client:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=5)
        receipts = []
        deadline = time.monotonic() + WITHIN_S
        while not _both_streams_ended(broker, topic, EXPIRIES):
            assert time.monotonic() < deadline, broker.process.log()
            # Sends kept in flight while the streams are ended and reopened.
            for _ in range(20):
                payload = f"m{len(sent)}".encode()
                sent.append(payload)
                receipts.append(producer.send_nowait(payload))
            try:
                while True:
                    message = await consumer.receive(timeout_millis=20)
                    received.append(message.data())
                    await consumer.acknowledge(message)
            except stableline.Timeout:
                pass
        await producer.flush()
        ids = [await receipt for receipt in receipts]
        while len(received) < len(sent):
            assert time.monotonic() < deadline, (len(received), len(sent))
            message = await consumer.receive(timeout_millis=10_000)
            received.append(message.data())
            await consumer.acknowledge(message)
        assert consumer.is_connected()
    assert provider.issued > EXPIRIES
    assert len(set(ids)) == len(sent)
    assert received == sent  # nothing lost, nothing twice, in order
    assert _topic_contents(broker, topic) == sent


def test_the_blocking_face_carries_on_across_expiries(broker):
    topic = "renewed"
    provider = ShortLivedTokens(broker)
    sent: list[bytes] = []
    received: list[tuple[bytes, int]] = []
    failures: list[BaseException] = []
    with _client(broker, provider) as client:
        consumer = client.subscribe(topic, "s", ack_grouping_time_ms=0)
        producer = client.create_producer(topic, batching_max_publish_delay_ms=5)
        deadline = time.monotonic() + WITHIN_S
        while not _both_streams_ended(broker, topic, 2):
            assert time.monotonic() < deadline, broker.process.log()
            for _ in range(20):
                payload = f"m{len(sent)}".encode()
                sent.append(payload)
                producer.send_async(payload, lambda e, _id: e is not None and failures.append(e))
            while True:
                try:
                    message = consumer.receive(timeout_millis=20)
                except stableline.Timeout:
                    break
                received.append((message.data(), message.redelivery_count()))
                consumer.acknowledge(message)
        producer.flush()
        while {data for data, _ in received} != set(sent):
            assert time.monotonic() < deadline, (len(received), len(sent))
            message = consumer.receive(timeout_millis=10_000)
            received.append((message.data(), message.redelivery_count()))
            consumer.acknowledge(message)
        assert consumer.is_connected()
    assert failures == []
    assert _topic_contents(broker, topic) == sent  # the resends made no duplicate
    # Every message once: what the blocking face had buffered when a stream reopened
    # was dropped, so the broker's redelivery was its only copy.
    assert sorted(data for data, _ in received) == sorted(sent)


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed-token", "provider-same-token"])
def test_a_token_that_cannot_be_refreshed_still_ends_the_streams(broker, fixed):
    topic = f"not-renewed-{fixed}"
    token = create_token(
        ROLE, secret_key=read_secret_key(broker.security_dir / "secret.key"), expiry_seconds=2
    )
    with _client(broker, token if fixed else lambda: token) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        producer.send(b"before")
        assert consumer.receive(timeout_millis=10_000).data() == b"before"
        deadline = time.monotonic() + WITHIN_S
        with pytest.raises(AuthenticationError) as raised:
            while time.monotonic() < deadline:
                producer.send(b"after")
                time.sleep(0.05)  # pacing the sends, not waiting for a condition
        if not fixed:
            assert "the token provider gave the same token again" in str(raised.value)
        with pytest.raises(AuthenticationError):
            while True:  # what was sent before the expiry, then the refusal
                assert consumer.receive(timeout_millis=int(WITHIN_S * 1000)).data() == b"after"
        assert not consumer.is_connected()
