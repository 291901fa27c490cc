"""The async client: one gRPC channel, factories for producers, consumers, readers."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import grpc

from stableline._auth import AuthenticationToken, channel_credentials
from stableline._errors import BrokerUnavailable, StableLineError
from stableline._keys import BatchingType, KeySharedPolicy
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    MessageId,
    parse_service_url,
)
from stableline.aio._consumer import Consumer
from stableline.aio._producer import DEFAULT_MAX_PENDING_MESSAGES, Producer
from stableline.aio._reader import Reader
from stableline.aio._reconnect import Backoff, stream_failure, with_retries
from stableline.aio._transaction import Transaction

T = TypeVar("T")

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
    # A connection of its own per Client, as Pulsar clients have: gRPC would otherwise
    # share one between channels to the same broker, and the broker's per-connection
    # limits (max_connections, open transactions per client) would lump clients together.
    ("grpc.use_local_subchannel_pool", 1),
    # gRPC's own reconnect backoff grows to minutes by default; a restarted broker
    # should be found within about a second.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


_PLAINTEXT_HINT = (
    "if the broker serves TLS, connect with a stableline+ssl:// URL and tls_trust_certs_file_path"
)
_TLS_HINT = (
    "if the broker serves TLS, check tls_trust_certs_file_path and, when the broker requires "
    "one, the client certificate; if it does not, use a stableline:// URL"
)


class Client:
    """`async with Client("127.0.0.1:6650") as client: ...`"""

    def __init__(
        self,
        service_url: str,
        operation_timeout_seconds: float = 30.0,
        *,
        authentication: AuthenticationToken | None = None,
        tls_trust_certs_file_path: str | Path | None = None,
        tls_certificate_file_path: str | Path | None = None,
        tls_private_key_file_path: str | Path | None = None,
        connection_backoff: Backoff | None = None,
    ):
        """Producers and consumers reconnect on their own when the broker goes away,
        waiting `connection_backoff` between attempts; after operation_timeout_seconds
        without a broker their pending sends and receives fail with BrokerUnavailable.
        A broker never reached fails the first call at once."""
        target, tls = parse_service_url(service_url)
        # A CA or client certificate means TLS even on a stableline:// URL.
        tls = tls or any(
            path is not None
            for path in (
                tls_trust_certs_file_path,
                tls_certificate_file_path,
                tls_private_key_file_path,
            )
        )
        self._channel = (
            grpc.aio.secure_channel(
                target,
                channel_credentials(
                    tls_trust_certs_file_path, tls_certificate_file_path, tls_private_key_file_path
                ),
                options=_CHANNEL_OPTIONS,
            )
            if tls
            else grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        )
        self._authentication = authentication
        self._tls = tls
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        self._timeout = operation_timeout_seconds
        self._backoff = connection_backoff or Backoff()
        self._reached = False  # a broker answered once: later outages are waited out
        self._closeables: list = []

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata sent with every call: the bearer token, when there is one."""
        return self._authentication.metadata() if self._authentication is not None else ()

    def _error(self, error: grpc.aio.AioRpcError) -> StableLineError:
        """The typed error; one that is a failure to connect says what to check about TLS."""
        failure = stream_failure(error)
        if type(failure) is BrokerUnavailable:
            hint = _TLS_HINT if self._tls else _PLAINTEXT_HINT
            return BrokerUnavailable(f"{failure} ({hint})")
        return failure

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        """`attempt()`, waiting out a broker that went away (not one never reached)."""
        if not self._reached:
            result = await attempt()
            self._reached = True
            return result
        return await with_retries(attempt, self._backoff, self._timeout, what)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_exc) -> None:
        await self.close()

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: float = 1,
        max_pending_messages: int = DEFAULT_MAX_PENDING_MESSAGES,
        block_if_queue_full: bool = False,
        batching_type: BatchingType = BatchingType.Default,
    ) -> Producer:
        """A producer; past max_pending_messages unacknowledged, send() waits when
        block_if_queue_full, else raises ProducerQueueIsFull (Pulsar's semantics).
        A batch holds messages of one partition key at most: BatchingType.Default
        ends a batch where the key changes (send order kept), KeyBased groups a
        batching window's messages by key (order kept per key)."""
        producer = Producer(
            self,
            topic,
            producer_name,
            batching_max_messages,
            batching_max_publish_delay_ms,
            max_pending_messages,
            block_if_queue_full,
            batching_type,
        )
        await producer._open()
        self._closeables.append(producer)
        return producer

    async def subscribe(
        self,
        topic: str,
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest,
        isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        ack_timeout_ms: int = 0,
        negative_ack_redelivery_delay_ms: int = 60_000,
        priority_level: int = 0,
        key_shared_policy: KeySharedPolicy | None = None,
    ) -> Consumer:
        consumer = Consumer(
            self,
            topic,
            subscription_name,
            consumer_type,
            initial_position,
            isolation_level,
            receiver_queue_size,
            consumer_name,
            ack_timeout_ms,
            negative_ack_redelivery_delay_ms,
            priority_level,
            key_shared_policy,
        )
        await consumer._open()
        self._closeables.append(consumer)
        return consumer

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = MessageId.earliest,
        isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED,
    ) -> Reader:
        reader = Reader(self, topic, start_message_id, isolation_level)
        await reader._open()
        self._closeables.append(reader)
        return reader

    async def _get_last(self, topic: str, missing_ok: bool = False) -> pb.Position:
        async def attempt() -> pb.Position:
            try:
                response = await self._stub.GetLastMessageId(
                    pb.GetLastMessageIdRequest(topic=topic),
                    timeout=self._timeout,
                    metadata=self._metadata(),
                )
            except grpc.aio.AioRpcError as error:
                if missing_ok and error.code() == grpc.StatusCode.NOT_FOUND:
                    return pb.Position(ledger_id=-1, entry_id=-1)
                raise self._error(error) from None
            return response.last_confirmed_entry

        return await self._with_retries(attempt, f"last message id of {topic}")

    async def new_transaction(self, timeout_ms: int = 60_000) -> Transaction:
        """Open a transaction; it aborts by itself if not ended within timeout_ms."""

        async def attempt() -> pb.NewTransactionResponse:
            try:
                return await self._stub.NewTransaction(
                    pb.NewTransactionRequest(timeout_ms=timeout_ms),
                    timeout=self._timeout,
                    metadata=self._metadata(),
                )
            except grpc.aio.AioRpcError as error:
                raise self._error(error) from None

        # A retry after a lost answer leaves the first transaction open; it times out.
        response = await self._with_retries(attempt, "new transaction")
        return Transaction(self, response.txn_id.most_bits, response.txn_id.least_bits, timeout_ms)

    async def get_last_message_id(self, topic: str) -> MessageId:
        last = await self._get_last(topic)
        return MessageId(last.ledger_id, last.entry_id, -1)

    async def close(self) -> None:
        for closeable in reversed(self._closeables):
            with contextlib.suppress(Exception):
                await closeable.close()
        self._closeables.clear()
        await self._channel.close()
