"""A topic: its managed ledger, its subscriptions, and its counters.

READ_COMMITTED sees a topic only once its recovery has replayed the log after its
transaction buffer's snapshot (the buffer is READY): the snapshot's stable position
can be earlier than what readers saw before a crash, so until then subscriptions
deliver nothing at that level and request/response reads wait (wait_stable).

Every write goes through the broker's write gate (topics/write_gate.py): publish, markers
(end_transaction), producers and consumers attaching, subscriptions created and
deleted, the topic deleted; the broker's faces admit acks and seeks through it too.
Closing the gate ends every producer and consumer stream (end_streams).

A topic leaving this broker (cluster/topic_moves.py) stops taking writes
(`stop_writes`: its gate becomes a HandOverGate) and waits until every write it
admitted before is done and answered (`writes_done`), so no accepted send fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dispatcher import (
    CommittedReadView,
    Consumer,
    DispatchLimits,
    IsolationLevel,
    LogReadView,
    ReadView,
    Subscription,
    SubscriptionType,
)
from managed_ledger import EntryHeader, ManagedLedger, Position, TxnId
from managed_ledger.position import EARLIEST
from stableline.broker.errors import BrokerError
from stableline.broker.topics.latency import PUBLISH_LATENCY
from stableline.broker.topics.sent_positions import find_sent_positions
from stableline.broker.topics.write_gate import (
    BrokerFencedError,
    HandOverGate,
    TopicWriteGate,
    WriteGate,
)
from stableline.topic_name import TopicName
from txnbuffer import (
    BufferState,
    SnapshotPolicy,
    TransactionBuffer,
    TransactionBufferNotReadyError,
)
from txnbuffer.producer_state import tracked

# Producers whose last duplicate scan is kept (a reconnect's resends reuse it).
MAX_SCANNED_PRODUCERS = 64


class RecoveredCommittedView(CommittedReadView):
    """READ_COMMITTED, bounded before every entry until the buffer is READY: a
    subscription dispatches nothing from the snapshot's (possibly earlier) stable
    position; the end of recovery wakes it (Topic.recover)."""

    def __init__(self, buffer: TransactionBuffer):
        super().__init__(buffer)
        self._recovering = buffer

    def bound(self) -> Position:
        if self._recovering.state is not BufferState.READY:
            return EARLIEST
        return self._recovering.stable_position


@dataclass(slots=True)
class RateCounter:
    """Totals plus a rate over the last window, for Pulsar-style msgRateIn/Out."""

    messages: int = 0
    bytes: int = 0
    _window_start: float = field(default_factory=time.monotonic)
    _window_messages: int = 0
    _window_bytes: int = 0
    message_rate: float = 0.0
    byte_rate: float = 0.0

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size
        self._window_messages += messages
        self._window_bytes += size
        self.roll()

    def roll(self, window_s: float = 1.0) -> None:
        elapsed = time.monotonic() - self._window_start
        if elapsed >= window_s:
            self.message_rate = self._window_messages / elapsed
            self.byte_rate = self._window_bytes / elapsed
            self._window_start = time.monotonic()
            self._window_messages = self._window_bytes = 0


@dataclass(slots=True)
class TotalsRate:
    """A rate derived from running totals that are counted elsewhere (deliveries are
    counted by subscriptions): the rate between the last two samples at least
    `window_s` apart. A total that shrinks (a subscription went away) counts as 0."""

    message_rate: float = 0.0
    byte_rate: float = 0.0
    _messages: int = 0
    _bytes: int = 0
    _sampled_at: float = field(default_factory=time.monotonic)

    def sample(self, messages: int, size: int, window_s: float = 1.0) -> None:
        elapsed = time.monotonic() - self._sampled_at
        if elapsed >= window_s:
            self.message_rate = max(messages - self._messages, 0) / elapsed
            self.byte_rate = max(size - self._bytes, 0) / elapsed
            self._messages, self._bytes = messages, size
            self._sampled_at = time.monotonic()


class ProducerBusyError(BrokerError):
    """A producer of that name is connected to the topic under another role, or this
    one was replaced by a newer producer of its name."""

    code = "ProducerBusy"


@dataclass(slots=True)
class Publisher:
    """One open Produce stream: its name on the topic, its role, and its stats."""

    name: str
    max_pending_publishes: int
    # The role that opened it ("" anonymous): only that role may replace it.
    role: str = ""
    # Ends the stream with an error: a newer producer of the same name replaced it,
    # or the broker's write gate closed.
    end_stream: Callable[[Exception], None] | None = None
    # Sends read from the stream and not yet appended; at the max the broker stops
    # reading the stream (max_pending_publishes_per_producer).
    pending_publishes: int = 0


class Topic:
    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        snapshot_policy: SnapshotPolicy | None = None,
        dispatch_limits: DispatchLimits | None = None,
        write_gate: WriteGate | TopicWriteGate | None = None,
    ):
        self.name = name
        # The broker's (shared by its topics); a topic of its own is never closed.
        self.write_gate: WriteGate | TopicWriteGate | HandOverGate = write_gate or WriteGate()
        # Appends and transaction ends admitted and not yet answered (writes_done).
        self._writes_in_flight = 0
        self._no_writes_in_flight = asyncio.Event()
        self._no_writes_in_flight.set()
        self.dispatch_limits = dispatch_limits or DispatchLimits()
        self.ledger = ledger
        self.subscriptions: dict[str, Subscription] = {}
        # The connected producers, one per name (add_publisher).
        self.producers: dict[str, Publisher] = {}
        self.rate_in = RateCounter()
        self.rate_out = TotalsRate()
        self.buffer = TransactionBuffer(ledger, snapshot_policy)
        self.buffer.set_zombie_aborter(self._abort_zombie)
        self._views: dict[IsolationLevel, ReadView] = {
            IsolationLevel.READ_UNCOMMITTED: LogReadView(ledger),
            IsolationLevel.READ_COMMITTED: RecoveredCommittedView(self.buffer),
        }
        self._background: set[asyncio.Task] = set()
        # Batches of named producers being appended, for a duplicate that overtakes one.
        self._appending: dict[tuple[str, int], asyncio.Future] = {}
        # The last log scans for duplicates' first copies, per producer name.
        self._sent: dict[str, dict[int, Position]] = {}
        self._recovery: asyncio.Task | None = None
        # Called once the buffer is READY (the broker settles leftover transactions).
        self.on_recovered: Callable[[Topic], Awaitable[None]] | None = None
        ledger.add_listener(self._on_append)
        for cursor in ledger.cursors.values():
            # The subscription reads its level from the cursor and its view from that.
            self.subscriptions[cursor.name] = Subscription(
                str(name), cursor, self.read_view, self.dispatch_limits
            )

    def start_recovery(self) -> None:
        """Take the buffer's snapshot now, replay the log after it in the background.
        Meanwhile the topic serves: READ_UNCOMMITTED reads the log, READ_COMMITTED
        reads up to the stable position recovered so far (never less than the
        snapshot's), transactional appends wait until READY."""
        self.buffer.load_snapshot()
        self._recovery = asyncio.create_task(self.recover(), name=f"recover:{self.name}")

    async def recover(self) -> None:
        await self.buffer.recover()
        # The stable position may have moved past what was durable at open.
        self._on_append()
        # Retention catches up with what became deletable while the topic was not
        # loaded (it runs as cursors move, and nothing moved them meanwhile).
        self.ledger.trim()
        if self.on_recovered is not None:
            await self.on_recovered(self)

    async def wait_recovered(self) -> None:
        """Until the background recovery (and the settling it triggers) is done."""
        if self._recovery is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._recovery)

    async def wait_stable(self, timeout_s: float) -> None:
        """Until the buffer is READY (the log after its snapshot replayed), so the
        stable position is never earlier than before a restart. Raises
        TransactionBufferNotReadyError (retryable) after `timeout_s`."""
        if self.buffer.state is BufferState.READY:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self.buffer.wait_ready()
        except TimeoutError:
            raise TransactionBufferNotReadyError(
                f"{self.name} is still replaying its log after a restart "
                f"({self.buffer.replayed_entries} entries so far, waited {timeout_s:g} s, "
                "topic_recovery_wait_s); retry"
            ) from None

    async def _stop_recovery(self) -> None:
        if self._recovery is not None and not self._recovery.done():
            self._recovery.cancel()
        if self._recovery is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery

    @property
    def idle(self) -> bool:
        """No producer, consumer, reader waiting, transaction or write in flight:
        closing the topic now loses nothing, and loading it again rebuilds it all
        from its ledger, cursors and snapshot."""
        return (
            not self.producers
            and not self._appending
            and not self._background
            and self._recovery is not None
            and self._recovery.done()
            and self.buffer.idle
            and self.ledger.idle
            # Its own LAC listener only: a long-polling Fetch adds one while it waits.
            and self.ledger.listener_count <= 1
            and all(
                not subscription.consumers and not subscription.holds_for_transactions
                for subscription in self.subscriptions.values()
            )
        )

    def read_view(self, level: IsolationLevel) -> ReadView:
        """What a reader at this isolation level may see."""
        return self._views[level]

    def _abort_zombie(self, txn_id: TxnId, low_watermark: int) -> None:
        task = asyncio.create_task(self.end_transaction_when_writable(txn_id, False, low_watermark))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_append(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.wake()

    async def publish(
        self, header: EntryHeader, payload: bytes, new_producer: bool = False
    ) -> tuple[Position | None, bool]:
        """Append one batch: (its position, False). A duplicate of a named producer's
        earlier batch (same or lower sequence id) is not written again: (the first
        copy's position, True), or (None, True) when the log no longer holds it.

        A new producer (its name made by this broker run) has nothing in the log, so
        its sends need not wait for recovery: plain sends go on while a topic recovers.

        BrokerFencedError while the write gate is closed (nothing written), or when it
        closed before the batch was durable (written: a resend is a duplicate).
        """
        ticket = self.write_gate.admit(self.name)
        self._write_began()
        try:
            answer = await self._publish(header, payload, new_producer)
            self.write_gate.confirm(ticket, self.name)
        finally:
            self._write_ended()
        return answer

    def _write_began(self) -> None:
        self._writes_in_flight += 1
        self._no_writes_in_flight.clear()

    def _write_ended(self) -> None:
        self._writes_in_flight -= 1
        assert self._writes_in_flight >= 0
        if self._writes_in_flight == 0:
            self._no_writes_in_flight.set()

    def stop_writes(self, because: str) -> None:
        """Admit no new write (TopicMovingError saying `because`); those admitted
        before go on and are answered (writes_done waits for them)."""
        if not isinstance(self.write_gate, HandOverGate):
            self.write_gate = HandOverGate(self.write_gate, because)

    def resume_writes(self) -> None:
        """Undo stop_writes (a hand-over that could not finish): writes resume here."""
        if isinstance(self.write_gate, HandOverGate):
            self.write_gate.end()
            self.write_gate = self.write_gate.inner

    async def hand_over_done(self) -> None:
        """Until a hand-over under way is over (the topic closed here, or it takes
        writes again); at once when none is."""
        if isinstance(self.write_gate, HandOverGate):
            await self.write_gate.wait_over()

    async def writes_done(self) -> None:
        """Until no append or transaction end admitted here is still under way."""
        await self._no_writes_in_flight.wait()

    async def _publish(
        self, header: EntryHeader, payload: bytes, new_producer: bool
    ) -> tuple[Position | None, bool]:
        started = time.perf_counter()  # observed per batch: see stableline.broker.topics.latency
        name = header.producer_name
        deduplicated = tracked(name)
        if deduplicated:
            if not new_producer:
                await self.buffer.wait_ready()  # recovery rebuilds the sequences
            producers = self.buffer.producers
            key = (name, header.sequence_id)
            if producers.is_duplicate(*key):
                first_copy = self._appending.get(key)
                if first_copy is None:
                    return await self._sent_position(*key), True
                position = await asyncio.shield(first_copy)
                if position is not None:
                    return position, True
                # The first copy failed, so this one is not a duplicate any more.
                return await self._publish(header, payload, new_producer)
            producers.push(*key)
            appending = self._appending[key] = asyncio.get_running_loop().create_future()
        position = None
        try:
            txn_id = header.txn_id
            if txn_id is None:
                position = await self.ledger.append(header, payload)
            else:
                await self.buffer.before_append(txn_id)
                try:
                    position = await self.ledger.append(header, payload)
                finally:
                    self.buffer.after_append(txn_id)
        except BaseException:
            if deduplicated:
                producers.rollback(name)
            raise
        finally:
            if deduplicated:
                del self._appending[key]
                appending.set_result(position)
        self.rate_in.add(header.num_messages, len(payload))
        PUBLISH_LATENCY.observe(time.perf_counter() - started)
        return position, False

    async def end_transaction(self, txn_id: TxnId, commit: bool, low_watermark: int) -> None:
        """Write the transaction's marker here (TransactionBuffer.end); ending an
        ended transaction again is a no-op. BrokerFencedError as publish()."""
        ticket = self.write_gate.admit(self.name)
        self._write_began()
        try:
            await self.buffer.end(txn_id, commit, low_watermark)
            self.write_gate.confirm(ticket, self.name)
        finally:
            self._write_ended()

    async def end_transaction_when_writable(
        self, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        """end_transaction for the broker's own ends (zombies, what a restart left):
        while the write gate is closed it waits, where a client's call would fail."""
        while True:
            await self.write_gate.wait_open()
            try:
                return await self.end_transaction(txn_id, commit, low_watermark)
            except BrokerFencedError:
                continue  # closed again meanwhile; an end is idempotent

    @property
    def retired(self) -> bool:
        """A replicated topic served here before the broker's write gate last closed:
        it writes no more (topics/write_gate.py TopicWriteGate); a new load takes it
        again."""
        return (
            isinstance(self.write_gate, (TopicWriteGate, HandOverGate)) and self.write_gate.retired
        )

    def end_streams(self, error: Exception) -> None:
        """End every producer and consumer stream of the topic with `error` (the
        write gate closed); their clients reconnect."""
        for publisher in list(self.producers.values()):
            if publisher.end_stream is not None:
                publisher.end_stream(error)
        for subscription in self.subscriptions.values():
            for consumer in subscription.consumers:
                consumer.outbox.put_nowait(error)

    async def _sent_position(self, name: str, sequence_id: int) -> Position | None:
        """Where the durable first copy of a duplicate lies. One log scan covers every
        batch of the producer from this one up, so a reconnect's resends cost one."""
        found = self._sent.get(name)
        if found is None or sequence_id not in found:
            found = await find_sent_positions(
                self.ledger, name, sequence_id, self.buffer.producers.last(name)
            )
            self._sent[name] = found
            while len(self._sent) > MAX_SCANNED_PRODUCERS:
                self._sent.pop(next(iter(self._sent)))
        return found.get(sequence_id)

    async def last_sequence_id(self, producer_name: str, new_producer: bool = False) -> int:
        """Where a (re)connecting named producer continues: its last sequence id here.
        A new producer (named by this broker run) has sent nothing: no wait for recovery."""
        if new_producer or not tracked(producer_name):
            return -1
        await self.buffer.wait_ready()
        return self.buffer.producers.last(producer_name)

    def add_publisher(self, publisher: Publisher) -> None:
        """Register an opened Produce stream: one producer per name is connected.

        While one of that name is connected, a producer of another role is refused
        (ProducerBusyError) and nothing changes: a name's sequence ids are its
        producer's alone. One of the same role replaces it: that is the same client
        reopening after a broken connection whose old stream the broker has not yet
        seen end (a half-open TCP connection can take minutes to notice), and refusing
        it would fail the reconnect. The replaced stream is ended with ProducerBusy.
        BrokerFencedError while the write gate is closed.
        """
        self.write_gate.admit(self.name)
        current = self.producers.get(publisher.name)
        if current is not None:
            if current.role != publisher.role:
                raise ProducerBusyError(
                    f"producer {publisher.name!r} is already connected to {self.name} under "
                    "another role; use another producer name, or wait until it closes"
                )
            if current.end_stream is not None:
                current.end_stream(
                    ProducerBusyError(
                        f"producer {publisher.name!r} on {self.name} was replaced by a newer "
                        "producer of the same name (the same client reconnecting, or "
                        "another client of the same role using its name)"
                    )
                )
        self.producers[publisher.name] = publisher

    def remove_publisher(self, publisher: Publisher) -> None:
        """Unregister a closed Produce stream (not the one that replaced it)."""
        if self.producers.get(publisher.name) is publisher:
            del self.producers[publisher.name]

    def subscribe(
        self,
        subscription_name: str,
        consumer: Consumer,
        type_: SubscriptionType,
        level: IsolationLevel,
        start_at_earliest: bool,
    ) -> Subscription:
        """Attach a consumer (the subscription made if new); BrokerFencedError while
        the write gate is closed: a consumer acknowledges, which writes."""
        self.write_gate.admit(self.name)
        subscription = self.subscriptions.get(subscription_name)
        if subscription is None:
            subscription = self.create_subscription(
                subscription_name, type_, level, start_at_earliest
            )
        subscription.add_consumer(consumer, type_, level)
        return subscription

    def create_subscription(
        self,
        subscription_name: str,
        type_: SubscriptionType,
        level: IsolationLevel,
        start_at_earliest: bool,
    ) -> Subscription:
        """A durable subscription without consumers (yet); its isolation level is fixed."""
        self.write_gate.admit(self.name)
        assert subscription_name not in self.subscriptions
        cursor, _created = self.ledger.open_cursor(
            subscription_name, start_at_earliest, Subscription.properties_for(type_, level)
        )
        subscription = Subscription(str(self.name), cursor, self.read_view, self.dispatch_limits)
        self.subscriptions[subscription_name] = subscription
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        self.write_gate.admit(self.name)
        await subscription.close()
        self.subscriptions.pop(subscription.name, None)
        self.ledger.delete_cursor(subscription.name)

    async def close(self) -> None:
        if isinstance(self.write_gate, HandOverGate):
            self.write_gate.end()  # what waited for the hand-over asks again
        await self._stop_recovery()
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        await asyncio.gather(*self._background, return_exceptions=True)
        self.buffer.close()
        self.ledger.remove_listener(self._on_append)
        await self.ledger.close()

    async def delete(self) -> None:
        self.write_gate.admit(self.name)
        await self._stop_recovery()
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.subscriptions.clear()
        self.buffer.close(snapshot=False)
        self.buffer.delete_snapshots()
        await self.ledger.delete()
