"""Unacked-message limits and the consumer limit of a subscription (dispatcher/limits.py)."""

from __future__ import annotations

import pytest

from dispatcher import (
    Consumer,
    DispatchLimits,
    Subscription,
    SubscriptionType,
    TooManyConsumersError,
)
from tests.dispatcher.test_subscription import (
    EXCLUSIVE,
    SHARED,
    append,
    assert_nothing_delivered,
    join,
    positions_of,
    receive,
)


@pytest.fixture
def limited(subscriptions):
    """`limited(limits, type)`: a subscription with these limits, woken by appends."""

    def open_(limits: DispatchLimits, type_: SubscriptionType = EXCLUSIVE) -> Subscription:
        return subscriptions(type_, limits=limits)

    return open_


async def test_consumer_at_its_unacked_limit_gets_nothing_until_acks_halve_its_count(
    ledger, limited
):
    subscription = limited(DispatchLimits(max_unacked_per_consumer=4))
    consumer = join(subscription, Consumer("c"), permits=100)
    written = await append(ledger, 10)

    first = positions_of(await receive(consumer, 4))
    assert first == written[:4]
    assert consumer.blocked and consumer.unacked_messages == 4
    await assert_nothing_delivered(consumer)

    subscription.ack([(written[0], -1)])  # 3 unacked: above half of 4, still blocked
    await assert_nothing_delivered(consumer)
    assert consumer.blocked

    subscription.ack([(written[1], -1)])  # 2 unacked: half, dispatch resumes
    assert not consumer.blocked
    assert positions_of(await receive(consumer, 2)) == written[4:6]
    assert consumer.blocked
    assert consumer.permits == 100 - 6


async def test_subscription_at_its_unacked_limit_stops_every_consumer(ledger, limited):
    subscription = limited(
        DispatchLimits(max_unacked_per_consumer=100, max_unacked_per_subscription=4), SHARED
    )
    one = join(subscription, Consumer("one"), permits=100)
    two = join(subscription, Consumer("two"), permits=100)
    written = await append(ledger, 10)

    got_one = positions_of(await receive(one, 2))
    got_two = positions_of(await receive(two, 2))
    assert sorted(got_one + got_two) == written[:4]
    assert subscription.blocked and subscription.unacked_messages == 4
    assert not one.blocked and not two.blocked
    await assert_nothing_delivered(one, two)

    subscription.ack([(p, -1) for p in got_one])
    assert not subscription.blocked  # 2 unacked: half of 4
    # Round robin goes on: one entry each brings the subscription back to its limit.
    resumed = positions_of(await receive(one, 1)) + positions_of(await receive(two, 1))
    assert sorted(resumed) == written[4:6]
    assert subscription.blocked
    await assert_nothing_delivered(one, two)


async def test_an_entry_is_counted_with_all_its_messages_and_may_cross_the_limit(ledger, limited):
    subscription = limited(DispatchLimits(max_unacked_per_consumer=5))
    consumer = join(subscription, Consumer("c"), permits=100)
    batches = await append(ledger, 2, messages=3)

    assert positions_of(await receive(consumer, 2)) == batches
    assert consumer.unacked_messages == 6 and consumer.blocked
    subscription.ack([(batches[0], 0), (batches[0], 1)])  # part of a batch: still held whole
    assert consumer.unacked_messages == 6 and consumer.blocked
    subscription.ack([(batches[0], 2)])
    assert consumer.unacked_messages == 3 and consumer.blocked  # above half of 5
    subscription.ack([(batches[1], -1)])
    assert consumer.unacked_messages == 0 and not consumer.blocked


async def test_redelivery_request_releases_the_count_and_unblocks(ledger, limited):
    subscription = limited(DispatchLimits(max_unacked_per_consumer=2))
    consumer = join(subscription, Consumer("c"), permits=100)
    written = await append(ledger, 3)

    assert positions_of(await receive(consumer, 2)) == written[:2]
    assert consumer.blocked
    subscription.redeliver(consumer, None)
    assert not consumer.blocked
    # Redeliveries first, then the rest, up to the limit again.
    assert positions_of(await receive(consumer, 2)) == written[:2]
    assert consumer.blocked


async def test_closing_a_blocked_consumer_returns_its_entries_to_the_others(ledger, limited):
    subscription = limited(
        DispatchLimits(max_unacked_per_consumer=2, max_unacked_per_subscription=3), SHARED
    )
    one = join(subscription, Consumer("one"), permits=100)
    written = await append(ledger, 3)
    assert positions_of(await receive(one, 2)) == written[:2]
    assert one.blocked

    two = join(subscription, Consumer("two"), permits=100)
    assert positions_of(await receive(two, 1)) == written[2:]
    assert subscription.blocked and subscription.unacked_messages == 3

    subscription.remove_consumer(one)
    assert subscription.unacked_messages == 1 and not subscription.blocked
    assert positions_of(await receive(two, 1)) == written[:1]
    assert two.blocked


async def test_one_consumer_past_max_consumers_is_refused_and_changes_nothing(ledger, limited):
    subscription = limited(DispatchLimits(max_consumers=2), SHARED)
    join(subscription, Consumer("one"))
    join(subscription, Consumer("two"))
    with pytest.raises(TooManyConsumersError, match="max_consumers_per_subscription"):
        join(subscription, Consumer("three"))
    assert [c.name for c in subscription.consumers] == ["one", "two"]
    subscription.remove_consumer(subscription.consumers[0])
    join(subscription, Consumer("three"))
    assert [c.name for c in subscription.consumers] == ["two", "three"]


def test_limits_below_one_are_refused():
    with pytest.raises(ValueError, match="max_consumers"):
        DispatchLimits(max_consumers=0)
