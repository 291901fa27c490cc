"""Subscription behaviour against a real managed ledger: delivery, permits, acks, redelivery.

Only the read view is faked (in the read-view tests), the way READ_COMMITTED plugs in:
its bound is the stable position and it skips aborted transactional entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dispatcher import (
    Consumer,
    ControlEvent,
    Delivery,
    InvalidAckError,
    IsolationLevel,
    IsolationLevelMismatchError,
    LogReadView,
    Subscription,
    SubscriptionBusyError,
    SubscriptionClosedError,
    SubscriptionType,
    TransactionConflictError,
)
from managed_ledger import (
    EARLIEST,
    Entry,
    EntryHeader,
    EntryType,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    TxnId,
)

EXCLUSIVE = SubscriptionType.EXCLUSIVE
SHARED = SubscriptionType.SHARED
FAILOVER = SubscriptionType.FAILOVER
KEY_SHARED = SubscriptionType.KEY_SHARED
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED

# How long a test waits for something that should happen at once.
DEADLINE_S = 5.0
# Loop turns given to the dispatch task before asserting that nothing happened.
SETTLE_TURNS = 10


# ---------------------------------------------------------------- helpers


async def append(
    ledger: ManagedLedger, count: int = 1, *, messages: int = 1, txn: TxnId | None = None
) -> list[Position]:
    positions = []
    for _ in range(count):
        header = EntryHeader(num_messages=messages, txn_id=txn)
        positions.append(await ledger.append(header, f"m{ledger.entries_added}".encode()))
    return positions


async def append_marker(ledger: ManagedLedger, type_: EntryType, txn: TxnId) -> Position:
    return await ledger.append(EntryHeader(type=type_, num_messages=1, txn_id=txn), b"")


async def next_item(consumer: Consumer) -> list[Delivery] | ControlEvent:
    return await asyncio.wait_for(consumer.outbox.get(), DEADLINE_S)


async def receive(consumer: Consumer, count: int) -> list[Delivery]:
    """The next `count` deliveries; a control event in between fails the test."""
    got: list[Delivery] = []
    while len(got) < count:
        item = await next_item(consumer)
        assert isinstance(item, list), f"expected deliveries, got {item!r}"
        got.extend(item)
    assert len(got) == count, f"expected {count} deliveries, got {len(got)}"
    return got


async def settle() -> None:
    """Give the dispatch task its turns (a pass after every wake-up); no time passes."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


async def assert_nothing_delivered(*consumers: Consumer) -> None:
    await settle()
    for consumer in consumers:
        assert consumer.outbox.empty(), f"{consumer.name} got {consumer.outbox.get_nowait()!r}"


def positions_of(deliveries: list[Delivery]) -> list[Position]:
    return [delivery.entry.position for delivery in deliveries]


def join(subscription: Subscription, consumer: Consumer, permits: int = 0, **kwargs) -> Consumer:
    subscription.add_consumer(
        consumer, kwargs.get("type_", subscription.type), kwargs.get("level", RU)
    )
    if permits:
        subscription.flow(consumer, permits)
    return consumer


# ---------------------------------------------------------------- Exclusive, settings


async def test_exclusive_delivers_entries_in_log_order(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    before = await append(ledger, 4)
    consumer = join(subscription, Consumer("c"), permits=100)
    after = await append(ledger, 3)

    got = await receive(consumer, 7)

    assert positions_of(got) == before + after
    assert [d.redelivery_count for d in got] == [0] * 7
    assert [d.entry.payload for d in got] == [f"m{i}".encode() for i in range(7)]
    assert list(consumer.pending) == before + after


@pytest.mark.parametrize("ledger_config", [ManagedLedgerConfig(max_entries_per_ledger=3)])
async def test_delivery_and_acks_follow_log_order_across_ledger_rollover(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=100)
    written = await append(ledger, 8)
    assert len({p.ledger_id for p in written}) == 3

    got = await receive(consumer, 8)
    assert positions_of(got) == written
    subscription.ack([(p, -1) for p in reversed(written)])

    assert subscription.cursor.mark_delete == written[-1]
    assert subscription.backlog == 0


async def test_second_exclusive_consumer_raises_subscription_busy(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    first = join(subscription, Consumer("first"))

    with pytest.raises(SubscriptionBusyError, match="first"):
        join(subscription, Consumer("second"))

    assert subscription.consumers == [first]


async def test_consumer_of_another_type_cannot_join_a_subscription_with_consumers(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    join(subscription, Consumer("a"))

    with pytest.raises(SubscriptionBusyError, match="Shared"):
        join(subscription, Consumer("b"), type_=FAILOVER)


async def test_type_of_a_subscription_without_consumers_follows_the_next_consumer(
    ledger, subscriptions
):
    subscription = subscriptions(EXCLUSIVE)
    join(subscription, Consumer("a"), type_=SHARED)
    join(subscription, Consumer("b"), type_=SHARED)

    assert subscription.type is SHARED
    assert subscription.cursor.properties["type"] == "Shared"


@pytest.mark.parametrize(("created", "asked"), [(RC, RU), (RU, RC)])
async def test_consumer_asking_for_the_other_isolation_level_is_refused(
    ledger, subscriptions, created, asked
):
    subscription = subscriptions(SHARED, created)

    with pytest.raises(IsolationLevelMismatchError, match=created.value):
        join(subscription, Consumer("c"), level=asked)

    assert subscription.consumers == []
    assert subscription.isolation_level is created


async def test_isolation_level_and_type_are_stored_with_the_cursor(tmp_path, store):
    directory = tmp_path / "restart"
    ledger = await ManagedLedger.open("t", directory, store)
    cursor, created = ledger.open_cursor("s", True, Subscription.properties_for(FAILOVER, RU))
    assert created
    written = await append(ledger, 3)
    Subscription("t", cursor, lambda _level: LogReadView(ledger)).ack([(written[1], -1)])
    await ledger.close()

    reopened = await ManagedLedger.open("t", directory, store)
    try:
        subscription = Subscription(
            "t", reopened.cursors["s"], lambda _level: LogReadView(reopened)
        )
        assert subscription.isolation_level is RU
        assert subscription.type is FAILOVER
        with pytest.raises(IsolationLevelMismatchError):
            subscription.add_consumer(Consumer("rc"), FAILOVER, RC)
        consumer = join(subscription, Consumer("ru"), permits=10)
        first = await next_item(consumer)
        assert first == ControlEvent("active", True)
        # The individually acknowledged entry survives the restart and is not redelivered.
        assert positions_of(await receive(consumer, 2)) == [written[0], written[2]]
        await subscription.close()
    finally:
        await reopened.close()


async def test_closed_subscription_tells_its_consumers_and_refuses_new_ones(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"))

    await subscription.close()

    assert await next_item(consumer) == ControlEvent("closed")
    with pytest.raises(SubscriptionClosedError):
        join(subscription, Consumer("late"))


# ---------------------------------------------------------------- permits


async def test_permits_count_messages_not_entries(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"))
    batches = await append(ledger, 2, messages=10)

    subscription.flow(consumer, 10)
    got = await receive(consumer, 1)

    assert positions_of(got) == batches[:1]
    assert consumer.permits == 0
    assert consumer.unacked_messages == 10
    assert subscription.unacked_messages == 10
    await assert_nothing_delivered(consumer)

    subscription.flow(consumer, 10)
    assert positions_of(await receive(consumer, 1)) == batches[1:]
    assert consumer.permits == 0


async def test_a_pass_reads_what_the_permits_take_at_the_batch_size_seen(
    ledger, subscriptions, monkeypatch
):
    # Not MAX_READ_ENTRIES of 100-message batches to deliver two of them: from the
    # files, every pass would read again what the last one left.
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"))
    batches = await append(ledger, 40, messages=100)
    asked: list[int] = []
    read = ledger.read

    def counted(start, max_entries, bound=None, max_bytes=None):
        asked.append(max_entries)
        return read(start, max_entries, bound, max_bytes)

    monkeypatch.setattr(ledger, "read", counted)
    got = []
    for _ in range(20):
        subscription.flow(consumer, 200)
        got += await receive(consumer, 2)
    assert positions_of(got) == batches
    assert asked[0] == 200  # nothing seen yet: a message an entry
    assert max(asked[-5:]) <= 3  # 200 permits at about 100 messages an entry


async def test_no_delivery_at_zero_permits_and_delivery_resumes_after_flow(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"))
    written = await append(ledger, 3)

    await assert_nothing_delivered(consumer)
    assert subscription.backlog == 3

    subscription.flow(consumer, 1)
    assert positions_of(await receive(consumer, 1)) == written[:1]
    await assert_nothing_delivered(consumer)

    subscription.flow(consumer, 2)
    assert positions_of(await receive(consumer, 2)) == written[1:]


async def test_entry_larger_than_the_remaining_permits_is_delivered_and_repaid_by_flows(
    ledger, subscriptions
):
    # A receiver queue smaller than a batch must not stall the consumer forever.
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=4)
    written = await append(ledger, 2, messages=10)

    assert positions_of(await receive(consumer, 1)) == written[:1]
    assert consumer.permits == -6

    subscription.flow(consumer, 6)
    await assert_nothing_delivered(consumer)
    subscription.flow(consumer, 1)
    assert positions_of(await receive(consumer, 1)) == written[1:]


async def test_negative_flow_is_refused(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=3)

    with pytest.raises(ValueError, match="permits"):
        subscription.flow(consumer, -1)

    assert consumer.permits == 3


# ---------------------------------------------------------------- Shared


async def test_shared_round_robins_across_consumers_with_permits(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumers = [join(subscription, Consumer(name), permits=100) for name in "abc"]
    owners: list[str] = []

    # One entry per dispatch pass, as when a producer sends slowly.
    for _ in range(6):
        (position,) = await append(ledger)
        waiting = {asyncio.ensure_future(next_item(c)): c for c in consumers}
        done, pending = await asyncio.wait(
            waiting, timeout=DEADLINE_S, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()
        assert len(done) == 1, f"entry {position} went to {len(done)} consumers"
        (task,) = done
        assert positions_of(task.result()) == [position]
        owners.append(waiting[task].name)

    assert sorted(owners[:3]) == ["a", "b", "c"]
    assert owners == owners[:3] * 2


async def test_shared_delivers_each_entry_to_exactly_one_consumer(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumers = [join(subscription, Consumer(name), permits=10) for name in "abc"]
    written = await append(ledger, 30)

    received = {c.name: positions_of(await receive(c, 10)) for c in consumers}

    every = [p for got in received.values() for p in got]
    assert sorted(every) == written
    assert len(set(every)) == 30
    for consumer in consumers:
        assert received[consumer.name] == sorted(received[consumer.name])
        assert sorted(consumer.pending) == received[consumer.name]
    await assert_nothing_delivered(*consumers)


async def test_shared_passes_over_consumers_without_permits(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    stingy = join(subscription, Consumer("stingy"), permits=1)
    eager = join(subscription, Consumer("eager"), permits=5)
    idle = join(subscription, Consumer("idle"))
    written = await append(ledger, 7)

    got_stingy = positions_of(await receive(stingy, 1))
    got_eager = positions_of(await receive(eager, 5))

    assert sorted(got_stingy + got_eager) == written[:6]
    await assert_nothing_delivered(stingy, eager, idle)
    subscription.flow(idle, 1)
    assert positions_of(await receive(idle, 1)) == written[6:]


async def test_removing_a_shared_consumer_redelivers_its_pending_entries_to_the_others(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    leaving = join(subscription, Consumer("leaving"), permits=3)
    staying = join(subscription, Consumer("staying"))
    written = await append(ledger, 3)
    assert positions_of(await receive(leaving, 3)) == written
    subscription.ack([(written[1], -1)])

    subscription.remove_consumer(leaving)
    subscription.flow(staying, 10)
    got = await receive(staying, 2)

    assert positions_of(got) == [written[0], written[2]]
    assert [d.redelivery_count for d in got] == [1, 1]
    assert leaving.pending == {}
    await assert_nothing_delivered(leaving, staying)


async def test_cumulative_ack_on_shared_raises_invalid_ack(ledger, subscriptions):
    for type_, name in [(SHARED, "shared"), (KEY_SHARED, "key-shared")]:
        subscription = subscriptions(type_, name=name)
        consumer = join(subscription, Consumer("c"), permits=5)
        written = await append(ledger, 1)
        await receive(consumer, 1)

        with pytest.raises(InvalidAckError, match="cumulative"):
            subscription.ack_cumulative(written[0], -1)

        assert not subscription.cursor.is_acked(written[0])
        assert written[0] in consumer.pending


# ---------------------------------------------------------------- Failover


async def test_failover_only_the_active_consumer_receives(ledger, subscriptions):
    subscription = subscriptions(FAILOVER)
    low = join(subscription, Consumer("low", priority_level=1), permits=10)
    first = join(subscription, Consumer("first", priority_level=0), permits=10)
    second = join(subscription, Consumer("second", priority_level=0), permits=10)
    written = await append(ledger, 3)

    assert subscription.active_consumer is first
    assert await next_item(low) == ControlEvent("active", True)
    assert await next_item(low) == ControlEvent("active", False)
    assert await next_item(first) == ControlEvent("active", True)
    assert await next_item(second) == ControlEvent("active", False)
    assert positions_of(await receive(first, 3)) == written
    await assert_nothing_delivered(low, first, second)


async def test_failover_first_connected_wins_among_equal_priorities(ledger, subscriptions):
    subscription = subscriptions(FAILOVER)
    # Created in one order, connected in the other: connection order decides.
    created_first = Consumer("created-first")
    connected_first = Consumer("connected-first")
    join(subscription, connected_first)
    join(subscription, created_first)

    assert subscription.active_consumer is connected_first


async def test_failover_announces_who_is_active(ledger, subscriptions):
    subscription = subscriptions(FAILOVER)
    a = join(subscription, Consumer("a", priority_level=1))
    assert await next_item(a) == ControlEvent("active", True)

    b = join(subscription, Consumer("b", priority_level=1))
    assert await next_item(b) == ControlEvent("active", False)
    assert a.outbox.empty()

    c = join(subscription, Consumer("c", priority_level=0))
    assert await next_item(c) == ControlEvent("active", True)
    assert await next_item(a) == ControlEvent("active", False)
    assert b.outbox.empty()

    subscription.remove_consumer(c)
    assert await next_item(a) == ControlEvent("active", True)
    assert b.outbox.empty()
    assert c.outbox.empty()


async def test_failover_removing_the_active_consumer_redelivers_its_unacked_entries_to_the_new_active(
    ledger, subscriptions
):
    subscription = subscriptions(FAILOVER)
    active = join(subscription, Consumer("active"), permits=10)
    standby = join(subscription, Consumer("standby"), permits=10)
    assert await next_item(active) == ControlEvent("active", True)
    assert await next_item(standby) == ControlEvent("active", False)
    written = await append(ledger, 3)
    assert positions_of(await receive(active, 3)) == written
    subscription.ack([(written[0], -1)])

    subscription.remove_consumer(active)

    assert await next_item(standby) == ControlEvent("active", True)
    got = await receive(standby, 2)
    assert positions_of(got) == written[1:]
    assert [d.redelivery_count for d in got] == [1, 1]
    more = await append(ledger, 1)
    got = await receive(standby, 1)
    assert positions_of(got) == more
    assert got[0].redelivery_count == 0
    await assert_nothing_delivered(active)


async def test_failover_higher_priority_consumer_takes_over_the_unacked_entries(
    ledger, subscriptions
):
    subscription = subscriptions(FAILOVER)
    old = join(subscription, Consumer("old", priority_level=5), permits=10)
    assert await next_item(old) == ControlEvent("active", True)
    written = await append(ledger, 2)
    assert positions_of(await receive(old, 2)) == written

    new = join(subscription, Consumer("new", priority_level=0), permits=10)

    assert await next_item(old) == ControlEvent("active", False)
    assert old.pending == {}
    assert await next_item(new) == ControlEvent("active", True)
    got = await receive(new, 2)
    assert positions_of(got) == written
    assert [d.redelivery_count for d in got] == [1, 1]


async def test_cumulative_ack_on_failover_acks_everything_up_to_the_position(ledger, subscriptions):
    subscription = subscriptions(FAILOVER)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 4)
    assert await next_item(consumer) == ControlEvent("active", True)
    await receive(consumer, 4)

    subscription.ack_cumulative(written[2], -1)

    assert subscription.cursor.mark_delete == written[2]
    assert list(consumer.pending) == [written[3]]
    assert subscription.backlog == 1


async def test_acknowledge_through_takes_any_position_on_any_type(ledger, subscriptions):
    # A Kafka group's commit: no message names it, and Shared is no obstacle.
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 3)
    await receive(consumer, 3)
    before_first = Position(written[0].ledger_id, -1)

    subscription.acknowledge_through(before_first)  # nothing yet: a no-op
    assert subscription.backlog == 3 and len(consumer.pending) == 3

    subscription.acknowledge_through(Position(written[2].ledger_id, written[2].entry_id - 1))
    assert subscription.cursor.mark_delete == written[1]
    assert list(consumer.pending) == [written[2]]
    assert subscription.unacked_messages == 1


# ---------------------------------------------------------------- acks


async def test_acking_every_batch_index_of_a_batch_acks_the_entry(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    (batch,) = await append(ledger, messages=3)
    await receive(consumer, 1)

    subscription.ack([(batch, 0), (batch, 2)])
    assert not subscription.cursor.is_acked(batch)
    assert subscription.backlog == 1
    assert batch in consumer.pending

    subscription.ack([(batch, 1)])
    assert subscription.cursor.is_acked(batch)
    assert subscription.cursor.mark_delete == batch
    assert subscription.backlog == 0
    assert consumer.pending == {}


async def test_partial_batch_acks_are_carried_on_redelivery(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    (batch,) = await append(ledger, messages=4)
    await receive(consumer, 1)
    subscription.ack([(batch, 2), (batch, 0)])

    subscription.redeliver(consumer, [batch])
    (again,) = await receive(consumer, 1)

    assert again.entry.position == batch
    assert again.redelivery_count == 1
    assert again.acked_batch_indexes == (0, 2)


async def test_a_redelivered_batch_costs_permits_only_for_its_unacked_messages(
    ledger, subscriptions
):
    # The client gives back a permit per message it gets; charging the acked ones too
    # would drain the consumer's permits a little with every redelivery until it stalls.
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=4)
    (batch,) = await append(ledger, messages=4)
    await receive(consumer, 1)
    subscription.ack([(batch, 0), (batch, 1), (batch, 2)])
    subscription.flow(consumer, 1)  # the client returns what it got of the first copy...

    subscription.redeliver(consumer, [batch])
    (again,) = await receive(consumer, 1)

    assert again.acked_batch_indexes == (0, 1, 2)
    assert consumer.permits == 0  # ...and the redelivery of one message costs one


async def test_cumulative_ack_inside_a_batch_carries_the_acked_indexes(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=10)
    single = await append(ledger)
    (batch,) = await append(ledger, messages=3)
    await receive(consumer, 2)

    subscription.ack_cumulative(batch, 1)

    assert subscription.cursor.mark_delete == single[0]
    subscription.redeliver(consumer, None)
    (again,) = await receive(consumer, 1)
    assert again.entry.position == batch
    assert again.acked_batch_indexes == (0, 1)


async def test_ack_of_a_position_that_does_not_exist_raises_and_changes_nothing(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    single = (await append(ledger))[0]
    (batch,) = await append(ledger, messages=3)
    await receive(consumer, 2)
    lac = ledger.last_confirmed

    for missing in [
        Position(lac.ledger_id, lac.entry_id + 1),
        Position(lac.ledger_id + 7, 0),
    ]:
        with pytest.raises(InvalidAckError, match="does not exist"):
            subscription.ack([(single, -1), (batch, 1), (missing, -1)])

    assert not subscription.cursor.is_acked(single)
    assert list(consumer.pending) == [single, batch]
    assert subscription.backlog == 2
    subscription.redeliver(consumer, [batch])
    (again,) = await receive(consumer, 1)
    assert again.acked_batch_indexes == ()


@pytest.mark.parametrize(("messages", "batch_index"), [(3, 3), (3, -2), (1, 1), (1, 99)])
async def test_batch_index_out_of_range_raises_invalid_ack(
    ledger, subscriptions, messages, batch_index
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    good = (await append(ledger))[0]
    (entry,) = await append(ledger, messages=messages)
    await receive(consumer, 2)

    with pytest.raises(InvalidAckError, match=f"holds {messages} message"):
        subscription.ack([(good, -1), (entry, batch_index)])

    assert not subscription.cursor.is_acked(good)
    assert subscription.backlog == 2


async def test_ack_of_an_already_acknowledged_entry_is_a_no_op(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 2)
    await receive(consumer, 2)
    subscription.ack([(written[0], -1)])

    subscription.ack([(written[0], -1), (written[0], 0)])

    assert subscription.cursor.mark_delete == written[0]
    assert list(consumer.pending) == [written[1]]


async def test_acked_entry_is_not_redelivered(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 3)
    await receive(consumer, 3)
    subscription.ack([(written[1], -1)])

    subscription.redeliver(consumer, None)

    assert positions_of(await receive(consumer, 2)) == [written[0], written[2]]
    await assert_nothing_delivered(consumer)


# ---------------------------------------------------------------- redelivery, seek, backlog


async def test_redeliver_redelivers_exactly_the_given_positions_in_order_before_new_entries(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=5)
    written = await append(ledger, 6)
    assert positions_of(await receive(consumer, 5)) == written[:5]

    subscription.redeliver(consumer, [written[3], written[1]])
    assert list(consumer.pending) == [written[0], written[2], written[4]]
    subscription.flow(consumer, 3)
    got = await receive(consumer, 3)

    assert positions_of(got) == [written[1], written[3], written[5]]
    assert [d.redelivery_count for d in got] == [1, 1, 0]
    await assert_nothing_delivered(consumer)


async def test_redelivery_count_grows_with_each_redelivery(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    (position,) = await append(ledger)
    await receive(consumer, 1)

    counts = []
    for _ in range(3):
        subscription.redeliver(consumer, [position])
        (again,) = await receive(consumer, 1)
        counts.append(again.redelivery_count)

    assert counts == [1, 2, 3]


async def test_redeliver_ignores_positions_the_consumer_does_not_hold(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    holder = join(subscription, Consumer("holder"), permits=1)
    other = join(subscription, Consumer("other"), permits=1)
    written = await append(ledger, 2)
    got_holder = positions_of(await receive(holder, 1))
    positions_of(await receive(other, 1))

    subscription.redeliver(other, [*got_holder, Position(99, 99)])

    assert list(holder.pending) == got_holder
    subscription.flow(holder, 5)
    subscription.flow(other, 5)
    await assert_nothing_delivered(holder, other)
    assert sorted(list(holder.pending) + list(other.pending)) == written


async def test_a_nack_of_an_earlier_delivery_leaves_the_outstanding_one_alone(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    (position,) = await append(ledger)
    await receive(consumer, 1)
    subscription.redeliver(consumer, [position], [0])
    (again,) = await receive(consumer, 1)
    assert again.redelivery_count == 1

    subscription.redeliver(consumer, [position], [0])  # late: names the first copy

    await assert_nothing_delivered(consumer)
    assert consumer.pending == {position: 1}
    subscription.redeliver(consumer, [position], [1])  # the outstanding copy goes back
    (third,) = await receive(consumer, 1)
    assert third.redelivery_count == 2


async def test_a_nack_of_an_entry_queued_for_redelivery_after_an_abort_makes_no_copy(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"))
    (position,) = await append(ledger)
    subscription.flow(consumer, 1)
    await receive(consumer, 1)
    txn = TxnId(1, 1)
    subscription.hold_for_transaction(txn, [(position, -1)])
    subscription.end_transaction_acks(txn, [(position, -1)], commit=False)

    # Queued again by the abort, not held by anyone: a nack of it, named or not, is moot.
    subscription.redeliver(consumer, [position], [0])
    subscription.redeliver(consumer, [position])
    subscription.flow(consumer, 10)

    (again,) = await receive(consumer, 1)
    assert (again.entry.position, again.redelivery_count) == (position, 1)
    subscription.redeliver(consumer, [position], [0])  # and after it went out again
    await assert_nothing_delivered(consumer)
    assert consumer.unacked_messages == subscription.unacked_messages == 1


async def test_a_nack_naming_counts_for_only_some_ids_is_refused(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 2)
    await receive(consumer, 2)

    with pytest.raises(ValueError, match=r"2 message id\(s\) and 1 redelivery count"):
        subscription.redeliver(consumer, written, [0])

    await assert_nothing_delivered(consumer)
    assert sorted(consumer.pending) == written


async def test_a_transactional_ack_that_could_commit_a_second_copy_is_a_conflict(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer = join(subscription, Consumer("c"), permits=10)
    (single,) = await append(ledger)
    (batch,) = await append(ledger, messages=3)
    (other,) = await append(ledger)
    await receive(consumer, 3)
    first, second = TxnId(1, 1), TxnId(1, 2)
    subscription.ack([(other, -1)])

    subscription.hold_for_transaction(first, [(single, 0), (batch, 0)])
    subscription.hold_for_transaction(first, [(batch, 1)])  # another index of the batch
    for txn, ids, complaint in [
        (first, [(single, -1)], "already acknowledged in transaction 1:1"),
        (first, [(batch, 1)], "already acknowledged in transaction 1:1"),
        (first, [(batch, -1)], "already acknowledged in transaction 1:1"),
        (first, [(batch, 2), (batch, 2)], "already acknowledged in transaction 1:1"),
        (second, [(batch, 1)], "acknowledged in open transaction 1:1"),
        (second, [(batch, -1)], "acknowledged in open transaction 1:1"),
        (first, [(other, -1)], "is already acknowledged; abort"),
    ]:
        with pytest.raises(TransactionConflictError, match=complaint):
            subscription.hold_for_transaction(txn, ids)
    assert issubclass(TransactionConflictError, InvalidAckError)

    # Refused whole: index 2 was not held by the refused requests.
    subscription.hold_for_transaction(first, [(batch, 2)])
    subscription.end_transaction_acks(
        first, [(single, 0), (batch, 0), (batch, 1), (batch, 2)], True
    )
    assert subscription.backlog == 0
    with pytest.raises(TransactionConflictError, match="already acknowledged"):
        subscription.hold_for_transaction(second, [(batch, 2)])


async def test_seek_resets_the_cursor_and_clears_pending(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=10)
    written = await append(ledger, 4)
    await receive(consumer, 4)
    subscription.ack([(written[0], -1), (written[2], -1)])

    subscription.seek(ledger.first_position())

    assert subscription.cursor.mark_delete == ledger.first_position()
    assert consumer.pending == {}
    assert consumer.permits == 0
    assert subscription.backlog == 4
    subscription.flow(consumer, 10)
    got = await receive(consumer, 4)
    assert positions_of(got) == written

    subscription.seek(written[1])
    assert subscription.cursor.mark_delete == written[1]
    assert subscription.backlog == 2
    subscription.flow(consumer, 10)
    assert positions_of(await receive(consumer, 2)) == written[2:]


async def test_backlog_counts_unacknowledged_entries(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    assert subscription.backlog == 0
    written = await append(ledger, 5, messages=2)
    assert subscription.backlog == 5

    subscription.ack([(written[3], -1)])
    assert subscription.backlog == 4
    subscription.ack([(written[0], 0)])
    assert subscription.backlog == 4
    subscription.ack([(written[0], 1), (written[1], -1)])
    assert subscription.backlog == 2
    assert subscription.cursor.mark_delete == written[1]


# ---------------------------------------------------------------- wake-ups


async def test_dispatch_loop_wakes_on_append_without_polling(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    passes = 0
    dispatch_once = subscription._dispatch_once

    def counting_dispatch_once() -> bool:
        nonlocal passes
        passes += 1
        return dispatch_once()

    subscription._dispatch_once = counting_dispatch_once
    consumer = join(subscription, Consumer("c"), permits=10)
    await settle()
    idle_passes = passes
    await settle()
    await settle()
    assert passes == idle_passes, "the dispatcher ran passes with nothing to do"

    appending = asyncio.ensure_future(append(ledger))
    got = await receive(consumer, 1)

    assert positions_of(got) == await appending
    assert passes > idle_passes


# ---------------------------------------------------------------- read views


class FakeView:
    """A read view with a settable bound and skip predicate (how READ_COMMITTED plugs in)."""

    def __init__(self, bound: Position, skip: Callable[[Entry], bool] = lambda entry: False):
        self.bound_position = bound
        self.skip = skip

    def bound(self) -> Position:
        return self.bound_position

    def should_skip(self, entry: Entry) -> bool:
        return entry.header.is_marker or self.skip(entry)


async def test_markers_are_never_delivered_and_are_acked_by_the_subscription(ledger, subscriptions):
    subscription = subscriptions(EXCLUSIVE)
    consumer = join(subscription, Consumer("c"), permits=10)
    txn = TxnId(1, 1)
    data = [(await append(ledger, txn=txn))[0]]
    commit = await append_marker(ledger, EntryType.TXN_COMMIT, txn)
    data += await append(ledger)
    abort = await append_marker(ledger, EntryType.TXN_ABORT, TxnId(1, 2))
    data += await append(ledger)

    got = await receive(consumer, 3)
    await assert_nothing_delivered(consumer)

    assert positions_of(got) == data
    assert subscription.cursor.is_acked(commit)
    assert subscription.cursor.is_acked(abort)
    assert subscription.skipped_entries == 2
    assert consumer.permits == 7
    subscription.ack([(p, -1) for p in data])
    assert subscription.cursor.mark_delete == data[-1]
    assert subscription.backlog == 0


async def test_entries_past_the_bound_wait_until_the_bound_moves_and_wake_is_called(
    ledger, subscriptions
):
    view = FakeView(EARLIEST)
    subscription = subscriptions(EXCLUSIVE, RC, view=view)
    consumer = join(subscription, Consumer("c"), level=RC)
    subscription.flow(consumer, 10)
    written = await append(ledger, 4)
    await assert_nothing_delivered(consumer)

    view.bound_position = written[1]
    await assert_nothing_delivered(consumer)  # no polling: the bound moved silently
    subscription.wake()
    assert positions_of(await receive(consumer, 2)) == written[:2]
    await assert_nothing_delivered(consumer)

    view.bound_position = written[3]
    subscription.wake()
    assert positions_of(await receive(consumer, 2)) == written[2:]


async def test_skipped_entries_are_acked_by_the_subscription_and_never_delivered(
    ledger, subscriptions
):
    skipped: set[Position] = set()
    view = FakeView(EARLIEST, skip=lambda entry: entry.position in skipped)
    subscription = subscriptions(SHARED, RC, view=view)
    consumer = join(subscription, Consumer("c"), level=RC)
    subscription.flow(consumer, 2)
    written = await append(ledger, 5)
    skipped.update([written[0], written[2], written[3]])

    view.bound_position = written[-1]
    subscription.wake()
    got = await receive(consumer, 2)
    await assert_nothing_delivered(consumer)

    assert positions_of(got) == [written[1], written[4]]
    assert consumer.permits == 0  # skipped entries use no permits
    assert subscription.skipped_entries == 3
    assert subscription.cursor.mark_delete == written[0]
    subscription.ack([(written[1], -1)])
    assert subscription.cursor.mark_delete == written[3]
    assert subscription.backlog == 1


async def test_read_committed_view_hides_open_transactions_and_skips_aborted_ones(
    ledger, subscriptions
):
    """The stable position stops before the oldest open transaction; aborts are skipped."""
    aborted: set[TxnId] = set()
    view = FakeView(EARLIEST, skip=lambda entry: entry.header.txn_id in aborted)
    subscription = subscriptions(SHARED, RC, view=view)
    consumer = join(subscription, Consumer("c"), level=RC)
    subscription.flow(consumer, 100)
    t1, t2 = TxnId(1, 1), TxnId(1, 2)

    plain_a = (await append(ledger))[0]
    view.bound_position = plain_a
    subscription.wake()
    t1_entry = (await append(ledger, txn=t1, messages=2))[0]  # t1 open: the bound stays
    plain_b = (await append(ledger))[0]
    t2_entry = (await append(ledger, txn=t2))[0]
    assert positions_of(await receive(consumer, 1)) == [plain_a]

    abort_t2 = await append_marker(ledger, EntryType.TXN_ABORT, t2)
    aborted.add(t2)
    subscription.wake()
    await assert_nothing_delivered(consumer)  # t1 still open

    commit_t1 = await append_marker(ledger, EntryType.TXN_COMMIT, t1)
    view.bound_position = commit_t1
    subscription.wake()
    got = await receive(consumer, 2)
    await assert_nothing_delivered(consumer)

    assert positions_of(got) == [t1_entry, plain_b]
    assert all(subscription.cursor.is_acked(p) for p in (t2_entry, abort_t2, commit_t1))
    subscription.ack([(plain_a, -1), (t1_entry, 0), (t1_entry, 1), (plain_b, -1)])
    assert subscription.cursor.mark_delete == commit_t1
    assert subscription.backlog == 0


@pytest.mark.parametrize("cumulative", [False, True])
async def test_acknowledged_entry_forgets_its_redelivery_count(ledger, subscriptions, cumulative):
    # Counts of acknowledged entries are dropped (bounded memory), whichever way they were acked.
    subscription = subscriptions(FAILOVER)
    consumer = join(subscription, Consumer("c"), permits=10)
    assert await next_item(consumer) == ControlEvent("active", True)
    (position,) = await append(ledger)
    await receive(consumer, 1)
    for _ in range(2):
        subscription.redeliver(consumer, None)
        await receive(consumer, 1)

    if cumulative:
        subscription.ack_cumulative(position, -1)
    else:
        subscription.ack([(position, -1)])
    subscription.seek(ledger.first_position())
    subscription.flow(consumer, 10)
    assert (await receive(consumer, 1))[0].redelivery_count == 0
    subscription.redeliver(consumer, None)

    assert (await receive(consumer, 1))[0].redelivery_count == 1
