"""The blocking client: a thin shell running the async client on a private loop thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from stableline import aio
from stableline._auth import AuthenticationToken
from stableline._errors import StableLineError
from stableline._keys import BatchingType, KeySharedPolicy
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    Message,
    MessageId,
    Messages,
    TransactionState,
)
from stableline.aio._options import (
    BATCH_RECEIVE_MAX_MESSAGES,
    BATCH_RECEIVE_TIMEOUT_MS,
    CLIENT_DEFAULTS,
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    READER_DEFAULTS,
    TRANSACTION_TIMEOUT_MS,
    ClientOptions,
    ConsumerOptions,
    ProducerOptions,
    ReaderOptions,
)

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="stableline-client", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            raise StableLineError("blocking client call from inside a client callback")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(function, *args)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class Producer:
    def __init__(self, inner: aio.Producer, loop: _LoopThread):
        self._inner = inner
        self._loop = loop
        # send_async with block_if_queue_full blocks the calling thread for room. The
        # loop thread cannot be asked cheaply, so the calls this thread has queued
        # hold a slot each until their callbacks run.
        options = inner.options
        self._room = (
            threading.Semaphore(options.max_pending_messages)
            if options.block_if_queue_full
            else None
        )

    def topic(self) -> str:
        return self._inner.topic

    def producer_name(self) -> str:
        return self._inner.producer_name

    def send(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> MessageId:
        return self._loop.run(self._inner.send(content, properties, partition_key, _inner_txn(txn)))

    def send_async(
        self,
        content: bytes,
        callback: Callable[[StableLineError | None, MessageId | None], None],
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> None:
        room = self._room
        if room is not None:
            room.acquire()
            user_callback = callback

            def callback(error, message_id) -> None:
                room.release()
                user_callback(error, message_id)

        def queue() -> None:
            try:
                self._inner.send_async(
                    content,
                    callback,
                    properties,
                    partition_key,
                    _inner_txn(txn),
                    room_reserved=room is not None,
                )
            except StableLineError as error:
                callback(error, None)

        self._loop.call_soon(queue)

    def flush(self) -> None:
        self._loop.run(self._inner.flush())

    def close(self) -> None:
        self._loop.run(self._inner.close())


class Consumer:
    def __init__(self, inner: aio.Consumer, loop: _LoopThread):
        self._inner = inner
        self._loop = loop

    def topic(self) -> str:
        return self._inner.topic()

    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._loop.run(self._inner.receive(timeout_millis))

    def batch_receive(
        self,
        max_num_messages: int = BATCH_RECEIVE_MAX_MESSAGES,
        timeout_millis: int = BATCH_RECEIVE_TIMEOUT_MS,
    ) -> Messages:
        return self._loop.run(self._inner.batch_receive(max_num_messages, timeout_millis))

    def acknowledge(self, message: Message | MessageId | list | Messages, txn=None) -> None:
        self._loop.run(self._inner.acknowledge(message, _inner_txn(txn)))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._loop.run(self._inner.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._loop.run(self._inner.negative_acknowledge(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._loop.run(self._inner.redeliver_unacknowledged_messages())

    def seek(self, target: MessageId | int) -> None:
        self._loop.run(self._inner.seek(target))

    def unsubscribe(self) -> None:
        self._loop.run(self._inner.unsubscribe())

    def close(self) -> None:
        self._loop.run(self._inner.close())

    @property
    def is_active(self) -> bool:
        return self._inner.is_active


class Reader:
    def __init__(self, inner: aio.Reader, loop: _LoopThread):
        self._inner = inner
        self._loop = loop

    def topic(self) -> str:
        return self._inner.topic()

    def has_message_available(self) -> bool:
        return self._loop.run(self._inner.has_message_available())

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._loop.run(self._inner.read_next(timeout_millis))

    def close(self) -> None:
        self._loop.run(self._inner.close())


class Transaction:
    def __init__(self, inner: aio.Transaction, loop: _LoopThread):
        self._inner = inner
        self._loop = loop

    @property
    def id(self) -> tuple[int, int]:
        return self._inner.id

    @property
    def state(self) -> TransactionState:
        """OPEN, COMMITTED or ABORTED; a str, so `txn.state == "COMMITTED"` holds."""
        return self._inner.state

    def commit(self) -> None:
        self._loop.run(self._inner.commit())

    def abort(self) -> None:
        self._loop.run(self._inner.abort())

    def __repr__(self) -> str:
        return repr(self._inner)


def _inner_txn(txn):
    return getattr(txn, "_inner", txn)


class Client:
    """`with stableline.Client("127.0.0.1:6650") as client: ...`"""

    def __init__(
        self,
        service_url: str,
        operation_timeout_seconds: float = CLIENT_DEFAULTS.operation_timeout_seconds,
        *,
        authentication: AuthenticationToken | None = CLIENT_DEFAULTS.authentication,
        tls_trust_certs_file_path: str | Path | None = CLIENT_DEFAULTS.tls_trust_certs_file_path,
        tls_certificate_file_path: str | Path | None = CLIENT_DEFAULTS.tls_certificate_file_path,
        tls_private_key_file_path: str | Path | None = CLIENT_DEFAULTS.tls_private_key_file_path,
        connection_backoff: aio.Backoff | None = CLIENT_DEFAULTS.connection_backoff,
    ):
        self._start(
            service_url,
            ClientOptions(
                operation_timeout_seconds,
                authentication=authentication,
                tls_trust_certs_file_path=tls_trust_certs_file_path,
                tls_certificate_file_path=tls_certificate_file_path,
                tls_private_key_file_path=tls_private_key_file_path,
                connection_backoff=connection_backoff,
            ),
        )

    @classmethod
    def with_options(cls, service_url: str, options: ClientOptions) -> Client:
        """A client made from an options value (what the keyword arguments build)."""
        client = cls.__new__(cls)
        client._start(service_url, options)
        return client

    def _start(self, service_url: str, options: ClientOptions) -> None:
        self._loop = _LoopThread()

        async def make() -> aio.Client:
            # On the loop thread: the client's channels belong to its loop.
            return aio.Client.with_options(service_url, options)

        try:
            self._inner = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = PRODUCER_DEFAULTS.producer_name,
        batching_max_messages: int = PRODUCER_DEFAULTS.batching_max_messages,
        batching_max_publish_delay_ms: float = PRODUCER_DEFAULTS.batching_max_publish_delay_ms,
        max_pending_messages: int = PRODUCER_DEFAULTS.max_pending_messages,
        block_if_queue_full: bool = PRODUCER_DEFAULTS.block_if_queue_full,
        batching_type: BatchingType = PRODUCER_DEFAULTS.batching_type,
    ) -> Producer:
        """A producer; past max_pending_messages unacknowledged, send() waits when
        block_if_queue_full, else raises ProducerQueueIsFull (Pulsar's semantics).
        A batch holds messages of one partition key at most: BatchingType.Default
        ends a batch where the key changes (send order kept), KeyBased groups a
        batching window's messages by key (order kept per key)."""
        return self.open_producer(
            topic,
            ProducerOptions(
                producer_name,
                batching_max_messages,
                batching_max_publish_delay_ms,
                max_pending_messages,
                block_if_queue_full,
                batching_type,
            ),
        )

    def open_producer(self, topic: str, options: ProducerOptions) -> Producer:
        """create_producer with its options as one value."""
        return Producer(self._loop.run(self._inner.open_producer(topic, options)), self._loop)

    def subscribe(
        self,
        topic: str,
        subscription_name: str,
        consumer_type: ConsumerType = CONSUMER_DEFAULTS.consumer_type,
        initial_position: InitialPosition = CONSUMER_DEFAULTS.initial_position,
        isolation_level: IsolationLevel = CONSUMER_DEFAULTS.isolation_level,
        receiver_queue_size: int = CONSUMER_DEFAULTS.receiver_queue_size,
        consumer_name: str | None = CONSUMER_DEFAULTS.consumer_name,
        ack_timeout_ms: int = CONSUMER_DEFAULTS.ack_timeout_ms,
        negative_ack_redelivery_delay_ms: int = CONSUMER_DEFAULTS.negative_ack_redelivery_delay_ms,
        priority_level: int = CONSUMER_DEFAULTS.priority_level,
        key_shared_policy: KeySharedPolicy | None = CONSUMER_DEFAULTS.key_shared_policy,
    ) -> Consumer:
        return self.open_consumer(
            topic,
            subscription_name,
            ConsumerOptions(
                consumer_type,
                initial_position,
                isolation_level,
                receiver_queue_size,
                consumer_name,
                ack_timeout_ms,
                negative_ack_redelivery_delay_ms,
                priority_level,
                key_shared_policy,
            ),
        )

    def open_consumer(
        self, topic: str, subscription_name: str, options: ConsumerOptions
    ) -> Consumer:
        """subscribe with its options as one value."""
        inner = self._loop.run(self._inner.open_consumer(topic, subscription_name, options))
        return Consumer(inner, self._loop)

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = READER_DEFAULTS.start_message_id,
        isolation_level: IsolationLevel = READER_DEFAULTS.isolation_level,
    ) -> Reader:
        return self.open_reader(topic, ReaderOptions(start_message_id, isolation_level))

    def open_reader(self, topic: str, options: ReaderOptions) -> Reader:
        """create_reader with its options as one value."""
        return Reader(self._loop.run(self._inner.open_reader(topic, options)), self._loop)

    def new_transaction(self, timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> Transaction:
        return Transaction(self._loop.run(self._inner.new_transaction(timeout_ms)), self._loop)

    def get_last_message_id(self, topic: str) -> MessageId:
        return self._loop.run(self._inner.get_last_message_id(topic))

    def close(self) -> None:
        if self._loop.loop.is_closed():
            return
        self._loop.run(self._inner.close())
        self._loop.stop()
