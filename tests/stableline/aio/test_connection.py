"""The connection object without a broker: gRPC failures come out typed, the token
goes with every call, a stream opens with one helper, retries wait out only a broker
that answered once, and the pool keeps one connection per broker address.

gRPC's own objects are faked only where the network would be: a stub method that
answers or fails as told.
"""

from __future__ import annotations

import grpc
import pytest

from stableline._auth import AuthenticationToken
from stableline._errors import (
    AuthenticationError,
    BrokerUnavailable,
    InvalidArgument,
    LimitExceeded,
    StableLineError,
    Timeout,
    TopicNotFound,
    TransactionEnded,
)
from stableline._proto import broker_pb2 as pb
from stableline.aio._connection import Connection, ConnectionPool, rpc_failure
from stableline.aio._reconnect import Backoff
from stableline.aio.options import ClientOptions


def _rpc_error(code: grpc.StatusCode, details: str, broker_code: str | None = None):
    trailing = grpc.aio.Metadata()
    if broker_code is not None:
        trailing.add("stableline-error", broker_code)
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


def test_a_broker_error_code_decides_the_type_whatever_the_status():
    failure = rpc_failure(_rpc_error(grpc.StatusCode.INTERNAL, "no such txn", "TransactionEnded"))
    assert type(failure) is TransactionEnded and str(failure) == "no such txn"


def test_a_status_alone_maps_to_its_type():
    assert type(rpc_failure(_rpc_error(grpc.StatusCode.NOT_FOUND, "x"))) is TopicNotFound
    assert type(rpc_failure(_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "x"))) is Timeout
    assert type(rpc_failure(_rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "x"))) is LimitExceeded
    assert type(rpc_failure(_rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "x"))) is InvalidArgument


@pytest.mark.parametrize(
    "status", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED]
)
def test_a_stream_broken_by_grpc_itself_is_broker_unavailable(status):
    failure = rpc_failure(_rpc_error(status, "Internal error from Core"))
    assert type(failure) is BrokerUnavailable
    assert "connection to the broker broke" in str(failure)


async def test_a_failure_to_connect_hints_at_the_tls_setting_the_connection_has():
    unreachable = _rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused")
    plain = Connection("127.0.0.1:1", False, ClientOptions())
    tls = Connection("127.0.0.1:1", True, ClientOptions())
    try:
        assert "stableline+ssl://" in str(plain.error(unreachable))
        assert "tls_trust_certs_file_path" in str(tls.error(unreachable))
        assert "stableline:// URL" in str(tls.error(unreachable))
        # Only a failure to connect gets the hint.
        assert str(plain.error(_rpc_error(grpc.StatusCode.NOT_FOUND, "gone"))) == "gone"
    finally:
        await plain.close()
        await tls.close()


async def test_every_call_carries_the_current_token():
    tokens = iter(["first", "second"])
    options = ClientOptions(authentication=AuthenticationToken(lambda: next(tokens)))
    connection = Connection("127.0.0.1:1", False, options)
    seen = []

    async def method(request, timeout, metadata):
        seen.append((request, timeout, metadata))
        return "answer"

    try:
        assert await connection.unary(method, "request") == "answer"
        assert await connection.unary(method, "request", timeout_s=2.5) == "answer"
    finally:
        await connection.close()
    assert seen == [
        ("request", 30.0, (("authorization", "Bearer first"),)),
        ("request", 2.5, (("authorization", "Bearer second"),)),
    ]


async def test_a_failed_unary_call_raises_the_typed_error():
    connection = Connection("127.0.0.1:1", False, ClientOptions())

    async def method(request, timeout, metadata):
        raise _rpc_error(grpc.StatusCode.NOT_FOUND, "topic t not found", "TopicNotFound")

    try:
        with pytest.raises(TopicNotFound, match="topic t not found"):
            await connection.unary(method, "request")
        # An unknown topic may count as empty.
        connection.broker = type("Stub", (), {"GetLastMessageId": staticmethod(method)})()
        last = await connection.last_confirmed("t", missing_ok=True)
        assert (last.ledger_id, last.entry_id) == (-1, -1)
        with pytest.raises(TopicNotFound):
            await connection.last_confirmed("t")
    finally:
        await connection.close()


class _FakeStream:
    """A bidi call that takes writes and answers one read."""

    def __init__(self, answer):
        self.answer = answer
        self.written = []
        self.cancelled = False

    async def write(self, request):
        self.written.append(request)

    async def read(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def cancel(self):
        self.cancelled = True


async def test_open_stream_writes_the_opening_and_returns_the_answer():
    opened = pb.ProduceResponse(opened=pb.ProducerOpened(topic="t", producer_name="p"))
    stream = _FakeStream(opened)
    connection = Connection("127.0.0.1:1", False, ClientOptions())
    opening = pb.ProduceRequest(open=pb.ProducerOpen(topic="t"))
    try:
        call, answer, token = await connection.open_stream(
            lambda metadata: stream, opening, "opened", "the produce stream for t"
        )
    finally:
        await connection.close()
    assert call is stream and stream.written == [opening] and not stream.cancelled
    assert answer.producer_name == "p" and token is None


async def test_open_stream_says_which_token_the_stream_was_opened_with():
    opened = pb.ProduceResponse(opened=pb.ProducerOpened(topic="t", producer_name="p"))
    tokens = iter(["first", "second"])
    options = ClientOptions(authentication=AuthenticationToken(lambda: next(tokens)))
    connection = Connection("127.0.0.1:1", False, options)
    sent = []

    def method(metadata):
        sent.append(metadata)
        return _FakeStream(opened)

    try:
        _call, _answer, token = await connection.open_stream(
            method, pb.ProduceRequest(), "opened", "s"
        )
    finally:
        await connection.close()
    assert token == "first" and sent == [(("authorization", "Bearer first"),)]


def _refused() -> AuthenticationError:
    return AuthenticationError("the token has expired")


async def test_an_expired_stream_reopens_only_when_the_provider_gives_another_token():
    current = ["old"]
    options = ClientOptions(authentication=AuthenticationToken(lambda: current[0]))
    connection = Connection("127.0.0.1:1", False, options)
    try:
        final = connection.refused_for_good(_refused(), "old")
        assert type(final) is AuthenticationError
        assert "the token provider gave the same token again" in str(final)
        current[0] = "new"
        assert connection.refused_for_good(_refused(), "old") is None
    finally:
        await connection.close()


async def test_a_token_provider_that_fails_ends_the_stream_and_fails_calls_typed():
    def broken() -> str:
        raise OSError("token file missing")

    connection = Connection(
        "127.0.0.1:1", False, ClientOptions(authentication=AuthenticationToken(broken))
    )
    try:
        final = connection.refused_for_good(_refused(), "old")
        assert type(final) is AuthenticationError and "token file missing" in str(final)
        with pytest.raises(AuthenticationError, match="the token provider failed"):
            await connection.open_stream(lambda metadata: None, pb.ProduceRequest(), "opened", "s")
    finally:
        await connection.close()


@pytest.mark.parametrize("authentication", [None, AuthenticationToken("fixed")])
async def test_an_expired_stream_without_a_token_provider_ends(authentication):
    connection = Connection("127.0.0.1:1", False, ClientOptions(authentication=authentication))
    refused = _refused()
    try:
        assert connection.refused_for_good(refused, "fixed") is refused
    finally:
        await connection.close()


@pytest.mark.parametrize(
    "answer",
    [grpc.aio.EOF, pb.ProduceResponse(receipt=pb.SendReceipt(sequence_id=1))],
    ids=["closed", "unexpected"],
)
async def test_a_stream_the_broker_does_not_open_is_cancelled_and_unavailable(answer):
    stream = _FakeStream(answer)
    connection = Connection("127.0.0.1:1", False, ClientOptions())
    try:
        with pytest.raises(BrokerUnavailable, match="broker closed the produce stream for t"):
            await connection.open_stream(
                lambda metadata: stream, pb.ProduceRequest(), "opened", "the produce stream for t"
            )
    finally:
        await connection.close()
    assert stream.cancelled


async def test_a_stream_refused_by_the_broker_raises_its_typed_error():
    stream = _FakeStream(_rpc_error(grpc.StatusCode.PERMISSION_DENIED, "no", "TopicNotFound"))
    connection = Connection("127.0.0.1:1", False, ClientOptions())
    try:
        with pytest.raises(TopicNotFound):
            await connection.open_stream(
                lambda metadata: stream, pb.ProduceRequest(), "opened", "s"
            )
    finally:
        await connection.close()
    assert stream.cancelled


async def test_a_broker_never_reached_fails_at_once_and_one_that_answered_is_waited_out():
    options = ClientOptions(connection_backoff=Backoff(initial_s=0.001, max_s=0.001))
    connection = Connection("127.0.0.1:1", False, options)
    failures = 0

    async def attempt() -> str:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise BrokerUnavailable("down")
        return "up"

    try:
        with pytest.raises(BrokerUnavailable):
            await connection.with_retries(attempt, "open")
        assert failures == 1  # no retry: it was never reached
        failures = 0

        async def answer(request, timeout, metadata):
            return "ok"

        await connection.unary(answer, "request")  # the broker answers once
        assert await connection.with_retries(attempt, "open") == "up"
        assert failures == 2
    finally:
        await connection.close()


async def test_the_pool_keeps_one_connection_per_broker_address():
    pool = ConnectionPool("stableline://127.0.0.1:6650", ClientOptions())
    try:
        assert pool.service.address == "127.0.0.1:6650"
        assert pool.get("127.0.0.1:6650") is pool.service
        other = pool.get("127.0.0.2:6650")
        assert other is not pool.service and pool.get("127.0.0.2:6650") is other
        assert len(pool) == 2
    finally:
        await pool.close()


async def test_every_connection_of_a_pool_has_the_tls_its_service_url_chose(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"")
    by_scheme = ConnectionPool("stableline+ssl://127.0.0.1:6651", ClientOptions())
    by_ca = ConnectionPool("127.0.0.1:6651", ClientOptions(tls_trust_certs_file_path=ca))
    plain = ConnectionPool("127.0.0.1:6650", ClientOptions())
    try:
        assert by_scheme.service.tls and by_scheme.get("127.0.0.2:6651").tls
        assert by_ca.service.tls and by_ca.get("127.0.0.2:6651").tls
        assert not plain.service.tls and not plain.get("127.0.0.2:6650").tls
    finally:
        for pool in (by_scheme, by_ca, plain):
            await pool.close()


async def test_closing_the_pool_closes_every_connection():
    pool = ConnectionPool("127.0.0.1:6650", ClientOptions())
    connections = [pool.service, pool.get("127.0.0.2:6650"), pool.get("127.0.0.3:6650")]
    await pool.close()
    assert all(connection.closed for connection in connections) and len(pool) == 0
    for connection in connections:
        with pytest.raises(StableLineError, match="the client is closed"):
            await connection.unary(
                connection.broker.GetLastMessageId, pb.GetLastMessageIdRequest(topic="t")
            )
        with pytest.raises(StableLineError, match="the client is closed"):
            await connection.open_stream(
                connection.broker.Produce, pb.ProduceRequest(), "opened", "s"
            )
