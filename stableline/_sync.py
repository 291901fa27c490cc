"""The blocking client: a shell running the asyncio client on a private loop thread.

It uses only stableline.aio's public API (tests/stableline/test_sync_shell.py reads
it for private names). Per-message calls cross to the loop in batches, never one by
one: send_async is aio's ThreadSender.send, which wakes the loop once for whatever
piled up; receive takes from a buffer refilled a batch at a time; acknowledge is
aio's acknowledge_nowait, which groups ids for ack_grouping_time_ms. Promises: send_async callbacks run on the loop thread, in send
order; with block_if_queue_full the caller waits for room; a blocking call made on
the loop thread (inside a callback) raises StableLineError; a grouped ack is
confirmed once close() returns; a closed client leaves no task pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from itertools import chain, islice, repeat
from pathlib import Path
from typing import Any, TypeVar

from stableline import aio
from stableline._auth import AuthenticationToken
from stableline._errors import (
    StableLineError,
    Timeout,
)
from stableline._keys import BatchingType, KeySharedPolicy
from stableline._routing import MessageRoutingMode, RoutedMessage
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    LookupResult,
    Message,
    MessageId,
    Messages,
    TransactionState,
)
from stableline.aio.options import (
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

# receive() refills its buffer with at most this many messages (and at most
# receiver_queue_size); a receive without a timeout waits in turns of this long.
RECEIVE_BATCH_MAX = 1000
_WAIT_FOREVER_MS = 3_600_000
_new_tuple = tuple.__new__  # makes a Message in C, skipping its __new__ in Python


def _messages_of(runs: list) -> Iterator[Message]:
    """The messages of these runs, each made when it is taken, in C (map, zip and
    chain of C callables: no Python frame, so threads taking from one iterator
    each take different messages). A message no one holds is freed at once: none
    lives long enough to be promoted by the garbage collector, which would then
    walk the whole heap to free it."""
    entries = [entry for entry, _indexes in runs]
    pairs = chain.from_iterable(map(zip, map(repeat, entries), [i for _e, i in runs]))
    return map(_new_tuple, repeat(Message), pairs)


def _buffer_key(item: Message | MessageId, whole_entry: bool) -> tuple:
    """What names a buffered message (or, whole_entry, its entry) across the topics
    and partitions one consumer reads: ledger and entry ids count per topic, so
    partition 0's 0:7 and partition 3's 0:7 are different entries. A bare MessageId
    names no topic (None: any), a PartitionedMessageId its partition."""
    if isinstance(item, Message):
        entry, index = item
        topic, partition, ledger_id, entry_id = (
            entry.topic,
            entry.partition,
            entry.ledger_id,
            entry.entry_id,
        )
    else:
        topic, partition = None, int(item.partition)
        ledger_id, entry_id, index = item
    return (ledger_id, entry_id), (topic, partition, None if whole_entry else index)


def _without(messages: Iterable[Message], keys: Iterable[tuple]) -> list[Message]:
    """The messages not named by any of keys (from _buffer_key)."""
    named: dict[tuple[int, int], list[tuple]] = {}
    for position, rest in keys:
        named.setdefault(position, []).append(rest)
    kept = []
    for message in messages:
        entry, index = message
        candidates = named.get((entry.ledger_id, entry.entry_id))
        if candidates is None or not any(
            (topic is None or topic == entry.topic)
            and partition == entry.partition
            and (named_index is None or named_index == index)
            for topic, partition, named_index in candidates
        ):
            kept.append(message)
    return kept


class _LoopThread:
    """The client's event loop, on a thread of its own; every blocking call runs there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="stableline-client", daemon=True
        )
        self._thread.start()

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise StableLineError("blocking client call from inside a client callback")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(function, *args)

    def stop(self) -> None:
        """End every task still on the loop (gRPC's own included), then the loop: a
        task left pending when the loop is closed warns "Task was destroyed but it is
        pending" when collected."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(RuntimeError):  # the loop was already stopped
            asyncio.run_coroutine_threadsafe(_end_tasks(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


async def _end_tasks() -> None:
    """Cancel every other task on this loop and wait until they have ended."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=2)
    await asyncio.get_running_loop().shutdown_asyncgens()


class Producer:
    """Sends through the asyncio producer on the client's loop.

    send_async hands the message to the producer's ThreadSender (stableline.aio),
    which admits it with back-pressure and wakes the loop once a batch of them.
    """

    def __init__(self, inner: aio.Producer | aio.PartitionedProducer, loop: _LoopThread):
        self._inner = inner
        self._loop = loop

        async def make() -> aio.ThreadSender:
            return aio.ThreadSender(inner, txn_of=_inner_txn)  # on the loop: it belongs there

        self._sender = loop.run(make())
        # send_async is the sender's own send, bound here: the hot path is one call, as
        # a send of the asyncio producer is (the method below gives its signature and
        # its documentation).
        self.send_async = self._sender.send

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
        return self._loop.run(self._send(content, properties, partition_key, _inner_txn(txn)))

    async def _send(self, content, properties, partition_key, txn) -> MessageId:
        self._sender.hand_over()  # what send_async handed over goes first
        return await self._inner.send(content, properties, partition_key, txn)

    def send_async(
        self,
        content: bytes,
        callback: Callable[[StableLineError | None, MessageId | None], None] | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> None:
        """Queue one message; callback(error, message_id) runs on the client's loop
        thread once it is durable or failed. None: fire and forget. Past
        max_pending_messages without callbacks run, the caller waits for room
        (block_if_queue_full) or the callback gets ProducerQueueIsFull; with no
        callback to tell, the call itself raises it (as a Kafka producer's
        produce() does), so a refused message is never lost unseen."""
        self._sender.send(content, callback, properties, partition_key, txn)

    def flush(self) -> None:
        """Wait until every message sent so far is durable (or failed) and its
        callback has run."""
        self._loop.run(self._sender.flush())

    def close(self) -> None:
        self._loop.run(self._close())

    async def _close(self) -> None:
        await self._sender.close()

    def _hand_over(self) -> None:
        """On the loop, after the client shut down: what was handed over fails at once."""
        self._sender.hand_over()


class Consumer:
    """Receives and acknowledges through the asyncio consumer on the client's loop.

    receive() takes from a buffer of this thread's, refilled from the receiver queue
    a batch at a time (up to receiver_queue_size messages, at most RECEIVE_BATCH_MAX:
    what the buffer holds counts as consumed, so the broker is given permits for it).
    The caller crosses to the loop only to refill; a refill returns as soon as the
    messages are taken (the permits' write is not waited for).

    acknowledge() is the asyncio consumer's acknowledge_nowait, which groups as
    Pulsar's acknowledgment grouping does: the ids wait ack_grouping_time_ms (or until
    ack_grouping_max_size of them) and go as one request, so acknowledge returns
    before the broker has the ack. A grouped ack is confirmed (fsynced by the broker)
    when close(), unsubscribe(), seek(), redeliver_unacknowledged_messages(), a
    cumulative, negative or transactional ack returns; with ack_grouping_time_ms=0
    every acknowledge waits for its answer and raises on a refusal. A refused grouped
    ack is logged.
    """

    def __init__(self, inner: aio.Consumer | aio.MultiTopicConsumer, loop: _LoopThread):
        self._inner = inner
        self._loop = loop
        options = inner.options
        # Messages taken from the receiver queue, not yet given out: an iterator that
        # makes each as it is taken (see _messages_of). Replaced under _buffer_lock.
        self._buffer_lock = threading.Lock()
        self._buffered: Iterator[Message] = iter(())
        self._take_buffered = self._buffered.__next__
        # With an ack timeout, a message's clock starts when it is taken from the
        # receiver queue: one at a time, so none waits out its timeout in the buffer.
        self._refill_size = (
            1 if options.ack_timeout_ms else min(options.receiver_queue_size, RECEIVE_BATCH_MAX)
        )
        self._several = isinstance(inner, aio.MultiTopicConsumer)
        # Plain acks are grouped: ack_grouping_time_ms > 0 and neither close() nor
        # unsubscribe() called (then acks wait for their answer, and raise).
        self._grouped = options.ack_grouping_time_ms > 0
        self._ack_nowait = inner.acknowledge_nowait
        # The topic of every stream reopened so far, in order (appended under
        # _buffer_lock): a refill taken before the n-th reopen drops what it holds
        # of the topics reopened since (see _on_reopen).
        self._reopened: list[str] = []
        inner.add_reopen_listener(self._on_reopen)

    def topic(self) -> str:
        return self._inner.topic()

    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        return self._inner.consumer_name()

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def get_last_message_id(self) -> MessageId:
        return self._loop.run(self._inner.get_last_message_id())

    def receive(self, timeout_millis: int | None = None) -> Message:
        try:
            return self._take_buffered()
        except StopIteration:
            return self._receive_refilled(timeout_millis)

    def _receive_refilled(self, timeout_millis: int | None) -> Message:
        while True:
            batch, reopens = self._loop.run(self._take_counted(self._refill_size, timeout_millis))
            with self._buffer_lock:
                runs = batch.runs()
                if len(self._reopened) != reopens:
                    # A stream was replaced since this refill was taken: what it holds
                    # of that topic comes again from the broker.
                    gone = set(self._reopened[reopens:])
                    runs = [run for run in runs if run[0].topic not in gone]
                # What another thread's refill left goes first.
                self._set_buffered(chain(list(self._buffered), _messages_of(runs)))
            try:
                return self._take_buffered()
            except StopIteration:
                continue  # other threads took this refill first: refill again

    def _set_buffered(self, messages: Iterator[Message]) -> None:
        """Under _buffer_lock: the buffer is now `messages`."""
        self._buffered = messages
        self._take_buffered = messages.__next__

    async def _take_counted(
        self, max_messages: int, timeout_millis: int | None
    ) -> tuple[Messages, int]:
        """_take, and how many reopens there had been when it took the messages."""
        batch = await self._take(max_messages, timeout_millis)
        return batch, len(self._reopened)

    def _on_reopen(self, topic: str) -> None:
        """On the loop, when a stream is replaced (before the broker redelivers):
        buffered messages of its topic are dropped, as its receiver queue was, so
        the redelivery is the only copy (the asyncio consumer sends the grouped acks
        ahead of it)."""
        with self._buffer_lock:
            self._reopened.append(topic)
            if self._several:
                kept = [m for m in self._buffered if m[0].topic != topic]
                self._set_buffered(iter(kept))
            else:
                self._set_buffered(iter(()))

    async def _take(self, max_messages: int, timeout_millis: int | None) -> Messages:
        """At least one message, up to max_messages; Timeout after timeout_millis."""
        inner = self._inner
        if timeout_millis is not None:
            batch = await inner.batch_receive(max_messages, timeout_millis)
            if not batch:
                raise Timeout(f"no message on {inner.topic()} within {timeout_millis} ms")
            return batch
        while True:
            batch = await inner.batch_receive(max_messages, _WAIT_FOREVER_MS)
            if batch:
                return batch

    def batch_receive(
        self,
        max_num_messages: int = BATCH_RECEIVE_MAX_MESSAGES,
        timeout_millis: int = BATCH_RECEIVE_TIMEOUT_MS,
    ) -> Messages:
        if max_num_messages < 1:
            raise ValueError("max_num_messages must be >= 1")
        buffered = list(islice(self._buffered, max_num_messages))
        if buffered:
            return Messages([(m[0], (m[1],)) for m in buffered])
        return self._loop.run(self._inner.batch_receive(max_num_messages, timeout_millis))

    def acknowledge(self, message: Message | MessageId | list | Messages, txn=None) -> None:
        """Acknowledge; grouped unless in a transaction or ack_grouping_time_ms is 0
        (then it returns once the broker has the ack, and raises if refused)."""
        if txn is None and self._grouped:
            self._ack_nowait(message)
            return
        self._loop.run(self._confirmed(self._inner.acknowledge, message, _inner_txn(txn)))
        if isinstance(txn, Transaction):
            txn._held_by(self, message)

    async def _confirmed(self, method: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """`method(*args)` once the grouped acks before it are confirmed."""
        await self._inner.flush_acknowledgments()
        return await method(*args)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._loop.run(self._confirmed(self._inner.acknowledge_cumulative, message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """The message's entry comes again: what of it is still buffered is dropped
        (as the receiver queue drops it), so none of it is delivered twice."""
        self._drop_buffered([_buffer_key(message, whole_entry=True)])
        self._loop.run(self._confirmed(self._inner.negative_acknowledge, message))

    def _drop_buffered(self, keys: Iterable[tuple]) -> None:
        """Forget the buffered messages keys name (_buffer_key): they come again."""
        with self._buffer_lock:
            self._set_buffered(iter(_without(self._buffered, keys)))

    def _clear_buffer(self) -> None:
        with self._buffer_lock:
            self._set_buffered(iter(()))

    def redeliver_unacknowledged_messages(self) -> None:
        self._clear_buffer()  # buffered messages are unacknowledged: they come again
        self._loop.run(self._confirmed(self._inner.redeliver_unacknowledged_messages))

    def seek(self, target: MessageId | int) -> None:
        self._clear_buffer()
        self._loop.run(self._confirmed(self._inner.seek, target))

    def unsubscribe(self) -> None:
        self._grouped = False
        self._clear_buffer()
        self._loop.run(self._confirmed(self._inner.unsubscribe))

    def close(self) -> None:
        """Close after every grouped ack is confirmed; buffered messages, not
        acknowledged, are delivered again (to this subscription's next consumer)."""
        self._clear_buffer()
        self._loop.run(self._close())

    async def _close(self) -> None:
        self._grouped = False
        await self._inner.close()  # confirms the grouped acks first

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

    def seek(self, message_id: MessageId) -> None:
        self._loop.run(self._inner.seek(message_id))

    def close(self) -> None:
        self._loop.run(self._inner.close())


class Transaction:
    def __init__(self, inner: aio.Transaction, loop: _LoopThread):
        self._inner = inner
        self._loop = loop
        # Messages acknowledged in this transaction, by consumer: an abort makes the
        # broker deliver exactly those again (not the rest of their batches), so any
        # of them a consumer still buffers goes.
        self._held: dict[Consumer, set[tuple]] = {}

    def _held_by(self, consumer: Consumer, message) -> None:
        items = message if isinstance(message, list | Messages) else [message]
        held = self._held.setdefault(consumer, set())
        held.update(_buffer_key(item, whole_entry=False) for item in items)

    @property
    def id(self) -> tuple[int, int]:
        return self._inner.id

    @property
    def state(self) -> TransactionState:
        """OPEN, COMMITTED or ABORTED; a str, so `txn.state == "COMMITTED"` holds."""
        return self._inner.state

    def commit(self) -> None:
        self._loop.run(self._inner.commit())
        self._held = {}

    def abort(self) -> None:
        try:
            self._loop.run(self._inner.abort())
        finally:
            held, self._held = self._held, {}
            for consumer, keys in held.items():
                consumer._drop_buffered(keys)

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
            # Closed before the asyncio client: their handed-over sends go out and
            # their grouped acks are confirmed first.
            self._opened: list[Producer | Consumer] = []
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
        message_routing_mode: MessageRoutingMode = PRODUCER_DEFAULTS.message_routing_mode,
        message_router: Callable[[RoutedMessage, int], int] | None = (
            PRODUCER_DEFAULTS.message_router
        ),
        partitions_update_interval_s: float = PRODUCER_DEFAULTS.partitions_update_interval_s,
    ) -> Producer:
        """A producer; past max_pending_messages unacknowledged, send() waits when
        block_if_queue_full, else raises ProducerQueueIsFull (Pulsar's semantics).
        A batch holds messages of one partition key at most: BatchingType.Default
        ends a batch where the key changes (send order kept), KeyBased groups a
        batching window's messages by key (order kept per key). On a partitioned
        topic, a keyed message goes to its key's partition and the others by
        message_routing_mode, as in stableline.aio."""
        return self.open_producer(
            topic,
            ProducerOptions(
                producer_name,
                batching_max_messages,
                batching_max_publish_delay_ms,
                max_pending_messages,
                block_if_queue_full,
                batching_type,
                message_routing_mode,
                message_router,
                partitions_update_interval_s,
            ),
        )

    def open_producer(self, topic: str, options: ProducerOptions) -> Producer:
        """create_producer with its options as one value."""
        producer = Producer(self._loop.run(self._inner.open_producer(topic, options)), self._loop)
        self._opened.append(producer)
        return producer

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern,
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
        ack_grouping_time_ms: int = CONSUMER_DEFAULTS.ack_grouping_time_ms,
        ack_grouping_max_size: int = CONSUMER_DEFAULTS.ack_grouping_max_size,
        partitions_update_interval_s: float = CONSUMER_DEFAULTS.partitions_update_interval_s,
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
                ack_grouping_time_ms,
                ack_grouping_max_size,
                partitions_update_interval_s,
            ),
        )

    def open_consumer(
        self, topic: str | list[str] | re.Pattern, subscription_name: str, options: ConsumerOptions
    ) -> Consumer:
        """subscribe with its options as one value; `topic` as in stableline.aio."""
        inner = self._loop.run(self._inner.open_consumer(topic, subscription_name, options))
        consumer = Consumer(inner, self._loop)
        self._opened.append(consumer)
        return consumer

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

    def get_partitioned_topic_metadata(self, topic: str) -> int:
        """How many partitions `topic` has; 0 when it is not partitioned."""
        return self._loop.run(self._inner.get_partitioned_topic_metadata(topic))

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions' names of a partitioned topic, else [topic]."""
        return self._loop.run(self._inner.get_topic_partitions(topic))

    def new_transaction(self, timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> Transaction:
        return Transaction(self._loop.run(self._inner.new_transaction(timeout_ms)), self._loop)

    def get_last_message_id(self, topic: str) -> MessageId:
        return self._loop.run(self._inner.get_last_message_id(topic))

    def lookup_topic(self, topic: str) -> LookupResult:
        """Which broker serves `topic` (see stableline.aio.Client.lookup_topic)."""
        return self._loop.run(self._inner.lookup_topic(topic))

    def close(self) -> None:
        """Close every producer (sending what it holds) and consumer (confirming its
        grouped acks), then the connections."""
        if self._loop.loop.is_closed():
            return
        self._loop.run(self._close())
        self._loop.stop()

    def shutdown(self) -> None:
        """Close at once, waiting for nothing: sends not yet durable fail (their
        callbacks say so), grouped acks not yet sent are dropped (their messages
        come again)."""
        if self._loop.loop.is_closed():
            return
        self._loop.run(self._shutdown())
        self._loop.stop()

    async def _shutdown(self) -> None:
        opened, self._opened = self._opened, []
        await self._inner.shutdown()
        for closeable in opened:
            if isinstance(closeable, Producer):
                closeable._hand_over()  # the producer is closed: each fails at once

    async def _close(self) -> None:
        opened, self._opened = self._opened, []
        for closeable in opened:
            with contextlib.suppress(Exception):
                await closeable._close()
        await self._inner.close()
