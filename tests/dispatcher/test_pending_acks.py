"""Transactional acks of batch indexes (dispatcher/pending_acks.py) through a
Subscription over a real managed ledger: what a commit marks, what an abort gives
back, and that no message is outstanding twice."""

from __future__ import annotations

import pytest

from dispatcher import Consumer, Subscription, TransactionConflictError
from managed_ledger import Position, TxnId
from tests.dispatcher.test_subscription import (
    EXCLUSIVE,
    KEY_SHARED,
    SHARED,
    append,
    assert_nothing_delivered,
    join,
    receive,
)

A, B = TxnId(1, 1), TxnId(1, 2)
N = 6
HALF = list(range(N // 2))
REST = list(range(N // 2, N))


def ids(position: Position, indexes: list[int]) -> list[tuple[Position, int]]:
    return [(position, index) for index in indexes]


async def one_batch_received(ledger, subscription: Subscription) -> tuple[Consumer, Position]:
    consumer = join(subscription, Consumer("c"), permits=N)
    (position,) = await append(ledger, messages=N)
    (delivery,) = await receive(consumer, 1)
    assert delivery.entry.position == position
    return consumer, position


@pytest.mark.parametrize("type_", [SHARED, KEY_SHARED, EXCLUSIVE])
async def test_an_abort_gives_back_only_the_indexes_its_transaction_acknowledged(
    ledger, subscriptions, type_
):
    subscription = subscriptions(type_)
    consumer, position = await one_batch_received(ledger, subscription)

    subscription.hold_for_transaction(A, ids(position, HALF))
    assert consumer.pending == {position: N}, "the consumer still holds the rest"
    subscription.ack(ids(position, REST))
    assert consumer.pending == {}
    assert not subscription.cursor.is_acked(position)
    subscription.end_transaction_acks(A, ids(position, HALF), commit=False)
    subscription.flow(consumer, N)

    (again,) = await receive(consumer, 1)
    assert again.entry.position == position
    assert again.acked_batch_indexes == tuple(REST)
    subscription.ack(ids(position, HALF))
    assert subscription.cursor.is_acked(position)
    assert subscription.backlog == 0
    await assert_nothing_delivered(consumer)


async def test_an_abort_waits_until_the_consumer_holding_the_rest_lets_go(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    holder, position = await one_batch_received(ledger, subscription)
    other = join(subscription, Consumer("other"), permits=N)

    subscription.hold_for_transaction(A, ids(position, HALF))
    subscription.end_transaction_acks(A, ids(position, HALF), commit=False)
    # The holder's delivery still has the rest: nothing goes out beside it.
    await assert_nothing_delivered(holder, other)
    assert holder.pending == {position: N}

    subscription.ack(ids(position, REST))
    (again,) = await receive(other, 1)
    assert (again.entry.position, again.acked_batch_indexes) == (position, tuple(REST))
    assert holder.pending == {} and other.pending == {position: N}


async def test_a_consumer_leaving_hands_back_only_what_no_transaction_holds(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    holder, position = await one_batch_received(ledger, subscription)
    other = join(subscription, Consumer("other"), permits=N)
    subscription.hold_for_transaction(A, ids(position, HALF))

    subscription.remove_consumer(holder)
    (again,) = await receive(other, 1)
    assert again.acked_batch_indexes == tuple(HALF)

    subscription.ack(ids(position, REST))
    subscription.end_transaction_acks(A, ids(position, HALF), commit=True)
    assert subscription.cursor.is_acked(position)
    await assert_nothing_delivered(other)


async def test_two_transactions_acking_disjoint_indexes_both_commit(ledger, subscriptions):
    subscription = subscriptions(SHARED)
    consumer, position = await one_batch_received(ledger, subscription)

    subscription.hold_for_transaction(A, ids(position, HALF))
    subscription.hold_for_transaction(B, ids(position, REST))
    assert consumer.pending == {}, "every message is held: the delivery ended"
    with pytest.raises(TransactionConflictError, match=f"open transaction {A}"):
        subscription.hold_for_transaction(B, ids(position, HALF[:1]))

    subscription.end_transaction_acks(A, ids(position, HALF), commit=True)
    assert not subscription.cursor.is_acked(position), "B's indexes are not acked yet"
    assert subscription._partial_acks[position] == set(HALF)
    subscription.end_transaction_acks(B, ids(position, REST), commit=True)
    assert subscription.cursor.is_acked(position)
    await assert_nothing_delivered(consumer)


async def test_a_commit_marks_only_its_indexes_and_the_entry_waits_for_the_rest(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer, position = await one_batch_received(ledger, subscription)

    subscription.hold_for_transaction(A, ids(position, HALF))
    subscription.end_transaction_acks(A, ids(position, HALF), commit=True)
    assert not subscription.cursor.is_acked(position)
    assert consumer.pending == {position: N}
    subscription.ack(ids(position, REST[:-1]))
    assert not subscription.cursor.is_acked(position)
    subscription.ack(ids(position, REST[-1:]))
    assert subscription.cursor.is_acked(position)


async def test_one_transaction_aborting_leaves_another_transactions_indexes_held(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    consumer, position = await one_batch_received(ledger, subscription)
    subscription.hold_for_transaction(A, ids(position, HALF))
    subscription.hold_for_transaction(B, ids(position, REST))
    subscription.flow(consumer, N)

    subscription.end_transaction_acks(A, ids(position, HALF), commit=False)
    (again,) = await receive(consumer, 1)
    assert again.acked_batch_indexes == tuple(REST), "B's indexes are not delivered again"
    subscription.end_transaction_acks(B, ids(position, REST), commit=False)
    await assert_nothing_delivered(consumer)  # outstanding: B's come after this delivery
    subscription.ack(ids(position, HALF))
    (third,) = await receive(consumer, 1)
    assert third.acked_batch_indexes == tuple(HALF)


async def test_a_reloaded_subscription_holds_again_what_open_transactions_acknowledged(
    ledger, subscriptions
):
    subscription = subscriptions(SHARED)
    _consumer, position = await one_batch_received(ledger, subscription)
    subscription.ack(ids(position, [HALF[0]]))
    await subscription.close()
    reloaded = Subscription(ledger.name, subscription.cursor, lambda _level: subscription.view)
    ledger.add_listener(reloaded.wake)
    try:
        # Index HALF[0] was acked plainly since: left out, not refused.
        reloaded.restore_transaction_acks(A, ids(position, HALF))
        consumer = join(reloaded, Consumer("again"), permits=N)
        (again,) = await receive(consumer, 1)
        assert again.acked_batch_indexes == tuple(HALF)
        reloaded.end_transaction_acks(A, ids(position, HALF), commit=False)
        reloaded.ack(ids(position, REST))
        (third,) = await receive(consumer, 1)
        assert third.acked_batch_indexes == (HALF[0], *REST)
    finally:
        ledger.remove_listener(reloaded.wake)
        await reloaded.close()


async def test_a_cumulative_ack_past_an_entry_forgets_what_an_abort_gave_back_of_it(
    ledger, subscriptions
):
    subscription = subscriptions(EXCLUSIVE)
    _consumer, position = await one_batch_received(ledger, subscription)
    subscription.hold_for_transaction(A, ids(position, HALF))
    subscription.end_transaction_acks(A, ids(position, HALF), commit=False)
    assert subscription._pending_acks.returned(position) == set(HALF)

    subscription.ack_cumulative(position, -1)
    assert subscription.cursor.is_acked(position)
    # Nothing of the entry is pending any more: no record is left behind for it.
    assert position not in subscription._pending_acks.entries
