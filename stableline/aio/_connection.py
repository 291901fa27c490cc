"""A client's connections to brokers: one per broker address, each owning its gRPC
channel, the stubs on it, the metadata sent with every call (the bearer token),
retries across an outage, and the mapping of gRPC failures to typed errors.

Producers, consumers, readers and transactions hold the Connection they were opened
on, never the client. Promises: every failure of a call comes out as a
StableLineError; a broker never reached fails the first call at once, while one that
answered once is waited out for operation_timeout_seconds; a connection is its own
HTTP/2 connection, never shared with another client's.

The service URL names one broker or several of one cluster ("host1:6650,host2:6650");
the first is the service connection, the others are tried in turn when a lookup
cannot reach it. A topic is opened on the service connection, or on the connection
of the owner a lookup named; a broker that answers NotOwner sends the client to look
the topic up (Client._on_owner): the owner's connection is made on first use and
kept for the next topic it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from stableline._auth import bearer_metadata
from stableline._errors import (
    ERROR_METADATA_KEY,
    AuthenticationError,
    BrokerUnavailable,
    StableLineError,
    Timeout,
    TopicNotFound,
    from_rpc_error,
)
from stableline._proto import admin_pb2_grpc, broker_pb2_grpc
from stableline._proto import broker_pb2 as pb
from stableline._types import service_addresses
from stableline.aio._reconnect import is_transient, with_retries, within
from stableline.aio._transport import ChannelFactory, grpc_channel
from stableline.aio.options import ClientOptions

T = TypeVar("T")

_PLAINTEXT_HINT = (
    "if the broker serves TLS, connect with a stableline+ssl:// URL and tls_trust_certs_file_path"
)
_TLS_HINT = (
    "if the broker serves TLS, check tls_trust_certs_file_path and, when the broker requires "
    "one, the client certificate; if it does not, use a stableline:// URL"
)

# Statuses gRPC itself gives a stream whose connection broke mid-call (a write in
# flight reads "Internal error from Core"), as opposed to the broker's own errors,
# which always carry their error code in the trailing metadata.
_BROKEN_STREAM = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED)


def _from_broker(error: grpc.aio.AioRpcError) -> bool:
    """The broker's own errors carry their code in the trailing metadata."""
    return any(key == ERROR_METADATA_KEY for key, _ in error.trailing_metadata() or ())


def rpc_failure(error: grpc.aio.AioRpcError) -> StableLineError:
    """The typed error for a call or stream that ended with `error`."""
    if not _from_broker(error) and error.code() in _BROKEN_STREAM:
        return BrokerUnavailable(f"the connection to the broker broke: {error.details()}")
    return from_rpc_error(error)


class Connection:
    """One broker: its channel, stubs, call metadata, retries and error mapping."""

    def __init__(
        self,
        address: str,
        tls: bool,
        options: ClientOptions,
        open_channel: ChannelFactory = grpc_channel,
    ):
        self.address = address
        self.tls = tls
        self.timeout_s = options.operation_timeout_seconds
        self._authentication = options.authentication
        self.backoff = options.backoff
        self._channel = open_channel(address, tls, options)
        self.broker = broker_pb2_grpc.BrokerStub(self._channel)
        self.admin = admin_pb2_grpc.AdminStub(self._channel)  # a pattern's topic list
        self._reached = False  # the broker answered once: later outages are waited out
        self.closed = False

    def __repr__(self) -> str:
        return f"Connection({self.address}, tls={self.tls})"

    def _check_open(self) -> None:
        if self.closed:
            raise StableLineError(f"the client is closed: no more calls to {self.address}")

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata sent with every call: the bearer token, when there is one."""
        token = self.token()
        return bearer_metadata(token) if token is not None else ()

    def token(self) -> str | None:
        """The bearer token a call made now sends (a provider is asked again); a
        provider that fails raises AuthenticationError."""
        if self._authentication is None:
            return None
        try:
            return self._authentication.token()
        except Exception as error:
            raise AuthenticationError(f"the token provider failed: {error!r}") from error

    def refused_for_good(
        self, refused: AuthenticationError, stream_token: str | None
    ) -> AuthenticationError | None:
        """A stream opened with `stream_token` was ended UNAUTHENTICATED (its token
        expired): None when the token provider now gives another token, so the
        stream may reopen with it; else the error the stream ends with."""
        if self._authentication is None or not self._authentication.refreshable:
            return refused
        try:
            fresh = self.token()
        except AuthenticationError as error:
            return AuthenticationError(f"{refused} ({error})")
        if fresh == stream_token:
            return AuthenticationError(f"{refused} (the token provider gave the same token again)")
        return None

    def error(self, error: grpc.aio.AioRpcError) -> StableLineError:
        """The typed error; one that is a failure to connect says what to check about TLS."""
        failure = rpc_failure(error)
        if type(failure) is BrokerUnavailable:
            hint = _TLS_HINT if self.tls else _PLAINTEXT_HINT
            return BrokerUnavailable(f"{failure} ({hint})")
        return failure

    async def unary(
        self, method: Callable[..., Any], request: Any, timeout_s: float | None = None
    ) -> Any:
        """One call of a unary `method` of a stub on this connection, with the token;
        failures raise typed. Its deadline: timeout_s, else operation_timeout_seconds."""
        self._check_open()
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            response = await method(request, timeout=timeout, metadata=self.metadata())
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED and not _from_broker(error):
                raise Timeout(
                    f"the broker at {self.address} did not answer within {timeout:g} s"
                    " (operation_timeout_seconds)"
                ) from None
            raise self.error(error) from None
        self._reached = True
        return response

    async def with_retries(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        """`attempt()`, waiting out a broker that went away (not one never reached)."""
        if not self._reached:
            result = await within(
                time.monotonic() + self.timeout_s, attempt(), what, self.timeout_s
            )
            self._reached = True
            return result
        return await with_retries(attempt, self.backoff, self.timeout_s, what)

    async def open_stream(
        self, method: Callable[..., Any], opening: Any, answer: str, what: str
    ) -> tuple[grpc.aio.StreamStreamCall, Any, str | None]:
        """A new bidi stream of `method`: writes `opening`, waits for the response
        whose oneof `response` is `answer` and returns (call, that answer, the token
        it was opened with). `what` names the stream in the error when the broker
        closes it instead."""
        self._check_open()
        token = self.token()
        call = method(metadata=bearer_metadata(token) if token is not None else ())
        try:
            # A write the connection refused says only "Internal error from Core";
            # the read after it raises with the call's real status. A broker that
            # never answers is not waited for past the operation timeout.
            async with asyncio.timeout(self.timeout_s):
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await call.write(opening)
                response = await call.read()
        except grpc.aio.AioRpcError as error:
            call.cancel()
            raise self.error(error) from None
        except TimeoutError:
            call.cancel()
            raise BrokerUnavailable(
                f"{what}: the broker at {self.address} did not answer within "
                f"{self.timeout_s:g} s (operation_timeout_seconds)"
            ) from None
        except BaseException:
            call.cancel()  # cut by a caller's deadline: the half-open stream goes too
            raise
        if response is grpc.aio.EOF or response.WhichOneof("response") != answer:
            call.cancel()
            raise BrokerUnavailable(f"broker closed {what}")
        self._reached = True
        return call, getattr(response, answer), token

    async def last_confirmed(self, topic: str, missing_ok: bool = False) -> pb.Position:
        """The topic's last confirmed entry; (-1, -1) for an unknown one if missing_ok.
        Retried across an outage of this broker."""
        return await self.with_retries(
            lambda: self.last_confirmed_now(topic, missing_ok), f"last message id of {topic}"
        )

    async def last_confirmed_now(self, topic: str, missing_ok: bool = False) -> pb.Position:
        """last_confirmed, asked once."""
        try:
            response = await self.unary(
                self.broker.GetLastMessageId, pb.GetLastMessageIdRequest(topic=topic)
            )
        except TopicNotFound:
            if not missing_ok:
                raise
            return pb.Position(ledger_id=-1, entry_id=-1)
        return response.last_confirmed_entry

    async def close(self) -> None:
        self.closed = True
        await self._channel.close()


class ConnectionPool:
    """A client's connections, one per broker address; today only the service URL's.

    Every connection has the client's options and the TLS the service URL chose: the
    brokers of one cluster are reached alike.
    """

    def __init__(
        self, service_url: str, options: ClientOptions, open_channel: ChannelFactory = grpc_channel
    ):
        seeds, tls = service_addresses(service_url)
        self._open_channel = open_channel
        self.seeds = list(seeds)
        self._tls = tls or options.wants_tls
        self._options = options
        self._connections: dict[str, Connection] = {}
        self.service = self.get(self.seeds[0])

    async def on_seeds(self, attempt: Callable[[Connection], Awaitable[T]], what: str) -> T:
        """`attempt(connection)` on the service connection, waiting out an outage as
        `Connection.with_retries` does; with several seeds, a service broker that
        cannot be reached is passed over for the next seed that answers, which is the
        service connection from then on (Pulsar's multi-host service URL)."""
        if len(self.seeds) == 1:
            service = self.service
            return await service.with_retries(lambda: attempt(service), what)

        async def each_seed() -> T:
            failure: BrokerUnavailable | None = None
            first = self.service.address
            for address in [first, *(seed for seed in self.seeds if seed != first)]:
                connection = self.get(address)
                try:
                    result = await attempt(connection)
                except BrokerUnavailable as error:
                    failure = error
                    continue
                self.service = connection
                return result
            assert failure is not None
            raise failure

        if not any(self.get(seed)._reached for seed in self.seeds):
            # No broker ever answered: fail at once, or at the deadline.
            budget_s = self._options.operation_timeout_seconds
            return await within(time.monotonic() + budget_s, each_seed(), what, budget_s)
        return await with_retries(
            each_seed, self._options.backoff, self._options.operation_timeout_seconds, what
        )

    async def retried(
        self,
        attempt: Callable[[], Awaitable[T]],
        what: str,
        retried: Callable[[BaseException], bool] = is_transient,
    ) -> T:
        """`attempt()` with the backoff until it succeeds or the operation timeout is
        spent, retrying the failures `retried` allows; while no broker of the pool
        ever answered, it is tried once (a broker never reached fails at once)."""
        budget_s = self._options.operation_timeout_seconds
        if not any(connection._reached for connection in self._connections.values()):
            return await within(time.monotonic() + budget_s, attempt(), what, budget_s)
        return await with_retries(attempt, self._options.backoff, budget_s, what, retried)

    def other_than(self, address: str) -> Connection:
        """A connection to some broker other than the one at `address` (which went
        away): a seed, else one this client reached, else the service connection."""
        for seed in self.seeds:
            if seed != address:
                return self.get(seed)
        for connection in self._connections.values():
            if connection.address != address and connection._reached:
                return connection
        return self.service

    def get(self, address: str) -> Connection:
        """The connection to the broker at `address`, made on first use."""
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = Connection(
                address, self._tls, self._options, self._open_channel
            )
        return connection

    def __len__(self) -> int:
        return len(self._connections)

    async def close(self) -> None:
        """Close every connection; the pool is empty after."""
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.close()
