"""A subscription: a durable cursor, its consumers, and the task that feeds them.

Promises:
- Entries are delivered in log order (redeliveries first), only up to the read
  view's bound, and each entry is delivered to one consumer at a time.
- Entries the read view skips (markers, aborted transactions under
  READ_COMMITTED) are acknowledged by the broker and never delivered.
- A consumer receives entries only while it has permits (messages, not entries),
  and not while it, or the subscription, is blocked at its unacked limit
  (dispatcher/limits.py).
- Key_Shared: an entry goes only to the current owner of its key hash
  (dispatcher/key_shared.py), and only while no other consumer holds entries of
  that hash (dispatcher/draining.py), so each key's entries reach one consumer at a
  time, in log order, across joins and leaves. Entries that cannot go now are kept
  aside in position order (at most max_key_shared_look_ahead) and retried first;
  an entry whose hash has an earlier entry kept aside waits behind it.
- The isolation level is fixed with the cursor; the read view is derived from it
  here, through the view factory the topic passes, and nowhere else.
- An entry is outstanding to at most one consumer, in one delivery, at a time. A
  nack names the delivery it hands back (its redelivery count): a nack of a
  delivery that is no longer outstanding (the entry was delivered again, is queued
  to be, or is held by a transaction) changes nothing, so a late nack never makes a
  second copy.
- A transactional ack of a message already acknowledged, or already acknowledged in
  an open transaction (another, or the same one), is refused with
  TransactionConflictError: committing it could commit the application's output
  for one message twice. Transactions hold batch indexes, not entries
  (dispatcher/pending_acks.py): two may hold disjoint indexes of one entry. A
  commit acknowledges exactly the indexes its transaction held; an abort gives back
  exactly those, and they go out again (without the indexes acknowledged or held
  meanwhile) once no consumer holds the entry, so no message is outstanding twice.
  An entry stays with its consumer while that delivery still holds a message of it.
- The dispatch task waits on an event that appends, commits, acks, permits and
  consumer changes set: no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from sortedcontainers import SortedSet

from dispatcher.consumer import Consumer, ControlEvent, Delivery
from dispatcher.draining import DrainingHash, HashHolds
from dispatcher.errors import (
    ConsumerAssignError,
    InvalidAckError,
    IsolationLevelMismatchError,
    SubscriptionBusyError,
    SubscriptionClosedError,
    TooManyConsumersError,
    TransactionConflictError,
)
from dispatcher.key_hash import sticky_hash
from dispatcher.key_shared import ConsumerSelector, HashRange, KeySharedMode, selector_for
from dispatcher.kinds import IsolationLevel, SubscriptionType
from dispatcher.limits import DispatchLimits
from dispatcher.pending_acks import PendingAcks, already_in_transaction
from dispatcher.read_view import ReadView
from managed_ledger import Entry, ManagedCursor, Position, TxnId

log = logging.getLogger(__name__)

# Entries read from the ledger in one pass of the dispatch loop, at most.
MAX_READ_ENTRIES = 500
# Weight of the latest entry in the running average of messages per entry.
MESSAGES_PER_ENTRY_WEIGHT = 0.1
# Delivery counters kept for redelivered entries; oldest forgotten beyond this.
MAX_TRACKED_REDELIVERIES = 100_000

TYPE_PROPERTY = "type"
ISOLATION_PROPERTY = "isolation_level"


class Subscription:
    def __init__(
        self,
        topic: str,
        cursor: ManagedCursor,
        views: Callable[[IsolationLevel], ReadView],
        limits: DispatchLimits | None = None,
    ):
        """`views` gives the read view of an isolation level; the subscription asks it
        for its own level, read from the cursor, so level and view always agree."""
        self.topic = topic
        self.limits = limits or DispatchLimits()
        self.cursor = cursor
        self.name = cursor.name
        self.isolation_level = IsolationLevel(
            cursor.properties.get(ISOLATION_PROPERTY, IsolationLevel.READ_COMMITTED.value)
        )
        self.view: ReadView = views(self.isolation_level)
        self.type = SubscriptionType(
            cursor.properties.get(TYPE_PROPERTY, SubscriptionType.EXCLUSIVE.value)
        )
        self.consumers: list[Consumer] = []
        # Messages delivered to the consumers and not acknowledged (their sum), and
        # whether dispatch stopped at max_unacked_per_subscription.
        self.unacked_messages = 0
        self.blocked = False
        # Entries to deliver again (nacked, or held by a consumer that left).
        self._redeliver: SortedSet = SortedSet()
        # Who holds each delivered, unacknowledged entry, and the redelivery count of
        # that delivery (what a nack must name to hand it back).
        self._owner: dict[Position, Consumer] = {}
        self._delivered_as: dict[Position, int] = {}
        # Batch indexes acknowledged within entries not yet fully acknowledged.
        self._partial_acks: dict[Position, set[int]] = cursor.partial_acks  # persisted
        self._redelivery_counts: dict[Position, int] = {}
        # Batch indexes acknowledged inside transactions that have not ended: held
        # (neither acknowledged nor delivered again) until each commits or aborts.
        self._pending_acks = PendingAcks()
        self._txn_touched = self._pending_acks.entries  # the hot paths' one look-up
        self._round_robin = 0
        # Key_Shared: who owns each hash (while the subscription has consumers), who
        # holds entries of each hash, the hash of every entry held or to deliver
        # again, and the entries read past and kept aside (never delivered yet).
        self._selector: ConsumerSelector | None = None
        self._holds = HashHolds()
        self._hash_of: dict[Position, int] = {}
        self._looked_ahead: set[Position] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self.messages_out = 0
        self.bytes_out = 0
        self.skipped_entries = 0
        # Messages per delivered entry, a running average: a pass reads about as many
        # entries as the consumers' permits take, not MAX_READ_ENTRIES of 1000-message
        # batches to deliver one of them (the rest read again next pass) [Pulsar:
        # avgBatchSizePerMsg sizing readBatchSize].
        self._messages_per_entry = 1.0

    # ------------------------------------------------------------ lifecycle

    @staticmethod
    def properties_for(type_: SubscriptionType, level: IsolationLevel) -> dict[str, str]:
        return {TYPE_PROPERTY: type_.value, ISOLATION_PROPERTY: level.value}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"dispatch:{self.topic}:{self.name}")

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for consumer in self.consumers:
            consumer.outbox.put_nowait(ControlEvent("closed"))
        self.consumers.clear()

    def wake(self) -> None:
        """The bound may have moved, or permits or redeliveries arrived."""
        self._wakeup.set()

    # ------------------------------------------------------------ consumers

    def add_consumer(
        self, consumer: Consumer, type_: SubscriptionType, level: IsolationLevel
    ) -> None:
        if self._closed:
            raise SubscriptionClosedError(f"subscription {self.name!r} is closed")
        if level is not self.isolation_level:
            raise IsolationLevelMismatchError(
                f"subscription {self.name!r} on {self.topic} reads {self.isolation_level.value}; "
                f"a consumer asked for {level.value}. The level is fixed when a subscription "
                "is created: use that level, or another subscription name"
            )
        if self.consumers and type_ is not self.type:
            raise SubscriptionBusyError(
                f"subscription {self.name!r} is {self.type.value} and has consumers; "
                f"a {type_.value} consumer cannot join it"
            )
        if not self.consumers and type_ is not self.type:
            self.type = type_
            self.cursor.properties[TYPE_PROPERTY] = type_.value
            self.cursor.ledger.cursor_changed(self.name)
        if self.type is SubscriptionType.EXCLUSIVE and self.consumers:
            raise SubscriptionBusyError(
                f"exclusive subscription {self.name!r} on {self.topic} already has a consumer "
                f"({self.consumers[0].name!r}); use a Shared or Failover subscription to "
                "consume with several consumers"
            )
        if len(self.consumers) >= self.limits.max_consumers:
            raise TooManyConsumersError(
                f"subscription {self.name!r} on {self.topic} has {len(self.consumers)} "
                f"consumers, the most max_consumers_per_subscription allows; close one "
                "or raise the limit"
            )
        if self.type is SubscriptionType.KEY_SHARED:
            self._assign_hashes(consumer)
        previous_active = self.active_consumer
        consumer.connected_since_ms = int(time.time() * 1000)
        self.consumers.append(consumer)
        self._announce_active(previous_active)
        if self.type is SubscriptionType.FAILOVER and consumer is not self.active_consumer:
            # A standby learns at once that it is not active (Pulsar does the same).
            consumer.outbox.put_nowait(ControlEvent("active", False))
        self.start()
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        previous_active = self.active_consumer
        self.consumers.remove(consumer)
        self._return_pending(consumer)
        if self._selector is not None:
            self._selector.remove(consumer)
            if not self.consumers:
                self._selector = None
        self._announce_active(previous_active)
        self.wake()

    def _assign_hashes(self, consumer: Consumer) -> None:
        """Give a Key_Shared consumer its hashes; refused, it changes nothing."""
        mode = consumer.key_shared.mode
        assert self._selector is not None or not self.consumers
        selector = self._selector or selector_for(mode)
        if selector.mode is not mode:
            raise ConsumerAssignError(
                f"Key_Shared subscription {self.name!r} on {self.topic} has "
                f"{selector.mode.value} consumers; a {mode.value} consumer cannot join it"
            )
        try:
            selector.add(consumer)
        except ConsumerAssignError as error:
            raise ConsumerAssignError(
                f"subscription {self.name!r} on {self.topic}: {error}"
            ) from None
        self._selector = selector

    @property
    def active_consumer(self) -> Consumer | None:
        """For Exclusive and Failover: the consumer that receives everything."""
        if not self.consumers:
            return None
        if self.type is SubscriptionType.FAILOVER:
            # Lowest priority level; among equals the first connected (min keeps list order).
            return min(self.consumers, key=lambda c: c.priority_level)
        return self.consumers[0]

    def _announce_active(self, previous: Consumer | None) -> None:
        if self.type is not SubscriptionType.FAILOVER:
            return
        active = self.active_consumer
        if active is previous:
            return
        if previous is not None and previous in self.consumers:
            # The old active consumer's unacknowledged entries go to the new one.
            self._return_pending(previous)
            previous.outbox.put_nowait(ControlEvent("active", False))
        if active is not None:
            active.outbox.put_nowait(ControlEvent("active", True))

    def _return_pending(self, consumer: Consumer) -> None:
        holds, hash_of = self._holds, self._hash_of
        for position, num_messages in consumer.pending.items():
            self._owner.pop(position, None)
            self._delivered_as.pop(position, None)
            hash_ = hash_of.get(position)
            if hash_ is not None:
                holds.release(hash_, consumer, num_messages)
            if not self.cursor.is_acked(position):
                self._redeliver.add(position)
        self.unacked_messages -= consumer.release_all()
        self._unblock()

    @property
    def holds_for_transactions(self) -> bool:
        """Messages acknowledged in an open transaction are held here, in memory (the
        coordinator's ack records hold them again after a restart)."""
        return bool(self._pending_acks)

    # ------------------------------------------------------------ unacked limits

    def _hold(
        self,
        consumer: Consumer,
        position: Position,
        num_messages: int,
        hash_: int | None,
        redelivery_count: int,
    ) -> None:
        # Never outstanding twice: an entry is delivered again only once released.
        assert position not in self._owner, f"{position} delivered while outstanding"
        consumer.hold(position, num_messages)
        self._owner[position] = consumer
        self._delivered_as[position] = redelivery_count
        if hash_ is not None:
            self._hash_of[position] = hash_
            self._holds.hold(hash_, consumer, num_messages)
        self.unacked_messages += num_messages
        limits = self.limits
        if consumer.unacked_messages >= limits.max_unacked_per_consumer:
            consumer.blocked = True
        if self.unacked_messages >= limits.max_unacked_per_subscription:
            self.blocked = True

    def _release(self, position: Position) -> None:
        """The entry is no longer held by whoever held it (acked, or to redeliver)."""
        owner = self._owner.pop(position, None)
        self._delivered_as.pop(position, None)
        if owner is not None:
            num_messages = owner.release(position)
            self.unacked_messages -= num_messages
            hash_ = self._hash_of.get(position)
            if (
                hash_ is not None
                and self._holds.release(hash_, owner, num_messages)
                and self._redeliver
            ):
                self.wake()  # entries kept aside for this hash may go now

    def _unblock(self) -> None:
        """Resume dispatch to those whose unacked count fell to half their limit."""
        limits = self.limits
        resumed = False
        if self.blocked and self.unacked_messages <= limits.max_unacked_per_subscription // 2:
            self.blocked = False
            resumed = True
        for consumer in self.consumers:
            if (
                consumer.blocked
                and consumer.unacked_messages <= limits.max_unacked_per_consumer // 2
            ):
                consumer.blocked = False
                resumed = True
        if resumed:
            self.wake()

    def flow(self, consumer: Consumer, permits: int) -> None:
        if permits < 0:
            raise ValueError(f"permits must be >= 0, got {permits}")
        consumer.permits += permits
        self.wake()

    # ------------------------------------------------------------ acks

    def _num_messages(self, position: Position) -> int:
        owner = self._owner.get(position)
        if owner is not None and position in owner.pending:
            return owner.pending[position]
        entries = self.cursor.ledger.read(position, 1, position)
        if not entries or entries[0].position != position:
            raise InvalidAckError(
                f"message id {position}:* does not exist in {self.topic} "
                f"(last entry is {self.cursor.ledger.last_confirmed})"
            )
        return entries[0].header.num_messages

    def _check_batch_index(self, position: Position, batch_index: int, num: int) -> None:
        if not -1 <= batch_index < num:
            raise InvalidAckError(
                f"message id {position}:{batch_index} does not exist in {self.topic}: "
                f"entry {position} holds {num} message(s)"
            )

    def ack(self, message_ids: Iterable[tuple[Position, int]]) -> None:
        """Individually acknowledge (position, batch_index) pairs; -1 means the whole entry.

        Every id is checked before any takes effect, so a bad request changes nothing.
        """
        whole: list[Position] = []
        partial: list[tuple[Position, int, int]] = []
        for position, batch_index in message_ids:
            if self.cursor.is_acked(position):
                continue
            num = self._num_messages(position)
            self._check_batch_index(position, batch_index, num)
            if batch_index == -1 or num == 1:
                whole.append(position)
            else:
                partial.append((position, batch_index, num))
        touched = self._txn_touched
        for position, batch_index, num in partial:
            acked = self._partial_acks.setdefault(position, set())
            acked.add(batch_index)
            if len(acked) >= num:
                whole.append(position)
            elif position in touched:
                self._delivery_may_have_ended(position, num)
        self._ack_entries(whole)

    def _ack_entries(self, positions: list[Position]) -> None:
        touched = self._txn_touched
        for position in positions:
            if touched:
                self._pending_acks.forget(position)
            self._partial_acks.pop(position, None)
            self._redelivery_counts.pop(position, None)
            self._redeliver.discard(position)
            self._release(position)
            self._hash_of.pop(position, None)
            self._looked_ahead.discard(position)
        if positions:
            self.cursor.ack(positions)
            self._unblock_after_acks()

    def _unblock_after_acks(self) -> None:
        if self.blocked or any(consumer.blocked for consumer in self.consumers):
            self._unblock()

    def ack_cumulative(self, position: Position, batch_index: int) -> None:
        if self.type in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
            raise InvalidAckError(
                f"cumulative acknowledgement is not allowed on {self.type.value} subscription "
                f"{self.name!r}: acknowledge messages individually"
            )
        if self.cursor.is_acked(position):
            return
        num = self._num_messages(position)
        self._check_batch_index(position, batch_index, num)
        if batch_index == -1 or batch_index == num - 1:
            upto = position
        else:
            # Acknowledge the entries before this one; within it, the indexes up to batch_index.
            upto = Position(position.ledger_id, position.entry_id - 1)
            self._partial_acks.setdefault(position, set()).update(range(batch_index + 1))
        self.acknowledge_through(upto)

    def acknowledge_through(self, upto: Position) -> None:
        """Acknowledge every entry at or before `upto`, which need not be an entry
        ("L:-1" is before ledger L's first), whatever the subscription's type: a
        Kafka consumer group's commit names an offset, not a message some consumer
        holds. Entries consumers hold up to there are released as acknowledged."""
        for held in [p for p in self._owner if p <= upto]:
            self._release(held)
        for held in [p for p in self._partial_acks if p <= upto]:
            del self._partial_acks[held]
        for held in [p for p in self._redelivery_counts if p <= upto]:
            del self._redelivery_counts[held]
        for held in list(self._redeliver.irange(maximum=upto)):
            self._redeliver.discard(held)
        self._pending_acks.forget_returned_upto(upto)
        if upto > self.cursor.mark_delete:
            self.cursor.ack_cumulative(upto)
        self._unblock_after_acks()

    def hold_for_transaction(
        self, txn_id: TxnId, message_ids: list[tuple[Position, int]]
    ) -> dict[Position, set[int]]:
        """A transactional ack: the messages wait for the transaction's outcome.

        Refused whole (TransactionConflictError) when a message is already
        acknowledged or already acknowledged in an open transaction, the same one
        included: the broker cannot tell a repeated ack of one delivery from an ack
        of a second copy, and committing a second copy's output is the duplicate a
        transaction exists to prevent. The application aborts and consumes again.
        Batch index -1 names the entry's messages not acknowledged yet. An entry
        leaves its consumer once every message of that delivery is acknowledged or
        held; until then the consumer keeps the rest. Returns the indexes taken.
        """
        taking, sizes = self._indexes_to_hold(txn_id, message_ids)
        for position, indexes in taking.items():
            self._pending_acks.hold(txn_id, position, indexes)
            self._delivery_may_have_ended(position, sizes[position])
        self._unblock_after_acks()
        return taking

    def unhold_for_transaction(self, txn_id: TxnId, taken: dict[Position, set[int]]) -> None:
        """Undo a hold_for_transaction whose ack was not recorded: exactly the indexes it
        took go back (for delivery), and none the transaction held before."""
        for position, indexes in taken.items():
            self._pending_acks.release(txn_id, position, indexes)
            self._give_back(position, indexes)
        self.wake()

    def _indexes_to_hold(
        self, txn_id: TxnId, message_ids: list[tuple[Position, int]]
    ) -> tuple[dict[Position, set[int]], dict[Position, int]]:
        """The batch indexes each entry's ack takes, and the entries' message counts;
        every id checked, nothing changed."""
        taking: dict[Position, set[int]] = {}
        sizes: dict[Position, int] = {}
        for position, batch_index in message_ids:
            acked = self._partial_acks.get(position, set())
            if self.cursor.is_acked(position) or batch_index in acked:
                raise TransactionConflictError(
                    f"message {position}:{batch_index} is already acknowledged; abort the "
                    "transaction"
                )
            num = sizes[position] = self._num_messages(position)
            self._check_batch_index(position, batch_index, num)
            indexes = set(range(num)) - acked if batch_index == -1 else {batch_index}
            self._pending_acks.check(txn_id, position, batch_index, indexes)
            if taking.get(position, set()) & indexes:
                raise already_in_transaction(txn_id, position, batch_index)
            taking.setdefault(position, set()).update(indexes)
        return taking, sizes

    def restore_transaction_acks(
        self, txn_id: TxnId, message_ids: list[tuple[Position, int]]
    ) -> None:
        """Hold again, after a restart, what an undecided transaction acknowledged (from
        the coordinator's records): what was acknowledged otherwise since, or is gone
        with retention, is left out, and nothing is refused."""
        for position, batch_index in message_ids:
            if self.cursor.is_acked(position):
                continue
            try:
                num = self._num_messages(position)
                self._check_batch_index(position, batch_index, num)
            except InvalidAckError:
                continue
            indexes = set(range(num)) if batch_index == -1 else {batch_index}
            indexes -= self._partial_acks.get(position, set())
            indexes -= self._pending_acks.held(position) - self._pending_acks.held_by(
                txn_id, position
            )
            if indexes:
                self._pending_acks.hold(txn_id, position, indexes)
                self._delivery_may_have_ended(position, num)

    def end_transaction_acks(
        self, txn_id: TxnId, message_ids: list[tuple[Position, int]], commit: bool
    ) -> None:
        """Commit acknowledges the batch indexes the transaction held; abort gives them
        back (see hold_for_transaction): nothing else of their entries changes."""
        committed: list[tuple[Position, int]] = []
        for position in dict.fromkeys(position for position, _index in message_ids):
            indexes = self._pending_acks.end(txn_id, position)
            if indexes is None:
                # Held by no one here (e.g. its subscription was loaded again while the
                # transaction ended): what the ack named.
                named = [(p, i) for p, i in message_ids if p == position]
                if commit:
                    committed += named
                else:
                    self._give_back(position)
            elif commit:
                committed += [(position, index) for index in indexes]
            else:
                self._give_back(position, indexes)
        if committed:
            self.ack(committed)
        self.wake()

    def _give_back(self, position: Position, indexes: set[int] | None = None) -> None:
        """An abort: the indexes (None: whatever is open) go out again, but not while
        the entry is outstanding: its consumer's delivery did not include them."""
        if self.cursor.is_acked(position):
            return
        if indexes is not None:
            indexes = indexes - self._partial_acks.get(position, set())
            if not indexes:
                return
        if position in self._owner:
            if indexes is not None:
                self._pending_acks.give_back(position, indexes)
        elif position < self.cursor.read_position:
            self._redeliver.add(position)

    def _delivery_may_have_ended(self, position: Position, num: int) -> None:
        """After indexes of an entry were acknowledged or held by a transaction: the
        entry leaves its consumer once that delivery holds none of its messages (each
        index acknowledged, held, or given back after it went out), and goes out again
        if an abort gave some back; an entry with nothing left to deliver is no longer
        queued."""
        settled = self._partial_acks.get(position, set()) | self._pending_acks.held(position)
        returned = self._pending_acks.returned(position) - settled
        if position in self._owner:
            if len(settled) + len(returned) < num:
                return  # its consumer still holds messages of it
            self._release(position)
            self._unblock_after_acks()
        self._pending_acks.take_returned(position)
        if len(settled) >= num:
            self._forget_replayed(position)
        elif position < self.cursor.read_position:
            self._redeliver.add(position)
            self.wake()

    def redeliver(
        self,
        consumer: Consumer,
        positions: list[Position] | None,
        redelivery_counts: list[int | None] | None = None,
    ) -> None:
        """Deliver again the given entries held by consumer (all it holds when None).

        `redelivery_counts`, one per position, names the delivery handed back (None:
        whichever is outstanding): an entry delivered again since, or not held by
        this consumer, is left alone, so a stale nack never makes a second copy.
        """
        if positions is None:
            self._return_pending(consumer)
        else:
            if redelivery_counts is not None and len(redelivery_counts) != len(positions):
                raise ValueError(
                    f"a nack names {len(positions)} message id(s) and "
                    f"{len(redelivery_counts)} redelivery count(s); give one count per id "
                    "or none"
                )
            counts = redelivery_counts or [None] * len(positions)
            for position, count in zip(positions, counts, strict=True):
                if self._owner.get(position) is not consumer:
                    continue
                if count is not None and self._delivered_as.get(position) != count:
                    continue  # names an earlier delivery: the current one stays
                self._release(position)
                if not self.cursor.is_acked(position):
                    self._redeliver.add(position)
            self._unblock_after_acks()
        self.wake()

    def seek(self, mark_delete: Position) -> None:
        """Reset the cursor so that reading resumes after mark_delete."""
        self.cursor.reset(mark_delete)
        self._redeliver.clear()
        self._owner.clear()
        self._delivered_as.clear()
        self._partial_acks.clear()
        self._pending_acks.forget_returned()
        self._holds.clear()
        self._hash_of.clear()
        self._looked_ahead.clear()
        for consumer in self.consumers:
            consumer.release_all()
            consumer.blocked = False
            consumer.permits = 0
        self.unacked_messages = 0
        self.blocked = False
        self.wake()

    # ------------------------------------------------------------ dispatch

    async def _run(self) -> None:
        try:
            while not self._closed:
                self._wakeup.clear()
                if not self._dispatch_once():
                    await self._wakeup.wait()
                else:
                    # Let acks, flows and other subscriptions in between passes.
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dispatcher of %s/%s failed", self.topic, self.name)
            raise

    def _next_consumer(self, peek: bool = False) -> Consumer | None:
        """The consumer for the next entry; `peek` leaves the round-robin turn alone."""
        if self.type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            active = self.active_consumer
            if active is None or active.permits <= 0 or active.blocked:
                return None
            return active
        count = len(self.consumers)
        for step in range(count):
            consumer = self.consumers[(self._round_robin + step) % count]
            if consumer.permits > 0 and not consumer.blocked:
                if not peek:
                    self._round_robin = (self._round_robin + step + 1) % count
                return consumer
        return None

    def _dispatch_once(self) -> bool:
        """One pass: deliver what permits allow. True when anything moved."""
        if self.blocked or not self.consumers or self._next_consumer(peek=True) is None:
            return False
        batches: dict[Consumer, list[Delivery]] = {}
        if self.type is SubscriptionType.KEY_SHARED:
            progressed = self._dispatch_by_key(batches)
        else:
            progressed = self._dispatch_in_turn(batches)
        for consumer, deliveries in batches.items():
            consumer.push(deliveries)
        return progressed

    def _dispatch_in_turn(self, batches: dict[Consumer, list[Delivery]]) -> bool:
        """Exclusive, Failover, Shared: each entry to the next consumer with permits."""
        progressed = self._dispatch_redeliveries(batches)
        bound = self.view.bound()
        cursor = self.cursor
        while cursor.read_position <= bound:
            wanted = self._entries_to_read()
            entries = cursor.ledger.read(cursor.read_position, wanted, bound)
            if not entries:
                break
            stopped = False
            for entry in entries:
                if not self._offer(entry, batches):
                    stopped = True
                    break
                cursor.read_position = entry.position.next_in_ledger()
                progressed = True
            if stopped or len(entries) < wanted:
                break
        return progressed

    def _entries_to_read(self) -> int:
        """Entries one read should bring: what the consumers' permits take at the
        average batch size seen so far (one at least, MAX_READ_ENTRIES at most)."""
        permits = sum(c.permits for c in self.consumers if c.permits > 0 and not c.blocked)
        wanted = math.ceil(permits / self._messages_per_entry)
        return min(max(wanted, 1), MAX_READ_ENTRIES)

    def _dispatch_redeliveries(self, batches: dict[Consumer, list[Delivery]]) -> bool:
        progressed = False
        while self._redeliver:
            position = self._redeliver[0]
            entry = self._read_one(position)
            if entry is None:
                continue
            if not self._offer(entry, batches, redelivery=position not in self._looked_ahead):
                break
            self._forget_replayed(position)
            progressed = True
        return progressed

    def _read_one(self, position: Position) -> Entry | None:
        """The entry to deliver again; None (and forgotten) when retention or a seek
        took it away."""
        entries = self.cursor.ledger.read(position, 1, position)
        if not entries or entries[0].position != position:
            self._forget_replayed(position)
            self._hash_of.pop(position, None)
            return None
        return entries[0]

    def _forget_replayed(self, position: Position) -> None:
        self._redeliver.discard(position)
        self._looked_ahead.discard(position)

    def _settled(self, entry: Entry) -> bool:
        """True when the entry needs no delivery: acknowledged, held by a transaction,
        outstanding to a consumer (never twice at once: it comes back through a nack
        or its consumer leaving), or skipped by the view (then it is acknowledged
        here)."""
        position = entry.position
        if self.cursor.is_acked(position) or position in self._owner:
            return True
        if position in self._txn_touched and not self._deliverable(position, entry):
            return True
        if self.view.should_skip(entry):
            self.skipped_entries += 1
            self._ack_entries([position])
            return True
        return False

    def _deliverable(self, position: Position, entry: Entry) -> bool:
        """Whether a message of the entry is neither acknowledged nor held by a transaction."""
        settled = self._partial_acks.get(position, set()) | self._pending_acks.held(position)
        return len(settled) < entry.header.num_messages

    def _offer(
        self, entry: Entry, batches: dict[Consumer, list[Delivery]], redelivery: bool = False
    ) -> bool:
        """Deliver or skip one entry; False when no consumer can take it now."""
        if self._settled(entry):
            return True
        if self.blocked:
            return False
        consumer = self._next_consumer()
        if consumer is None:
            return False
        self._deliver(consumer, entry, batches, redelivery, None)
        return True

    def _deliver(
        self,
        consumer: Consumer,
        entry: Entry,
        batches: dict[Consumer, list[Delivery]],
        redelivery: bool,
        hash_: int | None,
    ) -> None:
        position = entry.position
        count = 0
        if redelivery:
            count = self._redelivery_counts.get(position, 0) + 1
            if (
                position in self._redelivery_counts
                or len(self._redelivery_counts) < MAX_TRACKED_REDELIVERIES
            ):
                self._redelivery_counts[position] = count
        num = entry.header.num_messages
        self._messages_per_entry += MESSAGES_PER_ENTRY_WEIGHT * (num - self._messages_per_entry)
        if position in self._txn_touched:
            # Indexes held by open transactions are left out too; what an abort gave
            # back goes out with this delivery.
            skipped = self._partial_acks.get(position, set()) | self._pending_acks.held(position)
            self._pending_acks.take_returned(position)
            acked = tuple(sorted(skipped))
        else:
            acked = tuple(sorted(self._partial_acks.get(position, ())))
        # Permits count messages the consumer gets: a redelivered batch leaves out its
        # acknowledged (and held) indexes, and the client gives back permits only for
        # the rest.
        delivered = num - len(acked)
        consumer.permits -= delivered
        self._hold(consumer, position, num, hash_, count)
        consumer.messages_out += delivered
        consumer.bytes_out += entry.size
        self.messages_out += delivered
        self.bytes_out += entry.size
        batches.setdefault(consumer, []).append(Delivery(entry, count, acked))

    # ------------------------------------------------------------ Key_Shared dispatch

    def _dispatch_by_key(self, batches: dict[Consumer, list[Delivery]]) -> bool:
        """Key_Shared: entries kept aside and to deliver again first, then the log, in
        position order; an entry goes only to its hash's owner, and only while no
        other consumer holds entries of the hash. One that cannot go is kept aside,
        and so is every later entry of its hash in this pass."""
        ready = {c for c in self.consumers if c.permits > 0 and not c.blocked}
        waiting: set[int] = set()  # hashes with an entry kept back in this pass
        progressed = False
        for position in list(self._redeliver):
            if not ready or self.blocked:
                return progressed
            hash_ = self._hash_of.get(position)
            entry = None
            if hash_ is None:  # e.g. back from an aborted transactional ack
                entry = self._read_one(position)
                if entry is None:
                    continue
                hash_ = self._hash_of[position] = sticky_hash(entry.header.key_hash)
            owner = None if hash_ in waiting else self._owner_for(hash_, ready)
            if owner is None:
                waiting.add(hash_)
                continue
            entry = entry or self._read_one(position)
            if entry is None:
                continue
            redelivery = position not in self._looked_ahead
            self._forget_replayed(position)
            progressed = True
            if self._settled(entry):
                self._hash_of.pop(position, None)
                continue
            self._deliver(owner, entry, batches, redelivery, hash_)
            if owner.permits <= 0 or owner.blocked:
                ready.discard(owner)
        bound = self.view.bound()
        cursor = self.cursor
        look_ahead_limit = self.limits.max_key_shared_look_ahead
        while cursor.read_position <= bound and ready and not self.blocked:
            entries = cursor.ledger.read(cursor.read_position, MAX_READ_ENTRIES, bound)
            if not entries:
                break
            for entry in entries:
                if not ready or self.blocked:
                    return progressed
                position = entry.position
                if not self._settled(entry):
                    hash_ = sticky_hash(entry.header.key_hash)
                    owner = None if hash_ in waiting else self._owner_for(hash_, ready)
                    if owner is None:
                        if len(self._looked_ahead) >= look_ahead_limit:
                            return progressed
                        waiting.add(hash_)
                        self._hash_of[position] = hash_
                        self._looked_ahead.add(position)
                        self._redeliver.add(position)
                    else:
                        self._deliver(owner, entry, batches, False, hash_)
                        if owner.permits <= 0 or owner.blocked:
                            ready.discard(owner)
                cursor.read_position = position.next_in_ledger()
                progressed = True
            if len(entries) < MAX_READ_ENTRIES:
                break
        return progressed

    def _owner_for(self, hash_: int, ready: set[Consumer]) -> Consumer | None:
        """The consumer an entry of the hash may go to now, if any."""
        assert self._selector is not None
        owner = self._selector.select(hash_)
        if owner is None or owner not in ready:
            return None
        holder = self._holds.holder(hash_)
        if holder is not None and holder is not owner:
            return None  # draining: the previous owner still holds entries of it
        return owner

    # ------------------------------------------------------------ stats

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    @property
    def key_shared_mode(self) -> KeySharedMode | None:
        """The Key_Shared mode of the consumers (None: not Key_Shared, or no consumers)."""
        return self._selector.mode if self._selector is not None else None

    def hash_ranges(self) -> dict[Consumer, list[HashRange]]:
        """Key_Shared: the hash ranges each consumer owns now."""
        return self._selector.ranges() if self._selector is not None else {}

    def draining_hashes(self) -> list[DrainingHash]:
        """Key_Shared: hashes held by a consumer that no longer owns them."""
        if self._selector is None:
            return []
        return list(self._holds.draining(self._selector.select))

    @property
    def looked_ahead_entries(self) -> int:
        """Key_Shared: entries read past and kept aside, not delivered yet."""
        return len(self._looked_ahead)
