"""The async consumer: a Subscribe stream, a receiver queue, acks, nacks, seek.

A nack (or an ack timeout) hands back one delivery of an entry, named by its
redelivery count, so the broker ignores it once the entry has been delivered again.
Handing an entry back drops what of that delivery is still queued (its permits
are given back), and a delivery that arrives drops a pending nack or ack timeout
of an earlier one: one copy of a message is outstanding at a time.

Permits go back to the broker by a write no receive waits for (as Pulsar's
clients send their flow): what was taken is the caller's at once, and the next
entry is on its way while the caller works.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import grpc

from stableline._errors import (
    BrokerUnavailable,
    StableLineError,
    Timeout,
    from_code,
)
from stableline._proto import broker_pb2 as pb
from stableline._types import (
    ISOLATION_LEVEL_PROTO,
    ConsumerType,
    DeliveredEntry,
    Message,
    MessageId,
    Messages,
    message_indexes,
)
from stableline.aio._ack_grouping import AckGrouping
from stableline.aio._connection import Connection, rpc_failure
from stableline.aio._reconnect import (
    AnswerWatch,
    FindOwner,
    cancelled_by_watch,
    is_transient,
    on_following_owner,
    read_until_gone,
)
from stableline.aio._state import StreamState, check_transition
from stableline.aio.options import (
    BATCH_RECEIVE_MAX_MESSAGES,
    BATCH_RECEIVE_TIMEOUT_MS,
    ConsumerOptions,
)

MessageOrId = Message | MessageId

# How long close() waits for the broker to end the stream (one round trip when
# the broker is well; a broker that does not answer only delays the close).
_CLOSE_WAIT_S = 2.0


def _id_of(item: MessageOrId) -> MessageId:
    if isinstance(item, Message):
        return item.message_id()
    if isinstance(item, MessageId):
        return item
    raise TypeError(f"expected a Message or MessageId, not {type(item).__name__}")


def _ack_ids(items: list[MessageOrId] | Messages) -> list[MessageId]:
    """The ids to send for acknowledging `items`.

    An entry whose every message is in the list goes as one whole-entry id (batch
    index -1): the broker acknowledges an entry once all its batch indexes are, so
    the outcome is the same, and the work drops from one id per message to one per
    entry. Messages from batch_receive are taken a run (entry) at a time.
    """
    ids: list[MessageId] = []
    batched: dict[DeliveredEntry, set[int]] = {}
    if isinstance(items, Messages):
        for entry, indexes in items.runs():
            if len(indexes) == entry.num_messages and entry not in batched:
                ids.append(MessageId(entry.ledger_id, entry.entry_id, -1))
            else:
                batched.setdefault(entry, set()).update(indexes)
        items = ()
    for item in items:
        if type(item) is Message and item._entry.num_messages > 1:
            indexes = batched.get(item._entry)
            if indexes is None:
                indexes = batched[item._entry] = set()
            indexes.add(item._index)
        else:
            ids.append(_id_of(item))
    for entry, indexes in batched.items():
        if len(indexes) == entry.num_messages:
            ids.append(MessageId(entry.ledger_id, entry.entry_id, -1))
        else:
            ids.extend(MessageId(entry.ledger_id, entry.entry_id, i) for i in sorted(indexes))
    return ids


class Consumer:
    """One consumer of a subscription, over one Subscribe stream on its connection;
    made by Client.subscribe."""

    def __init__(
        self,
        connection: Connection,
        topic: str,
        subscription_name: str,
        options: ConsumerOptions,
        partition: int = -1,
        find_owner: FindOwner | None = None,
    ):
        self.options = options
        self._connection = connection
        # Where a broken stream is resubscribed when its broker is gone or no longer
        # owns the topic (None: always on `connection`).
        self._find_owner = find_owner
        self._topic = topic
        # Its partition's index when it reads one partition of a partitioned topic:
        # its messages' ids carry it (MessageId.partition()).
        self._partition = partition
        self._subscription = subscription_name
        self._queue_size = options.receiver_queue_size
        # Named here when not given, as Pulsar's clients do, so consumer_name() knows it.
        self._name = options.consumer_name or f"consumer-{secrets.token_hex(5)}"
        self._ack_timeout_s = options.ack_timeout_ms / 1000
        self._nack_delay_s = options.negative_ack_redelivery_delay_ms / 1000
        # Runs of (entry, message indexes) in arrival order; messages are made on demand.
        self._queue: deque[tuple[DeliveredEntry, Sequence[int]]] = deque()
        self._queued = 0  # messages in self._queue
        self._arrived = asyncio.Event()
        self._consumed_since_flow = 0
        self._requests = itertools.count(1)
        # request id -> (answer, request): resent on a new stream if unanswered.
        self._waiting: dict[int, tuple[asyncio.Future, pb.SubscribeRequest]] = {}
        self._discarding = False
        # Entry -> (deadline, redelivery count of the delivery to hand back then;
        # None: whichever is outstanding).
        self._unacked: dict[tuple[int, int], tuple[float, int | None]] = {}
        self._nacked: dict[tuple[int, int], tuple[float, int | None]] = {}
        self._timer: asyncio.Task | None = None
        self._flow_writer: asyncio.Task | None = None  # writes the permits owed
        self._timer_wakeup = asyncio.Event()
        self._call = None
        self._watch = AnswerWatch(connection.timeout_s, self._on_silent)
        self._stream_token: str | None = None  # the token _call was opened with
        self._receiver: asyncio.Task | None = None
        self._state = StreamState.CONNECTING
        # Why the stream ended for good: set as the consumer moves to FAILED (or,
        # once CLOSED, when its receiver stops).
        self._failure: StableLineError | None = None
        self.is_active = True
        # One write at a time on the stream: the redelivery timer, acks, flows and a
        # reopen may all want to write, and gRPC takes one write at a time.
        self._write_lock = asyncio.Lock()
        # Called (with the topic) when a new stream replaces a broken one, before it
        # gets permits: whoever took messages from the queue and holds them for a
        # caller drops them, as the queue does (add_reopen_listener).
        self._reopen_listeners: list[Callable[[str], None]] = []
        self._ack_grouping = AckGrouping(
            self, options.ack_grouping_time_ms, options.ack_grouping_max_size, several=False
        )
        # acknowledge_nowait is the grouping's add itself: one call per ack, no frame
        # in between (the blocking client's acknowledge is this, per message).
        self.acknowledge_nowait = self._ack_grouping.add

    # ------------------------------------------------------------ open

    def _move(self, new: StreamState) -> None:
        check_transition(f"consumer of {self._subscription}", self._state, new)
        self._state = new

    def _give_up(self, reason: StableLineError) -> None:
        """The stream ended for good: FAILED with `reason`, unless already CLOSED."""
        self._failure = reason
        if self._state is not StreamState.CLOSED:
            self._move(StreamState.FAILED)

    async def _open(self) -> None:
        await self._open_stream()
        self._move(StreamState.READY)
        self._receiver = asyncio.create_task(self._receive())
        async with self._write_lock:
            await self._call.write(pb.SubscribeRequest(flow=pb.Flow(permits=self._queue_size)))
        if self._ack_timeout_s or self._nack_delay_s:
            self._timer = asyncio.create_task(self._redelivery_timer())

    def _on_silent(self) -> None:
        """Requests went unanswered for the operation timeout: end the stream."""
        if self._call is not None:
            self._call.cancel()

    async def _open_stream(self) -> None:
        """A new Subscribe stream: the same subscription, type and isolation level."""
        options = self.options
        opening = pb.SubscribeRequest(
            subscribe=pb.SubscribeOpen(
                topic=self._topic,
                subscription=self._subscription,
                type=options.consumer_type.value,
                initial_position=options.initial_position.value,
                isolation_level=ISOLATION_LEVEL_PROTO[options.isolation_level],
                consumer_name=self._name,
                priority_level=options.priority_level,
                key_shared=(
                    options.key_shared_policy.to_proto()
                    if options.key_shared_policy is not None
                    and options.consumer_type is ConsumerType.KeyShared
                    else None
                ),
            )
        )
        call, subscribed, self._stream_token = await self._connection.open_stream(
            self._connection.broker.Subscribe,
            opening,
            "subscribed",
            f"the subscribe stream for {self._topic}",
        )
        if self._call is not None:
            self._call.cancel()  # the broken stream this one replaces
        self._call = call
        self._watch.reset()
        if self._waiting:
            self._watch.expect()  # what waits for an answer is sent again on it
        self._topic = subscribed.topic

    async def _reopen(self) -> None:
        """After a broken stream: subscribe again and start afresh. What was queued and
        not acknowledged comes again from the broker (a confirmed ack is durable, so
        never what was acknowledged); acks not yet answered are sent again (acking
        twice is harmless, but a transactional ack that had arrived is refused as
        TransactionConflict: the application aborts)."""
        await self._open_stream()
        self._queue.clear()
        self._queued = 0
        self._consumed_since_flow = 0
        self._unacked.clear()
        self._nacked.clear()
        # Before any delivery on the new stream: the broker's redelivery is then the
        # only copy of what was held [Pulsar: clearReceiverQueue on connectionOpened].
        for listener in list(self._reopen_listeners):
            listener(self._topic)
        async with self._write_lock:
            for _future, request in list(self._waiting.values()):
                await self._call.write(request)
            await self._call.write(pb.SubscribeRequest(flow=pb.Flow(permits=self._queue_size)))

    def add_reopen_listener(self, listener: Callable[[str], None]) -> None:
        """Call `listener(topic)` on the loop each time a broken stream is replaced,
        after the receiver queue is cleared and before the broker is given permits
        (so before it redelivers what was unacknowledged). Messages taken from the
        queue and not yet given to the application are to be dropped then: they come
        again. Acks the listener sends from there go before the redelivery."""
        self._reopen_listeners.append(listener)

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        """The name given, or the one made for it (`consumer-` and 10 hex digits)."""
        return self._name

    def is_connected(self) -> bool:
        """Open, and not given up on the broker (it reconnects on its own until then)."""
        return self._state is StreamState.READY

    async def get_last_message_id(self) -> MessageId:
        """The id of the topic's last confirmed entry (batch index -1)."""
        last, _ = await on_following_owner(
            self._connection,
            lambda connection: connection.last_confirmed_now(self._topic),
            self._find_owner,
            f"last message id of {self._topic}",
        )
        return MessageId(last.ledger_id, last.entry_id, -1)

    async def _receive(self) -> None:
        """Deliveries and answers, until closed or the broker stays away too long."""
        try:
            reason = await read_until_gone(
                lambda: self._connection,
                self._read_stream,
                self._reconnect,
                lambda: self._state is StreamState.CLOSED,
                f"consumer of {self._subscription} on {self._topic}",
                lambda: self._stream_token,
                lambda: self._watch.silent,
            )
            self._give_up(reason)
        except asyncio.CancelledError:
            self._give_up(StableLineError("consumer closed"))
            raise
        finally:
            self._watch.stop()
            failure = self._failure or StableLineError("consumer closed")
            for future, _request in self._waiting.values():
                if not future.done():
                    future.set_exception(failure)
            self._waiting.clear()
            self._arrived.set()

    async def _reconnect(self) -> None:
        """Subscribe again after a broken stream, on the topic's owner wherever it now is."""
        _, self._connection = await on_following_owner(
            self._connection,
            self._reopen_once,
            self._find_owner,
            f"consumer of {self._subscription} on {self._topic}",
        )

    async def _reopen_once(self, connection: Connection) -> None:
        self._connection = connection
        try:
            await self._reopen()
        except grpc.aio.AioRpcError as error:
            raise rpc_failure(error) from None

    async def _read_stream(self) -> StableLineError:
        """Take what the current stream brings; returns why it ended."""
        call = self._call
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return BrokerUnavailable(f"subscribe stream to {self._topic} ended")
                kind = response.WhichOneof("response")
                if kind == "deliveries":
                    if self._discarding:
                        continue
                    arrived = [
                        (DeliveredEntry.of(self._topic, delivery, self._partition), delivery)
                        for delivery in response.deliveries.entries
                    ]
                    self._replace_earlier_deliveries([e for e, _ in arrived if e.redelivery_count])
                    for entry, delivery in arrived:
                        indexes = message_indexes(entry, delivery.acked_batch_indexes)
                        if indexes:
                            self._queue.append((entry, indexes))
                            self._queued += len(indexes)
                    self._arrived.set()
                elif kind == "done":
                    waiting = self._waiting.pop(response.done.request_id, None)
                    if waiting is not None and not waiting[0].done():
                        waiting[0].set_result(response.done)
                elif kind == "active_change":
                    self.is_active = response.active_change.is_active
                self._watch.answered(bool(self._waiting))
        except grpc.aio.AioRpcError as error:
            return rpc_failure(error)
        except asyncio.CancelledError:
            if cancelled_by_watch(self._watch):
                return BrokerUnavailable("subscribe stream cancelled: the broker was silent")
            raise

    def _replace_earlier_deliveries(self, redelivered: list[DeliveredEntry]) -> None:
        """These entries came again: what is still queued of an earlier delivery of
        one is no longer outstanding, and a nack or ack timeout pending for one would
        hand back nothing (the broker ignores it); both are dropped."""
        if not redelivered:
            return
        again = {(e.ledger_id, e.entry_id): e.redelivery_count for e in redelivered}
        for pending in (self._nacked, self._unacked):
            if pending:
                for key, count in again.items():
                    handed_back = pending.get(key)
                    if handed_back is not None and (handed_back[1] or 0) < count:
                        del pending[key]
        if self._queue:
            self._drop_queued(
                lambda e: again.get((e.ledger_id, e.entry_id), 0) > e.redelivery_count
            )

    def _check_open(self) -> None:
        if self._state is StreamState.CLOSED:
            raise StableLineError(f"consumer of {self._subscription} is closed")

    async def _write(self, request: pb.SubscribeRequest) -> None:
        self._check_open()
        if self._state is StreamState.FAILED:
            raise self._failure
        try:
            async with self._write_lock:
                await self._call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError) as error:
            failure = (
                rpc_failure(error)
                if isinstance(error, grpc.aio.AioRpcError)
                else BrokerUnavailable(f"subscribe stream to {self._topic} is closed: {error}")
            )
            if self._state is StreamState.CLOSED or not is_transient(failure):
                raise failure from None
            # The stream broke: the receiver subscribes again, resends what waits for
            # an answer and gives fresh permits; a lost nack is redelivered anyway.

    async def _request(self, build) -> pb.RequestDone:
        request_id = next(self._requests)
        future = asyncio.get_running_loop().create_future()
        request = build(request_id)
        self._waiting[request_id] = (future, request)
        self._watch.expect()
        await self._write(request)
        done = await future
        if done.error_code:
            raise from_code(done.error_code, done.error_message)
        return done

    # ------------------------------------------------------------ receive

    def _take(self, max_messages: int) -> list[tuple[DeliveredEntry, Sequence[int]]]:
        """Up to max_messages queued messages, as runs of (entry, indexes)."""
        runs = []
        queue = self._queue
        wanted = max_messages
        while queue and wanted:
            entry, indexes = queue[0]
            if len(indexes) <= wanted:
                queue.popleft()
            else:
                queue[0] = (entry, indexes[wanted:])
                indexes = indexes[:wanted]
            runs.append((entry, indexes))
            wanted -= len(indexes)
        taken = max_messages - wanted
        self._queued -= taken
        self._consumed_since_flow += taken
        if self._ack_timeout_s and runs:
            if not self._unacked:
                # Deadlines only grow, so the timer needs waking only for the first one.
                self._timer_wakeup.set()
            deadline = time.monotonic() + self._ack_timeout_s
            for entry, _indexes in runs:
                self._unacked[(entry.ledger_id, entry.entry_id)] = (
                    deadline,
                    entry.redelivery_count,
                )
        return runs

    def _refill(self) -> None:
        """Pulsar's rule: give the broker permits back once half the queue is
        consumed. The write is the flow writer's, so the caller does not wait for it."""
        if self._flow_due() and self._flow_writer is None and self._state is not StreamState.CLOSED:
            self._flow_writer = asyncio.create_task(self._write_flows())

    def _flow_due(self) -> bool:
        return self._consumed_since_flow >= max(self._queue_size // 2, 1)

    async def _write_flows(self) -> None:
        """Write the permits owed, again while more become due during a write. A
        write that fails is not retried: a broken stream's reopening gives a whole
        queue of permits, and a closed or failed consumer needs none."""
        try:
            while self._flow_due():
                permits, self._consumed_since_flow = self._consumed_since_flow, 0
                await self._write(pb.SubscribeRequest(flow=pb.Flow(permits=permits)))
        except StableLineError:
            pass  # receive raises the consumer's failure or closing itself
        finally:
            self._flow_writer = None

    async def _wait_for_messages(self, timeout_s: float | None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._queue:
            self._check_open()
            if self._state is StreamState.FAILED:
                raise self._failure
            self._arrived.clear()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()
            except TimeoutError:
                return bool(self._queue)
        return True

    async def receive(self, timeout_millis: int | None = None) -> Message:
        timeout_s = None if timeout_millis is None else timeout_millis / 1000
        if not await self._wait_for_messages(timeout_s):
            raise Timeout(f"no message on {self._topic} within {timeout_millis} ms")
        ((entry, (index,)),) = self._take(1)
        self._refill()
        return Message(entry, index)

    async def batch_receive(
        self,
        max_num_messages: int = BATCH_RECEIVE_MAX_MESSAGES,
        timeout_millis: int = BATCH_RECEIVE_TIMEOUT_MS,
    ) -> Messages:
        """Up to max_num_messages messages, waiting up to timeout_millis for the first;
        a Messages sequence, empty when none came."""
        if max_num_messages < 1:
            raise ValueError("max_num_messages must be >= 1")
        await self._wait_for_messages(timeout_millis / 1000)
        messages = Messages(self._take(max_num_messages))
        if messages:
            self._refill()
        return messages

    # ------------------------------------------------------------ acks

    def _forget(self, ids: Iterable[MessageId]) -> None:
        if self._unacked:
            for message_id in ids:
                self._unacked.pop(message_id[:2], None)

    async def acknowledge(
        self, message: MessageOrId | list[MessageOrId] | Messages, txn=None
    ) -> None:
        """Acknowledge one message (or a list, or what batch_receive returned); raises
        InvalidMessageId for unknown ids."""
        items = message if isinstance(message, list | Messages) else [message]
        if not items:
            return
        txn_id = None
        if txn is not None:
            txn._check_open()
            txn_id = txn._proto_id()
        # Transactional acks stay per message: the coordinator records each.
        wire = [_id_of(item) for item in items] if txn is not None else _ack_ids(items)
        await self._request(
            lambda rid: pb.SubscribeRequest(
                ack=pb.Ack(request_id=rid, message_ids=[i.to_proto() for i in wire], txn_id=txn_id)
            )
        )
        self._forget(wire)

    def acknowledge_nowait(self, message: MessageOrId | list[MessageOrId] | Messages) -> None:
        """Acknowledge without waiting, from any thread: the ack is grouped with others
        for ack_grouping_time_ms (or until ack_grouping_max_size of them) and sent as
        one request. It is confirmed once flush_acknowledgments() or close() returns; a
        refused grouped ack is logged."""
        self._ack_grouping.add(message)

    async def flush_acknowledgments(self) -> None:
        """Send the acks acknowledge_nowait grouped, and wait for the broker's answers."""
        await self._ack_grouping.confirm()

    def _ack_with_reopen(self, items: list[MessageOrId] | Messages) -> asyncio.Future:
        """From a reopen listener only: an ack the reopen writes itself, before the
        permits, so the broker has it before it redelivers; the answer (a RequestDone)
        comes on the returned future."""
        request_id = next(self._requests)
        future = asyncio.get_running_loop().create_future()
        wire = _ack_ids(items)
        request = pb.SubscribeRequest(
            ack=pb.Ack(request_id=request_id, message_ids=[i.to_proto() for i in wire])
        )
        self._waiting[request_id] = (future, request)
        self._watch.expect()
        return future

    async def acknowledge_cumulative(self, message: MessageOrId) -> None:
        message_id = _id_of(message)
        await self._request(
            lambda rid: pb.SubscribeRequest(
                ack=pb.Ack(request_id=rid, message_ids=[message_id.to_proto()], cumulative=True)
            )
        )
        upto = message_id[:2]
        if self._unacked:
            for key in [k for k in self._unacked if k <= upto]:
                del self._unacked[key]

    async def negative_acknowledge(self, message: MessageOrId) -> None:
        """Ask for the message's entry again after negative_ack_redelivery_delay_ms."""
        message_id = _id_of(message)
        key = message_id[:2]
        # The delivery handed back: the broker ignores the nack once it has sent the
        # entry again (after an abort, say), so no second copy is made.
        count = message.redelivery_count() if isinstance(message, Message) else None
        self._unacked.pop(key, None)
        if self._nack_delay_s == 0:
            await self._redeliver({key: count})
            return
        self._nacked[key] = (time.monotonic() + self._nack_delay_s, count)
        if self._timer is None:
            self._timer = asyncio.create_task(self._redelivery_timer())
        self._timer_wakeup.set()

    async def redeliver_unacknowledged_messages(self) -> None:
        self._queue.clear()
        self._queued = 0
        self._unacked.clear()
        await self._write(pb.SubscribeRequest(redeliver=pb.Redeliver()))

    async def _redeliver(self, handed_back: dict[tuple[int, int], int | None]) -> None:
        """Hand back these deliveries (entry -> redelivery count; None: the outstanding
        one), dropping what of them is still queued."""
        keys = sorted(handed_back)
        ids = [
            pb.MessageIdData(ledger_id=ledger, entry_id=entry, batch_index=-1)
            for ledger, entry in keys
        ]
        counts = [-1 if handed_back[key] is None else handed_back[key] for key in keys]
        if self._queue:
            self._drop_queued(
                lambda e: (
                    (e.ledger_id, e.entry_id) in handed_back
                    and handed_back[(e.ledger_id, e.entry_id)] in (None, e.redelivery_count)
                )
            )
        await self._write(
            pb.SubscribeRequest(redeliver=pb.Redeliver(message_ids=ids, redelivery_counts=counts))
        )
        self._refill()

    def _drop_queued(self, no_longer_outstanding: Callable[[DeliveredEntry], bool]) -> None:
        """Drop queued messages of deliveries handed back (the rest of a batch whose
        first messages were taken) or replaced by a later delivery of their entry."""
        kept: deque[tuple[DeliveredEntry, Sequence[int]]] = deque()
        dropped = 0
        for entry, indexes in self._queue:
            if no_longer_outstanding(entry):
                dropped += len(indexes)
            else:
                kept.append((entry, indexes))
        if dropped:
            self._queue = kept
            self._queued -= dropped
            # The broker counted them against the permits: give those back.
            self._consumed_since_flow += dropped

    async def _redelivery_timer(self) -> None:
        """Redeliver nacked entries after their delay and unacked ones after ack timeout."""
        while self._state is not StreamState.CLOSED:
            now = time.monotonic()
            due: dict[tuple[int, int], int | None] = {}
            for pending in (self._unacked, self._nacked):
                for key, (deadline, count) in list(pending.items()):
                    if deadline <= now:
                        del pending[key]
                        due[key] = count
            if due:
                with contextlib.suppress(StableLineError):
                    await self._redeliver(due)
            deadlines = [t for t, _ in self._nacked.values()]
            deadlines += [t for t, _ in self._unacked.values()]
            wait = min(deadlines) - time.monotonic() if deadlines else None
            self._timer_wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait if wait is None else max(wait, 0.001)):
                    await self._timer_wakeup.wait()

    # ------------------------------------------------------------ seek, close

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id, or to a publish time in ms."""
        if isinstance(target, MessageId):

            def build(rid):
                return pb.SubscribeRequest(
                    seek=pb.Seek(request_id=rid, message_id=target.to_proto())
                )
        elif isinstance(target, int):

            def build(rid):
                return pb.SubscribeRequest(seek=pb.Seek(request_id=rid, timestamp_ms=target))
        else:
            raise TypeError("seek takes a MessageId or a timestamp in ms")
        self._discarding = True
        try:
            await self._request(build)
        finally:
            # Everything that arrived before the answer was read before the seek.
            self._discarding = False
            self._queue.clear()
            self._queued = 0
            self._unacked.clear()
            self._nacked.clear()
            self._consumed_since_flow = 0
        await self._write(pb.SubscribeRequest(flow=pb.Flow(permits=self._queue_size)))

    async def unsubscribe(self) -> None:
        await self._request(
            lambda rid: pb.SubscribeRequest(unsubscribe=pb.Unsubscribe(request_id=rid))
        )
        await self.close()

    async def close(self) -> None:
        """Close after the grouped acks (acknowledge_nowait) are confirmed."""
        if self._state is StreamState.CLOSED:
            return
        with contextlib.suppress(StableLineError):
            await self._ack_grouping.confirm()
        ending_from = self._state
        self._move(StreamState.CLOSED)
        self._timer_wakeup.set()
        for task in (self._timer, self._flow_writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._end_stream(ending_from)
        if self._receiver is not None:
            self._receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._receiver
        if self._call is not None:
            self._call.cancel()
        self._arrived.set()

    async def _end_stream(self, ending_from: StreamState) -> None:
        """Half-close the stream and wait (at most _CLOSE_WAIT_S) for the broker to
        end it: by then the broker has let go of this consumer, so an Exclusive or
        Failover subscription can be taken again at once, as after Pulsar's
        CloseConsumer. A bare cancel raced the next subscribe (SubscriptionBusy)."""
        call = self._call
        if ending_from is not StreamState.READY or call.done():
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CLOSE_WAIT_S):
                async with self._write_lock:
                    await call.done_writing()
                await call.code()  # the receiver reads what comes before the end
