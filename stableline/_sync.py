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
)
from stableline.aio._producer import DEFAULT_MAX_PENDING_MESSAGES

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
        self._room = (
            threading.Semaphore(inner.max_pending_messages) if inner.block_if_queue_full else None
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
                    content, callback, properties, partition_key, _inner_txn(txn), room is not None
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

    def batch_receive(self, max_num_messages: int = 100, timeout_millis: int = 100) -> Messages:
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
    def state(self) -> str:
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
        operation_timeout_seconds: float = 30.0,
        *,
        authentication: AuthenticationToken | None = None,
        tls_trust_certs_file_path: str | Path | None = None,
        tls_certificate_file_path: str | Path | None = None,
        tls_private_key_file_path: str | Path | None = None,
        connection_backoff: aio.Backoff | None = None,
    ):
        self._loop = _LoopThread()

        async def make() -> aio.Client:
            return aio.Client(
                service_url,
                operation_timeout_seconds,
                authentication=authentication,
                tls_trust_certs_file_path=tls_trust_certs_file_path,
                tls_certificate_file_path=tls_certificate_file_path,
                tls_private_key_file_path=tls_private_key_file_path,
                connection_backoff=connection_backoff,
            )

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
        producer_name: str | None = None,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: float = 1,
        max_pending_messages: int = DEFAULT_MAX_PENDING_MESSAGES,
        block_if_queue_full: bool = False,
        batching_type: BatchingType = BatchingType.Default,
    ) -> Producer:
        inner = self._loop.run(
            self._inner.create_producer(
                topic,
                producer_name,
                batching_max_messages,
                batching_max_publish_delay_ms,
                max_pending_messages,
                block_if_queue_full,
                batching_type,
            )
        )
        return Producer(inner, self._loop)

    def subscribe(
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
        inner = self._loop.run(
            self._inner.subscribe(
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
        )
        return Consumer(inner, self._loop)

    def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = MessageId.earliest,
        isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED,
    ) -> Reader:
        inner = self._loop.run(self._inner.create_reader(topic, start_message_id, isolation_level))
        return Reader(inner, self._loop)

    def new_transaction(self, timeout_ms: int = 60_000) -> Transaction:
        return Transaction(self._loop.run(self._inner.new_transaction(timeout_ms)), self._loop)

    def get_last_message_id(self, topic: str) -> MessageId:
        return self._loop.run(self._inner.get_last_message_id(topic))

    def close(self) -> None:
        if self._loop.loop.is_closed():
            return
        self._loop.run(self._inner.close())
        self._loop.stop()
