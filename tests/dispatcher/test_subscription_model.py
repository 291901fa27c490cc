"""Shared and Key_Shared subscriptions against a list-of-entries model, driven by hypothesis.

Random appends (data entries of 1..3 messages with one of a few keys or none, and
transaction markers), flows, acks
(whole entries and single batch indexes), bad acks, nacks (of the outstanding
delivery, of an earlier one, of entries the consumer does not hold), acks in
transactions (conflicting ones too) and their commits and aborts, and consumers
joining and leaving. The real ledger and Subscription run on a private event loop; the dispatch
task is never started: the `dispatch` rule runs `_dispatch_once()` itself, so every
run is deterministic. After each dispatch the outboxes are drained and checked:

- markers are never delivered, and an acknowledged entry is never delivered again;
- an entry is never outstanding twice: not to two consumers, not again to its
  holder, not while a transaction holds it; only a consumer with permits gets one;
- a nack naming an earlier delivery, or an entry the consumer does not hold, changes
  nothing; an ack in a transaction of a message acknowledged, held by a transaction
  (another or the same), or named twice, is refused whole (TransactionConflictError);
  transactions hold batch indexes: a delivery leaves out what is acknowledged or
  held, an entry stays with its consumer while that delivery still carries an open
  message, and an abort gives back only its indexes, sent again only after that;
- entries delivered for the first time come in log order, with no gaps, after the
  redeliveries of the same pass; redelivery counts and acked batch indexes are right;
- at the end (teardown), with permits for all, every data entry has been delivered.

Key_Shared (KeySharedSubscriptionMachine) replaces the global log-order rule with
its own: an entry goes only to the current owner of its key hash, never while
another consumer holds entries of that hash, and never before an earlier entry of
its hash that is neither acknowledged nor held by the same consumer; entries kept
aside were never delivered; at the end, acking what is held lets everything through.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dispatcher import (
    Consumer,
    Delivery,
    InvalidAckError,
    IsolationLevel,
    LogReadView,
    Subscription,
    SubscriptionType,
    TransactionConflictError,
    key_hash,
    sticky_hash,
)
from managed_ledger import (
    EntryHeader,
    EntryType,
    LocalStore,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    TxnId,
)

SHARED = SubscriptionType.SHARED
KEY_SHARED = SubscriptionType.KEY_SHARED
# Keys of data entries: few, so that hashes collide on consumers and drain often.
KEYS = ["a", "b", "c", "d", None]
LEVEL = IsolationLevel.READ_UNCOMMITTED
# Small ledgers so that positions cross ledger boundaries.
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=4)
MAX_CONSUMERS = 4
# Passes of the dispatcher one `dispatch` step may take before it must be idle.
MAX_PASSES = 20
# Transactions acks are held for (their coordinator is not part of the model).
TXNS = [TxnId(9, 1), TxnId(9, 2)]


def step(method):
    """Mark the machine broken until the step returns, so teardown does not mask a failure."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        self.healthy = False
        result = method(self, *args, **kwargs)
        self.healthy = True
        return result

    return guarded


class SharedSubscriptionMachine(RuleBasedStateMachine):
    TYPE = SHARED

    def __init__(self) -> None:
        super().__init__()
        self.healthy = True
        self.loop = asyncio.new_event_loop()
        self.directory = Path(tempfile.mkdtemp(prefix="dispatcher-model-"))
        self.store = LocalStore(self.directory / "metadata")
        self.ledger: ManagedLedger = self.loop.run_until_complete(
            ManagedLedger.open("t", self.directory / "t", self.store, CONFIG)
        )
        cursor, _ = self.ledger.open_cursor(
            "s", True, Subscription.properties_for(self.TYPE, LEVEL)
        )
        self.subscription = Subscription("t", cursor, lambda _level: LogReadView(self.ledger))
        self.subscription.start = lambda: None  # the machine runs the passes itself
        # The model.
        self.log: list[Position] = []  # every entry, in log order
        self.messages: dict[Position, int] = {}  # data entries -> message count
        self.hashes: dict[Position, int] = {}  # data entries -> Key_Shared hash
        self.markers: set[Position] = set()
        self.consumers: list[Consumer] = []
        self.permits: dict[Consumer, int] = {}
        self.holder: dict[Position, Consumer] = {}
        self.deliveries: dict[Position, int] = {}  # times each entry was delivered
        self.acked: set[Position] = set()
        self.partial: dict[Position, set[int]] = {}
        self.next_new = 0  # index into data_order of the next never-delivered entry
        self.data_order: list[Position] = []
        self.txn_sequence = 0
        # Batch indexes acked in open transactions, per entry and transaction.
        self.held_txn: dict[Position, dict[TxnId, set[int]]] = {}
        # The batch indexes each outstanding delivery carried (open when it went out).
        self.carried: dict[Position, set[int]] = {}

    # ------------------------------------------------------------ plumbing

    def call(self, function, *args):
        """Run a synchronous subscription call inside the loop (acks schedule cursor flushes)."""

        async def inside():
            return function(*args)

        return self.loop.run_until_complete(inside())

    def unacked_delivered(self) -> list[Position]:
        """Delivered, not acknowledged, with a message not held by a transaction."""
        return sorted(p for p in self.deliveries if p not in self.acked and self.open_indexes(p))

    def txn_indexes(self, position: Position) -> set[int]:
        return set().union(*self.held_txn.get(position, {}).values())

    def settled_indexes(self, position: Position) -> set[int]:
        """Acknowledged, or held by an open transaction."""
        return self.partial.get(position, set()) | self.txn_indexes(position)

    def open_indexes(self, position: Position) -> set[int]:
        return set(range(self.messages[position])) - self.settled_indexes(position)

    def delivery_may_have_ended(self, position: Position) -> None:
        """An outstanding delivery ends once each message it carried is settled."""
        if position in self.holder and self.carried[position] <= self.settled_indexes(position):
            del self.holder[position]
            del self.carried[position]

    def fully_acked(self, position: Position) -> None:
        self.acked.add(position)
        self.holder.pop(position, None)
        self.carried.pop(position, None)
        self.partial.pop(position, None)
        self.held_txn.pop(position, None)

    def held_by(self, consumer: Consumer) -> list[Position]:
        return sorted(p for p, c in self.holder.items() if c is consumer)

    # ------------------------------------------------------------ appends

    @rule(count=st.integers(1, 3), messages=st.integers(1, 3), key=st.sampled_from(KEYS))
    @step
    def append_data(self, count: int, messages: int, key: str | None) -> None:
        stored = None if key is None else key_hash(key)
        header = EntryHeader(num_messages=messages, key_hash=stored)

        async def append_all():
            return await asyncio.gather(
                *(self.ledger.append(header, b"x" * messages) for _ in range(count))
            )

        positions = self.loop.run_until_complete(append_all())
        assert positions == sorted(positions)
        for position in positions:
            self.log.append(position)
            self.data_order.append(position)
            self.messages[position] = messages
            self.hashes[position] = sticky_hash(stored)

    @rule(kind=st.sampled_from([EntryType.TXN_COMMIT, EntryType.TXN_ABORT]))
    @step
    def append_marker(self, kind: EntryType) -> None:
        self.txn_sequence += 1
        header = EntryHeader(type=kind, txn_id=TxnId(1, self.txn_sequence))
        position = self.loop.run_until_complete(self.ledger.append(header, b""))
        self.log.append(position)
        self.markers.add(position)

    # ------------------------------------------------------------ consumers

    @precondition(lambda self: len(self.consumers) < MAX_CONSUMERS)
    @rule(permits=st.integers(0, 5))
    @step
    def add_consumer(self, permits: int) -> None:
        consumer = Consumer(f"c{len(self.permits)}")
        self.call(self.subscription.add_consumer, consumer, self.TYPE, LEVEL)
        self.consumers.append(consumer)
        self.permits[consumer] = 0
        if permits:
            self.call(self.subscription.flow, consumer, permits)
            self.permits[consumer] += permits

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    @step
    def remove_consumer(self, data) -> None:
        consumer = data.draw(st.sampled_from(self.consumers), label="leaving")
        self.call(self.subscription.remove_consumer, consumer)
        self.consumers.remove(consumer)
        for position in self.held_by(consumer):
            del self.holder[position]
            del self.carried[position]
        assert consumer.pending == {}

    @precondition(lambda self: self.consumers)
    @rule(data=st.data(), permits=st.integers(1, 6))
    @step
    def flow(self, data, permits: int) -> None:
        consumer = data.draw(st.sampled_from(self.consumers), label="consumer")
        self.call(self.subscription.flow, consumer, permits)
        self.permits[consumer] += permits

    # ------------------------------------------------------------ acks and nacks

    @precondition(lambda self: self.unacked_delivered())
    @rule(data=st.data())
    @step
    def ack(self, data) -> None:
        choices = self.unacked_delivered()
        picked = data.draw(
            st.lists(st.sampled_from(choices), min_size=1, max_size=3, unique=True), label="ack"
        )
        ids = []
        for position in picked:
            # Plain acks of messages a transaction holds are not modelled.
            whole = [] if self.txn_indexes(position) else [-1]
            indexes = [*whole, *sorted(self.open_indexes(position))]
            ids.append((position, data.draw(st.sampled_from(indexes), label="batch_index")))
        self.call(self.subscription.ack, ids)
        for position, batch_index in ids:
            if position in self.acked:
                continue
            acked = self.partial.setdefault(position, set())
            if batch_index == -1:
                acked.update(range(self.messages[position]))
            else:
                acked.add(batch_index)
            if len(acked) == self.messages[position]:
                self.fully_acked(position)
            else:
                self.delivery_may_have_ended(position)

    @precondition(lambda self: self.log)
    @rule(data=st.data())
    @step
    def ack_with_a_bad_id_changes_nothing(self, data) -> None:
        last = self.ledger.last_confirmed
        bad = data.draw(
            st.sampled_from(
                [
                    (Position(last.ledger_id, last.entry_id + 1), -1),
                    (Position(last.ledger_id + 3, 0), 0),
                    *((p, self.messages[p]) for p in self.unacked_delivered()),
                ]
            ),
            label="bad id",
        )
        good = [(p, 0) for p in self.unacked_delivered()[:2]]
        before = (
            self.subscription.cursor.mark_delete,
            list(self.subscription.cursor.individually_acked),
            {p: set(s) for p, s in self.subscription._partial_acks.items()},
        )
        with pytest.raises(InvalidAckError):
            self.call(self.subscription.ack, [*good, bad])
        after = (
            self.subscription.cursor.mark_delete,
            list(self.subscription.cursor.individually_acked),
            {p: set(s) for p, s in self.subscription._partial_acks.items()},
        )
        assert after == before

    @precondition(lambda self: self.holder)
    @rule(data=st.data(), everything=st.booleans(), named=st.booleans())
    @step
    def nack(self, data, everything: bool, named: bool) -> None:
        holders = sorted({c.name: c for c in self.holder.values()}.items())
        consumer = data.draw(st.sampled_from([c for _, c in holders]), label="nacking")
        held = self.held_by(consumer)
        if everything:
            positions = held
            self.call(self.subscription.redeliver, consumer, None)
        else:
            positions = data.draw(
                st.lists(st.sampled_from(held), min_size=1, unique=True), label="nacked"
            )
            # Named: the redelivery count of the outstanding delivery, as the client sends.
            counts = [self.deliveries[p] - 1 for p in positions] if named else None
            self.call(self.subscription.redeliver, consumer, positions, counts)
        for position in positions:
            del self.holder[position]
            del self.carried[position]

    @precondition(lambda self: self.consumers and self.deliveries)
    @rule(data=st.data())
    @step
    def nack_of_a_delivery_not_outstanding_changes_nothing(self, data) -> None:
        """A late nack: of an earlier delivery of an entry held now, or of an entry the
        consumer does not hold (queued again, held by a transaction, acked, elsewhere)."""
        consumer = data.draw(st.sampled_from(self.consumers), label="nacking")
        position = data.draw(st.sampled_from(sorted(self.deliveries)), label="nacked")
        if self.holder.get(position) is consumer:
            current = self.deliveries[position] - 1
            assume_stale = data.draw(st.integers(0, current + 3), label="count")
            if assume_stale == current:
                return  # that one is outstanding: the nack rule covers it
            count: int | None = assume_stale
        else:
            count = data.draw(st.sampled_from([None, self.deliveries[position] - 1]))
        self.call(self.subscription.redeliver, consumer, [position], [count])

    @precondition(lambda self: self.unacked_delivered())
    @rule(data=st.data(), txn=st.sampled_from(TXNS))
    @step
    def ack_in_transaction(self, data, txn: TxnId) -> None:
        choices = sorted(p for p in self.deliveries if p not in self.acked)
        picked = data.draw(
            st.lists(st.sampled_from(choices), min_size=1, max_size=3), label="acked in txn"
        )
        ids = [
            (p, data.draw(st.sampled_from([-1, *range(self.messages[p])]), label="batch_index"))
            for p in picked
        ]
        taking: dict[Position, set[int]] = {}
        conflict = False
        for position, batch_index in ids:
            acked = self.partial.get(position, set())
            if batch_index == -1:
                indexes = set(range(self.messages[position])) - acked
            else:
                indexes = {batch_index}
            taken = taking.setdefault(position, set())
            if batch_index in acked or indexes & (self.txn_indexes(position) | taken):
                conflict = True
            taken |= indexes
        if conflict:
            with pytest.raises(TransactionConflictError):
                self.call(self.subscription.hold_for_transaction, txn, ids)
            return  # refused whole: the invariant checks nothing moved
        self.call(self.subscription.hold_for_transaction, txn, ids)
        for position, indexes in taking.items():
            self.held_txn.setdefault(position, {}).setdefault(txn, set()).update(indexes)
            if position in self.carried:
                # Taken from the delivery: an abort gives them back, not to it.
                self.carried[position] -= indexes
            self.delivery_may_have_ended(position)

    def open_transactions(self) -> list[TxnId]:
        return sorted({txn for held in self.held_txn.values() for txn in held})

    @precondition(lambda self: self.held_txn)
    @rule(data=st.data(), commit=st.booleans())
    @step
    def end_transaction(self, data, commit: bool) -> None:
        txn = data.draw(st.sampled_from(self.open_transactions()), label="ending")
        self.end_transaction_acks(txn, commit)

    def end_transaction_acks(self, txn: TxnId, commit: bool) -> None:
        held = {p: held[txn] for p, held in self.held_txn.items() if txn in held}
        ids = [(p, i) for p, indexes in sorted(held.items()) for i in sorted(indexes)]
        self.call(self.subscription.end_transaction_acks, txn, ids, commit)
        for position, indexes in held.items():
            del self.held_txn[position][txn]
            if not self.held_txn[position]:
                del self.held_txn[position]
            if commit:
                acked = self.partial.setdefault(position, set())
                acked |= indexes
                if len(acked) == self.messages[position]:
                    self.fully_acked(position)

    # ------------------------------------------------------------ dispatch

    @rule()
    @step
    def dispatch(self) -> None:
        self.run_dispatch()

    def run_dispatch(self) -> None:
        for _ in range(MAX_PASSES):
            if not self.call(self.subscription._dispatch_once):
                break
        else:
            raise AssertionError(f"dispatcher still busy after {MAX_PASSES} passes")
        first_time: list[Position] = []
        for consumer in self.consumers:
            while not consumer.outbox.empty():
                item = consumer.outbox.get_nowait()
                assert isinstance(item, list), f"{consumer.name} got {item!r}"
                first_time += self.check_batch(consumer, item)
        self.check_first_deliveries(first_time)

    def check_first_deliveries(self, first_time: list[Position]) -> None:
        expected = self.data_order[self.next_new : self.next_new + len(first_time)]
        assert sorted(first_time) == expected, "first deliveries skipped or reordered entries"
        self.next_new += len(first_time)

    def check_batch(self, consumer: Consumer, batch: list[Delivery]) -> list[Position]:
        """Check one pushed batch; returns the positions delivered for the first time."""
        first_time: list[Position] = []
        redelivered: list[Position] = []
        for delivery in batch:
            position = delivery.entry.position
            assert position not in self.markers, f"marker {position} delivered"
            assert position in self.messages, f"unknown entry {position} delivered"
            assert position not in self.acked, f"acknowledged entry {position} delivered again"
            owner = self.holder.get(position)
            assert owner is None, f"{position} given to {consumer.name}, held by {owner.name}"
            self.check_delivered_messages(consumer, delivery)
            times = self.deliveries.get(position, 0)
            if times == 0:
                first_time.append(position)
            else:
                assert not first_time, "a redelivery came after a new entry"
                redelivered.append(position)
            self.deliveries[position] = times + 1
            self.holder[position] = consumer
        assert first_time == sorted(first_time)
        assert redelivered == sorted(redelivered)
        return first_time

    def check_delivered_messages(self, consumer: Consumer, delivery: Delivery) -> None:
        """What of the entry went out, and what it cost; the delivery carries it."""
        position = delivery.entry.position
        carried = self.open_indexes(position)
        assert carried, f"{position} delivered with every message acked or held by a txn"
        assert self.permits[consumer] > 0, f"{consumer.name} got {position} without permits"
        assert delivery.redelivery_count == self.deliveries.get(position, 0)
        # Acknowledged and transaction-held indexes are left out; permits pay for the rest.
        assert delivery.acked_batch_indexes == tuple(sorted(self.settled_indexes(position)))
        self.permits[consumer] -= len(carried)
        self.carried[position] = carried

    # ------------------------------------------------------------ invariants

    @invariant()
    @step
    def subscription_agrees_with_the_model(self) -> None:
        subscription = self.subscription
        assert subscription.consumers == self.consumers
        assert subscription._owner == self.holder
        for consumer in self.consumers:
            assert consumer.permits == self.permits[consumer]
            assert consumer.pending == {p: self.messages[p] for p in self.held_by(consumer)}
            assert consumer.unacked_messages == sum(consumer.pending.values())
        assert subscription.unacked_messages == sum(self.messages[p] for p in self.holder)
        cursor = subscription.cursor
        for position in self.acked:
            assert cursor.is_acked(position)
        for position in self.messages:
            if position not in self.acked:
                assert not cursor.is_acked(position), f"{position} acked but never by a client"
        waiting = set(subscription._redeliver) - subscription._looked_ahead
        assert waiting <= set(self.deliveries) - self.acked - set(self.holder)
        assert all(self.open_indexes(p) for p in waiting), "queued with nothing to deliver"
        held = {
            position: record.by_txn
            for position, record in subscription._pending_acks.entries.items()
            if record.by_txn
        }
        assert held == self.held_txn
        for position, consumer in self.holder.items():
            assert self.carried[position] - self.settled_indexes(position), (
                f"{consumer.name} holds {position} with nothing of its delivery open"
            )
        # Every open message of a delivered entry is outstanding or on its way again.
        for position in set(self.deliveries) - self.acked - set(self.holder):
            if self.open_indexes(position):
                assert position in waiting, f"{position} has open messages and no way out"
        assert not subscription._looked_ahead & set(self.deliveries), "kept aside, yet delivered"

    # ------------------------------------------------------------ the end

    def teardown(self) -> None:
        try:
            if self.healthy:
                self.everything_is_eventually_delivered()
        finally:
            self.loop.run_until_complete(self.subscription.close())
            self.loop.run_until_complete(self.ledger.close())
            self.store.close()
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def everything_is_eventually_delivered(self) -> None:
        if not self.consumers:
            self.add_consumer(0)
        for txn in self.open_transactions():
            self.end_transaction_acks(txn, commit=False)
        total = sum(self.messages.values()) + 1  # at least one, or markers wait
        for consumer in self.consumers:
            self.call(self.subscription.flow, consumer, total)
            self.permits[consumer] += total
        self.run_dispatch()
        self.let_held_entries_through()
        self.subscription_agrees_with_the_model()
        assert set(self.deliveries) == set(self.messages), "some data entries never delivered"
        assert not self.subscription._redeliver
        unacked = set(self.messages) - self.acked
        assert set(self.holder) == unacked
        cursor = self.subscription.cursor
        assert all(cursor.is_acked(p) for p in self.markers), "a marker was not acked"
        assert self.subscription.backlog == len(unacked)

    def let_held_entries_through(self) -> None:
        """Shared needs nothing more: permits alone let every entry go."""


class KeySharedSubscriptionMachine(SharedSubscriptionMachine):
    TYPE = KEY_SHARED

    def check_batch(self, consumer: Consumer, batch: list[Delivery]) -> list[Position]:
        first_time: list[Position] = []
        positions = [delivery.entry.position for delivery in batch]
        assert positions == sorted(positions), "one pass delivers in position order"
        owner_of = self.subscription._selector.select
        for delivery in batch:
            position = delivery.entry.position
            assert position not in self.markers and position in self.messages
            assert position not in self.acked, f"acknowledged entry {position} delivered again"
            assert self.holder.get(position) is None
            hash_ = self.hashes[position]
            assert owner_of(hash_) is consumer, f"{position} went to a consumer not owning it"
            for earlier, holder in self.holder.items():
                if self.hashes[earlier] == hash_:
                    assert holder is consumer, f"hash {hash_} held by two consumers"
            for earlier in self.data_order:
                if earlier >= position:
                    break
                # One held whole by transactions may be overtaken: it comes back on abort.
                if (
                    self.hashes[earlier] == hash_
                    and earlier not in self.acked
                    and self.open_indexes(earlier)
                ):
                    assert self.holder.get(earlier) is consumer, (
                        f"{position} delivered before {earlier} of its hash"
                    )
            self.check_delivered_messages(consumer, delivery)
            times = self.deliveries.get(position, 0)
            if times == 0:
                first_time.append(position)
            self.deliveries[position] = times + 1
            self.holder[position] = consumer
        return first_time

    def check_first_deliveries(self, first_time: list[Position]) -> None:
        # Entries of other hashes may overtake ones kept aside: no global order.
        assert len(set(first_time)) == len(first_time)

    def let_held_entries_through(self) -> None:
        """Draining hashes wait for their holders' acks: ack what is held, again and
        again, until nothing is left to deliver."""
        for _ in range(len(self.messages) + 1):
            held = sorted(self.holder)
            if not held:
                break
            self.call(self.subscription.ack, [(p, -1) for p in held])
            for position in held:
                self.fully_acked(position)
            total = sum(self.messages.values()) + 1
            for consumer in self.consumers:
                self.call(self.subscription.flow, consumer, total)
                self.permits[consumer] += total
            self.run_dispatch()


_MODEL_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

SharedSubscriptionMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSharedSubscriptionModel = SharedSubscriptionMachine.TestCase
# More examples: a draining hash needs a join or leave between delivery and ack.
KeySharedSubscriptionMachine.TestCase.settings = settings(_MODEL_SETTINGS, max_examples=200)
TestKeySharedSubscriptionModel = KeySharedSubscriptionMachine.TestCase
