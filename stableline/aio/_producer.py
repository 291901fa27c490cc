"""The async producer: client-side batching over one Produce stream.

Every batch (entry) holds messages of one partition key at most. Messages without
a key go to `_batch`, the only batch the fast path of send_nowait looks at; keyed
messages go to the open batches of `_keyed`, one per (transaction, key). Default
batching keeps send order: at most one batch is open, keyed or not, and a new key
sends it. KeyBased batching keeps a batch per key open for the batching window,
so order is kept per key only; the window's batches go out together, many entries
in one ProducerSends frame (each still one key's entry with its own sequence id),
and the broker answers the frame with one SendReceipts, so a thousand keys cost
about what one key does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable

import grpc

from stableline._errors import (
    BrokerUnavailable,
    MessageTooBig,
    ProducerQueueIsFull,
    StableLineError,
    from_code,
)
from stableline._keys import BatchingType
from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId, TransactionState
from stableline.aio._batch import Batch, SendReceipt, frames, new_receipt
from stableline.aio._connection import Connection, rpc_failure
from stableline.aio._reconnect import (
    AnswerWatch,
    FindOwner,
    cancelled_by_watch,
    on_following_owner,
    read_until_gone,
)
from stableline.aio._state import StreamState, check_transition
from stableline.aio.options import ProducerOptions
from stableline.wire import (
    encode_message,
    key_fields,
    keyed_prefix,
    known_plain_prefix,
    plain_prefix,
)

# A batch is sent once its payloads reach this many bytes.
BATCHING_MAX_BYTES = 128 * 1024
_OPEN = TransactionState.OPEN
_READY = StreamState.READY
# Where a keyed message's batch is found: its key, or (transaction id, key).
Slot = str | tuple[tuple[int, int], str]
_LOST_POSITION = (
    "the broker holds this batch from before a reconnect, but no longer knows its position"
)


def send_with_callback(
    send_nowait: Callable,
    content: bytes,
    callback: Callable[[StableLineError | None, MessageId | None], None] | None,
    properties: dict[str, str] | None,
    partition_key: str | None,
    txn,
) -> None:
    """send_async's body for either producer: queue the message now (a full queue
    raises here), and run callback(error, message_id) once it is durable or failed."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, not {type(callback).__name__}")
    receipt = send_nowait(content, properties, partition_key, txn)
    if callback is None:
        return

    def done(batch_future: asyncio.Future) -> None:
        if batch_future.cancelled():
            callback(StableLineError("send cancelled"), None)
        elif batch_future.exception() is not None:
            callback(batch_future.exception(), None)
        else:
            callback(None, receipt.result())

    receipt._future.add_done_callback(done)


class Producer:
    """Sends to one topic over one Produce stream on its connection; made by
    Client.create_producer."""

    def __init__(
        self,
        connection: Connection,
        topic: str,
        options: ProducerOptions,
        find_owner: FindOwner | None = None,
    ):
        self.options = options
        # The queue: messages in sent batches without a receipt (_pending_messages)
        # plus the open batch, which may grow to _batch_cap, the room left when it
        # was opened. The limit is checked once per batch, never per message.
        self._max_pending = options.max_pending_messages
        self._pending_messages = 0
        self._batch_cap = options.batching_max_messages
        self._connection = connection
        # Where a broken stream is reopened when its broker is gone or no longer owns
        # the topic (None: always on `connection`).
        self._find_owner = find_owner
        self._requested_topic = topic
        self._name = options.producer_name or ""
        self._max_messages = options.batching_max_messages
        self._delay_s = max(options.batching_max_publish_delay_ms, 0) / 1000
        self._sequence = itertools.count()
        self._pending: dict[int, Batch] = {}
        self._space = asyncio.Event()
        self._space.set()
        self._batch: Batch | None = None
        # The open batch of each (transaction, key) with a key, and the messages they
        # hold together. Default batching opens at most one, and only while _batch
        # is empty; _batch never holds a keyed message.
        self._key_based = options.batching_type is BatchingType.KeyBased
        # A slot is the key alone without a transaction (the fast path looks it up by
        # the key given), else (transaction id, key).
        self._keyed: dict[Slot, Batch] = {}
        self._keyed_count = 0
        self._timer: asyncio.TimerHandle | None = None
        self._call = None
        self._stream_token: str | None = None  # the token _call was opened with
        self._receiver: asyncio.Task | None = None
        self._state = StreamState.CONNECTING
        # Why the stream ended for good: set as the producer moves to FAILED (or,
        # once CLOSED, when its receiver stops).
        self._failure: StableLineError | None = None
        self.topic = topic
        self.max_message_size = 5 * 1024 * 1024
        # (stream generation, sequence ids, request): a reconnect starts a generation.
        self._outgoing: asyncio.Queue = asyncio.Queue()
        self._generation = 0
        self._writer: asyncio.Task | None = None
        self._watch = AnswerWatch(connection.timeout_s, self._on_silent)

    def _on_silent(self) -> None:
        """Batches went unanswered for the operation timeout: end the stream."""
        if self._call is not None:
            self._call.cancel()

    def _move(self, new: StreamState) -> None:
        check_transition(f"producer for {self.topic}", self._state, new)
        self._state = new

    def _give_up(self, reason: StableLineError) -> None:
        """The stream ended for good: FAILED with `reason`, unless already CLOSED."""
        self._failure = reason
        if self._state is not StreamState.CLOSED:
            self._move(StreamState.FAILED)

    async def _open(self) -> None:
        opened = await self._open_stream()
        self._move(StreamState.READY)
        self.topic = opened.topic
        self.max_message_size = opened.max_message_size
        # A named producer continues after what the topic already holds of it.
        self._sequence = itertools.count(opened.last_sequence_id + 1)
        self._receiver = asyncio.create_task(self._receive())
        self._writer = asyncio.create_task(self._write_batches())

    async def _open_stream(self) -> pb.ProducerOpened:
        """A new Produce stream under this producer's name (the broker's, when it gave
        one: the same name on a reconnect is what de-duplicates the resends)."""
        opening = pb.ProduceRequest(
            open=pb.ProducerOpen(topic=self._requested_topic, producer_name=self._name)
        )
        call, opened, self._stream_token = await self._connection.open_stream(
            self._connection.broker.Produce,
            opening,
            "opened",
            f"the produce stream for {self._requested_topic}",
        )
        if self._call is not None:
            self._call.cancel()  # the broken stream this one replaces
        self._call = call
        self._name = opened.producer_name
        return opened

    async def _reconnect(self) -> None:
        """A new stream after a broken one, on the topic's owner wherever it now is."""
        _, self._connection = await on_following_owner(
            self._connection,
            self._reopen,
            self._find_owner,
            f"producer {self._name} on {self.topic}",
        )

    async def _reopen(self, connection: Connection) -> None:
        """After a broken stream: a new one on `connection`, then every batch without a
        receipt again, in sequence order, before anything newer. Batches the broker
        already holds (the same or a new owner of the topic, from the replicated
        log) are answered as duplicates with their first copy's position."""
        self._connection = connection
        await self._open_stream()
        self._watch.reset()
        if self._pending:
            self._watch.expect()
        self._generation += 1
        while not self._outgoing.empty():
            self._outgoing.get_nowait()
        pending = [
            (sequence_id, self._pending[sequence_id]) for sequence_id in sorted(self._pending)
        ]
        for sequence_ids, request in frames(pending, self._name, self.max_message_size):
            self._outgoing.put_nowait((self._generation, sequence_ids, request))

    @property
    def producer_name(self) -> str:
        return self._name

    def _open_batch(self) -> Batch | None:
        """The open batch of messages without a key (None when none is open); a
        partitioned producer's round robin moves on once it is sent."""
        return self._batch

    async def _receive(self) -> None:
        """Receipts, until the producer closes or the broker stays away too long."""
        try:
            reason = await read_until_gone(
                lambda: self._connection,
                self._read_receipts,
                self._reconnect,
                lambda: self._state is StreamState.CLOSED,
                f"producer {self._name} on {self.topic}",
                lambda: self._stream_token,
                lambda: self._watch.silent,
            )
            self._give_up(reason)
        except asyncio.CancelledError:
            self._give_up(BrokerUnavailable("producer closed"))
            raise
        finally:
            self._watch.stop()
            failure = self._ended()
            for batch in self._pending.values():
                _fail(batch, failure)
            self._pending.clear()
            self._pending_messages = 0
            self._space.set()

    async def _read_receipts(self) -> StableLineError:
        """Settle pending batches from the current stream; returns why it ended."""
        call = self._call
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return BrokerUnavailable(f"produce stream to {self.topic} ended")
                kind = response.WhichOneof("response")
                if kind == "receipts":
                    for receipt in response.receipts.receipts:
                        self._settle(receipt)
                    self._space.set()
                elif kind == "receipt":
                    self._settle(response.receipt)
                    self._space.set()
                elif kind == "error":
                    batch = self._pending.pop(response.error.sequence_id, None)
                    if batch is None:
                        continue
                    self._pending_messages -= batch.count
                    self._space.set()
                    _fail(batch, from_code(response.error.code, response.error.message))
                self._watch.answered(bool(self._pending))
        except grpc.aio.AioRpcError as error:
            return rpc_failure(error)
        except asyncio.CancelledError:
            if cancelled_by_watch(self._watch):
                return BrokerUnavailable("produce stream cancelled: the broker was silent")
            raise

    def _settle(self, receipt: pb.SendReceipt) -> None:
        batch = self._pending.pop(receipt.sequence_id, None)
        if batch is None:
            return
        self._pending_messages -= batch.count
        if receipt.ledger_id < 0:
            # A duplicate whose first copy the log no longer holds.
            _fail(batch, StableLineError(_LOST_POSITION))
        elif not batch.future.done():
            batch.future.set_result((receipt.ledger_id, receipt.entry_id))

    def _check_open(self) -> None:
        state = self._state
        if state is StreamState.CLOSED:
            raise StableLineError(f"producer for {self.topic} is closed")
        if state is StreamState.FAILED:
            raise self._failure

    def send_nowait(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
        event_time_ms: int = 0,
    ) -> SendReceipt:
        """Queue one message; await the returned receipt for its MessageId.

        Never waits: with max_pending_messages unacknowledged it raises
        ProducerQueueIsFull whatever block_if_queue_full says (await send() to wait).
        """
        batch = self._batch
        if (
            batch is not None
            and type(content) is bytes
            and not (properties or event_time_ms)
            and partition_key is None
            and self._state is _READY
            and (batch.txn is None if txn is None else batch.txn == txn.id and txn._state is _OPEN)
        ):
            # The usual send, a plain payload into an open batch (of its transaction,
            # if any) with room, costs two appends: this path skips the checks only
            # the rest can fail.
            prefix = known_plain_prefix(len(content))
            if prefix is not None:
                total = batch.size_bytes + len(prefix) + len(content)
                if total < BATCHING_MAX_BYTES and total <= self.max_message_size:
                    parts = batch.parts
                    parts.append(prefix)
                    parts.append(content)
                    index = batch.count
                    batch.count = index + 1
                    batch.size_bytes = total
                    if index + 1 >= self._batch_cap:
                        self._flush_batch()
                    return new_receipt(SendReceipt, (batch.future, index))
        elif (
            partition_key is not None
            and txn is None
            and self._key_based
            and type(content) is bytes
            and not (properties or event_time_ms)
            and self._state is _READY
        ):
            # KeyBased's usual send: a plain payload into its key's open batch. The
            # key's fields were encoded when the batch opened; the queue is counted
            # per message, as keyed batches open and close apart.
            keyed = self._keyed.get(partition_key)
            if (
                keyed is not None
                and keyed.count < self._max_messages
                and self._keyed_count + self._pending_messages + (batch.count if batch else 0)
                < self._max_pending
            ):
                fields = keyed.key_fields
                length = len(content)
                if length == keyed.prefix_length:
                    prefix = keyed.prefix
                else:
                    prefix = keyed.prefix = keyed_prefix(length, len(fields))
                    keyed.prefix_length = length
                total = keyed.size_bytes + len(prefix) + length + len(fields)
                if total < BATCHING_MAX_BYTES and total <= self.max_message_size:
                    parts = keyed.parts
                    parts.append(prefix)
                    parts.append(content)
                    parts.append(fields)
                    index = keyed.count
                    keyed.count = index + 1
                    keyed.size_bytes = total
                    self._keyed_count += 1
                    if index + 1 >= self._max_messages:
                        self._flush_slot(partition_key)
                    return new_receipt(SendReceipt, (keyed.future, index))
        return self._add(content, properties, partition_key, txn, event_time_ms, False)

    def _send_admitted(
        self, content: bytes, properties: dict[str, str] | None, partition_key: str | None, txn
    ) -> SendReceipt:
        """send_nowait for a message whose caller already waited for room: the blocking
        face's send_async with block_if_queue_full, which counts its own sends. A full
        queue (sends of another path filled it meanwhile) takes the message anyway."""
        if self.queue_full():
            return self._add(content, properties, partition_key, txn, 0, True)
        return self.send_nowait(content, properties, partition_key, txn)

    def _add(
        self,
        content: bytes,
        properties: dict[str, str] | None,
        partition_key: str | None,
        txn,
        event_time_ms: int,
        room_reserved: bool,
    ) -> SendReceipt:
        """send_nowait past its fast path: checks, encoding, opening batches."""
        self._check_open()
        if type(content) is not bytes:
            if not isinstance(content, bytearray | memoryview):
                raise TypeError(f"content must be bytes, not {type(content).__name__}")
            content = bytes(content)
        if properties or partition_key is not None or event_time_ms:
            encoded = [encode_message(content, properties, partition_key, event_time_ms)]
        else:
            encoded = [plain_prefix(len(content)), content]
        # Sizes count encoded bytes: the broker's limit is on the batch it stores.
        size = sum(map(len, encoded))
        if size > self.max_message_size:
            raise MessageTooBig(
                f"message of {len(content)} bytes ({size} encoded) exceeds the broker's "
                f"max message size of {self.max_message_size} bytes"
            )
        txn_id = None
        if txn is not None:
            txn._check_open()
            txn_id = txn.id
        if partition_key is not None:
            slot = partition_key if txn_id is None else (txn_id, partition_key)
            return self._add_by_key(encoded, size, txn, slot, room_reserved)
        if self._keyed and not self._key_based:
            self._flush_batch()  # send order: the keyed batch goes before this message
        batch = self._batch
        if batch is not None and (
            batch.txn != txn_id
            or batch.size_bytes + size > self.max_message_size
            or batch.count >= self._batch_cap
        ):
            self._flush_batch()
            batch = None
        if batch is None:
            room = self._max_pending - self._pending_messages
            if room <= 0:
                if not room_reserved:
                    raise self._queue_full_error()
                room = 1  # a blocking caller was admitted before the queue filled
            self._batch_cap = min(self._max_messages, room)
            batch = self._batch = Batch(txn_id, asyncio.get_running_loop().create_future())
            if txn is not None:
                txn._join(self, batch.future)
            if self._delay_s > 0 and self._timer is None:  # KeyBased: keyed batches' timer
                self._timer = asyncio.get_running_loop().call_later(
                    self._delay_s, self._flush_batch
                )
        batch.parts += encoded
        receipt = SendReceipt(batch.future, batch.count)
        batch.count += 1
        batch.size_bytes += size
        if (
            batch.count >= self._batch_cap
            or batch.size_bytes >= BATCHING_MAX_BYTES
            or self._delay_s == 0
        ):
            self._flush_batch()
        return receipt

    def _add_by_key(
        self,
        encoded: list[bytes],
        size: int,
        txn,
        slot: Slot,
        room_reserved: bool,
    ) -> SendReceipt:
        """A keyed message joins the open batch of its (transaction, key)."""
        if not self._key_based and (self._batch or (self._keyed and slot not in self._keyed)):
            self._flush_batch()  # send order: what is open goes before this key
        if self.queue_full() and not room_reserved:
            raise self._queue_full_error()
        batch = self._keyed.get(slot)
        if batch is not None and (
            batch.size_bytes + size > self.max_message_size or batch.count >= self._max_messages
        ):
            self._flush_slot(slot)
            batch = None
        if batch is None:
            loop = asyncio.get_running_loop()
            txn_id, key = (None, slot) if type(slot) is str else slot
            batch = self._keyed[slot] = Batch(
                txn_id, loop.create_future(), key=key, key_fields=key_fields(key)
            )
            if txn is not None:
                txn._join(self, batch.future)
            if self._delay_s > 0 and self._timer is None:
                self._timer = loop.call_later(self._delay_s, self._flush_batch)
        batch.parts += encoded
        receipt = SendReceipt(batch.future, batch.count)
        batch.count += 1
        batch.size_bytes += size
        self._keyed_count += 1
        if batch.count >= self._max_messages or batch.size_bytes >= BATCHING_MAX_BYTES:
            self._flush_slot(slot)
        if self._delay_s == 0:
            self._flush_batch()
        return receipt

    def _flush_slot(self, slot: Slot) -> None:
        batch = self._keyed.pop(slot)
        self._keyed_count -= batch.count
        self._enqueue(batch)

    async def send(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
        event_time_ms: int = 0,
    ) -> MessageId:
        """Send one message and wait for its MessageId. With max_pending_messages
        unacknowledged: waits for room if block_if_queue_full, else raises
        ProducerQueueIsFull."""
        while self.queue_full() and self._state is _READY:
            if not self.options.block_if_queue_full:
                raise self._queue_full_error()
            self._space.clear()
            await self._space.wait()
        return await self.send_nowait(content, properties, partition_key, txn, event_time_ms)

    def _queue_full_error(self) -> ProducerQueueIsFull:
        return ProducerQueueIsFull(
            f"producer for {self.topic} holds {self._pending_messages} messages not yet "
            f"acknowledged, its max_pending_messages; wait for receipts, or create it "
            "with block_if_queue_full=True and await send()"
        )

    def queue_full(self) -> bool:
        """Whether a send now would find max_pending_messages unacknowledged."""
        batch = self._batch
        queued = self._pending_messages + (batch.count if batch is not None else 0)
        return queued + self._keyed_count >= self._max_pending

    def send_async(
        self,
        content: bytes,
        callback: Callable[[StableLineError | None, MessageId | None], None] | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> None:
        """Queue one message; callback(error, message_id) runs once it is durable or
        failed; callback None sends it without telling (fire and forget). Never
        waits, as send_nowait."""
        send_with_callback(self.send_nowait, content, callback, properties, partition_key, txn)

    def _flush_batch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._batch = self._batch, None
        if batch:
            self._enqueue(batch)
        if len(self._keyed) == 1:
            self._flush_slot(next(iter(self._keyed)))
        elif self._keyed:
            # Every key's batch at once, in as few frames as hold them: per message this
            # costs what one batch does, however many keys the window saw.
            keyed = list(self._keyed.values())
            self._keyed.clear()
            self._keyed_count = 0
            self._enqueue_all(keyed)

    def _enqueue(self, batch: Batch) -> None:
        """Give the batch its sequence id and queue it for the stream writer."""
        if self._state is not _READY:
            # The stream ended for good while this batch was open (a revoked grant, an
            # expired token, ...): no receiver is left to settle it.
            _fail(batch, self._ended())
            return
        sequence_id = next(self._sequence)
        self._pending[sequence_id] = batch
        self._pending_messages += batch.count
        self._watch.expect()
        self._outgoing.put_nowait(
            (self._generation, (sequence_id,), batch.to_send(sequence_id, self._name))
        )

    def _enqueue_all(self, batches: list[Batch]) -> None:
        """_enqueue for several batches: a sequence id each, in order, sent together."""
        if self._state is not _READY:
            for batch in batches:
                _fail(batch, self._ended())
            return
        numbered = []
        for batch in batches:
            sequence_id = next(self._sequence)
            self._pending[sequence_id] = batch
            self._pending_messages += batch.count
            numbered.append((sequence_id, batch))
        self._watch.expect()
        for sequence_ids, request in frames(numbered, self._name, self.max_message_size):
            self._outgoing.put_nowait((self._generation, sequence_ids, request))

    async def _write_batches(self) -> None:
        """The one task that writes to the stream, so batches go out in sequence order."""
        while True:
            generation, sequence_ids, request = await self._outgoing.get()
            pending = self._pending
            if generation != self._generation or not any(s in pending for s in sequence_ids):
                continue  # queued for a stream that broke: _reopen queued it again
            try:
                await self._call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
                # The stream broke: the receiver reconnects and this batch is sent
                # again, or fails with the reason once the producer gives up.
                continue

    async def flush(self) -> None:
        """Send the open batch and wait until every message sent so far is acknowledged."""
        self._flush_batch()
        futures = [batch.future for batch in self._pending.values()]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    def _ended(self) -> StableLineError:
        return self._failure or BrokerUnavailable("producer closed")

    async def close(self) -> None:
        if self._state is StreamState.CLOSED:
            return
        with contextlib.suppress(StableLineError):
            await self.flush()
        self._move(StreamState.CLOSED)
        if self._call is not None:
            with contextlib.suppress(Exception):
                await self._call.done_writing()
        for task in (self._writer, self._receiver):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._call is not None:
            self._call.cancel()


def _fail(batch: Batch, error: StableLineError) -> None:
    if not batch.future.done():
        batch.future.set_exception(error)
