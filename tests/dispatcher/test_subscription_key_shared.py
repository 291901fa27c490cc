"""Key_Shared dispatch against a real managed ledger: per-key order and draining hashes.

Every test holds entries unacknowledged across a join or a leave, the case where a
round-robin or a plain hash dispatch would reorder a key.
"""

from __future__ import annotations

import asyncio

import pytest

from dispatcher import (
    Consumer,
    ConsumerAssignError,
    Delivery,
    DispatchLimits,
    HashRange,
    IsolationLevel,
    KeySharedMode,
    KeySharedPolicy,
    Subscription,
    SubscriptionType,
    key_hash,
    sticky_hash,
)
from managed_ledger import EntryHeader, ManagedLedger, Position

KEY_SHARED = SubscriptionType.KEY_SHARED
RU = IsolationLevel.READ_UNCOMMITTED
DEADLINE_S = 5.0
SETTLE_TURNS = 10
KEYS = [f"key-{i}" for i in range(400)]


async def append_keys(ledger: ManagedLedger, keys: list[str | None]) -> list[Position]:
    positions = []
    for key in keys:
        header = EntryHeader(key_hash=None if key is None else key_hash(key))
        positions.append(await ledger.append(header, (key or "").encode()))
    return positions


def hash_of(key: str | None) -> int:
    return sticky_hash(None if key is None else key_hash(key))


def owner(subscription: Subscription, key: str | None) -> Consumer | None:
    wanted = hash_of(key)
    for consumer, ranges in subscription.hash_ranges().items():
        if any(r.start <= wanted <= r.end for r in ranges):
            return consumer
    return None


def keys_of(subscription: Subscription, consumer: Consumer, count: int) -> list[str]:
    found = [key for key in KEYS if owner(subscription, key) is consumer][:count]
    assert len(found) == count, f"{consumer.name} owns fewer than {count} of the test keys"
    return found


def join(subscription: Subscription, consumer: Consumer, permits: int = 0) -> Consumer:
    subscription.add_consumer(consumer, KEY_SHARED, RU)
    if permits:
        subscription.flow(consumer, permits)
    return consumer


async def receive(consumer: Consumer, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    while len(got) < count:
        item = await asyncio.wait_for(consumer.outbox.get(), DEADLINE_S)
        assert isinstance(item, list), f"expected deliveries, got {item!r}"
        got.extend(item)
    assert len(got) == count, f"expected {count} deliveries, got {len(got)}"
    return got


async def assert_nothing_delivered(*consumers: Consumer) -> None:
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)
    for consumer in consumers:
        assert consumer.outbox.empty(), f"{consumer.name} got {consumer.outbox.get_nowait()!r}"


def positions_of(deliveries: list[Delivery]) -> list[Position]:
    return [delivery.entry.position for delivery in deliveries]


def key_of(delivery: Delivery) -> str:
    return delivery.entry.payload.decode()


# ---------------------------------------------------------------- ownership and order


async def test_each_key_reaches_only_its_owner_in_log_order(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    consumers = [join(subscription, Consumer(f"c{i}"), permits=1000) for i in range(3)]
    keys = [KEYS[i % 30] for i in range(300)]
    written = await append_keys(ledger, keys)

    got = {c: await receive(c, sum(owner(subscription, k) is c for k in keys)) for c in consumers}

    assert sorted(p for d in got.values() for p in positions_of(d)) == written
    for consumer, deliveries in got.items():
        assert positions_of(deliveries) == sorted(positions_of(deliveries))
        assert all(owner(subscription, key_of(d)) is consumer for d in deliveries)
    assert all(got.values()), "every consumer owns some of 30 keys"


async def test_entries_without_a_key_all_go_to_the_owner_of_the_no_key_hash(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    consumers = [join(subscription, Consumer(f"c{i}"), permits=100) for i in range(3)]
    written = await append_keys(ledger, [None] * 10)
    keyless_owner = owner(subscription, None)

    assert positions_of(await receive(keyless_owner, 10)) == written
    await assert_nothing_delivered(*(c for c in consumers if c is not keyless_owner))


# ---------------------------------------------------------------- draining hashes


async def test_a_moved_hash_waits_until_the_old_owner_acknowledges_what_it_holds(
    ledger, subscriptions
):
    subscription = subscriptions(KEY_SHARED)
    first = join(subscription, Consumer("first"), permits=1000)
    held = await append_keys(ledger, KEYS[:100])
    await receive(first, 100)  # held, not acknowledged
    second = join(subscription, Consumer("second"), permits=1000)
    moved = keys_of(subscription, second, 3)
    assert len(subscription.draining_hashes()) >= 3

    later = await append_keys(ledger, moved)
    await assert_nothing_delivered(second)
    assert subscription.looked_ahead_entries == 3

    subscription.ack([(p, -1) for p in held])

    assert positions_of(await receive(second, 3)) == later
    assert subscription.draining_hashes() == []
    assert subscription.looked_ahead_entries == 0


async def test_other_keys_go_on_while_a_hash_drains(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    first = join(subscription, Consumer("first"), permits=1000)
    second = join(subscription, Consumer("second"), permits=1000)
    [moving] = keys_of(subscription, second, 1)
    subscription.remove_consumer(second)
    held = await append_keys(ledger, [moving])
    await receive(first, 1)
    second = join(subscription, Consumer("second"), permits=1000)
    assert owner(subscription, moving) is second
    free = [k for k in keys_of(subscription, second, 4) if k != moving][:3]

    blocked, *flowing = await append_keys(ledger, [moving, *free])

    assert positions_of(await receive(second, 3)) == flowing
    [draining] = subscription.draining_hashes()
    assert (draining.hash, draining.consumer, draining.entries) == (hash_of(moving), first, 1)
    subscription.ack([(held[0], -1)])
    assert positions_of(await receive(second, 1)) == [blocked]


async def test_a_consumer_closing_with_unacked_entries_hands_its_keys_over_in_order(
    ledger, subscriptions
):
    subscription = subscriptions(KEY_SHARED)
    leaving = join(subscription, Consumer("leaving"), permits=1000)
    staying = join(subscription, Consumer("staying"), permits=1000)
    keys = keys_of(subscription, leaving, 2)
    written = await append_keys(ledger, keys * 3)
    await receive(leaving, 6)

    subscription.remove_consumer(leaving)
    more = await append_keys(ledger, keys)

    got = await receive(staying, 8)
    assert positions_of(got) == written + more
    assert [d.redelivery_count for d in got] == [1] * 6 + [0] * 2


async def test_nacked_entries_of_a_draining_hash_reach_the_new_owner_before_later_ones(
    ledger, subscriptions
):
    subscription = subscriptions(KEY_SHARED)
    first = join(subscription, Consumer("first"), permits=1000)
    held = await append_keys(ledger, KEYS[:60])
    await receive(first, 60)
    second = join(subscription, Consumer("second"), permits=1000)
    [key] = keys_of(subscription, second, 1)
    earlier = [p for p, k in zip(held, KEYS[:60], strict=True) if k == key]
    later = await append_keys(ledger, [key, key])
    await assert_nothing_delivered(second)

    subscription.redeliver(first, None)  # everything it holds comes back

    moved = sum(owner(subscription, k) is second for k in KEYS[:60])
    got = [d for d in await receive(second, moved + 2) if key_of(d) == key]
    assert positions_of(got) == earlier + later
    assert [d.redelivery_count for d in got] == [1] * len(earlier) + [0, 0]


async def test_a_hash_whose_owner_has_no_permits_does_not_stall_other_keys(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    hungry = join(subscription, Consumer("hungry"), permits=1000)
    starved = join(subscription, Consumer("starved"))
    starved_keys = keys_of(subscription, starved, 2)
    hungry_keys = keys_of(subscription, hungry, 2)

    waiting = await append_keys(ledger, starved_keys)
    flowing = await append_keys(ledger, hungry_keys)

    assert positions_of(await receive(hungry, 2)) == flowing
    subscription.flow(starved, 10)
    assert positions_of(await receive(starved, 2)) == waiting


@pytest.mark.parametrize("limit", [3])
async def test_entries_kept_aside_are_bounded_by_the_look_ahead_limit(ledger, subscriptions, limit):
    subscription = subscriptions(KEY_SHARED, limits=DispatchLimits(max_key_shared_look_ahead=limit))
    hungry = join(subscription, Consumer("hungry"), permits=1000)
    starved = join(subscription, Consumer("starved"))
    [starved_key] = keys_of(subscription, starved, 1)
    [hungry_key] = keys_of(subscription, hungry, 1)

    kept = await append_keys(ledger, [starved_key] * (limit + 2))
    behind = await append_keys(ledger, [hungry_key])

    await assert_nothing_delivered(hungry)
    assert subscription.looked_ahead_entries == limit
    subscription.flow(starved, 100)
    assert positions_of(await receive(starved, limit + 2)) == kept
    assert positions_of(await receive(hungry, 1)) == behind


# ---------------------------------------------------------------- STICKY


def sticky(name: str, *ranges: tuple[int, int]) -> Consumer:
    policy = KeySharedPolicy(KeySharedMode.STICKY, tuple(HashRange(*r) for r in ranges))
    return Consumer(name, key_shared=policy)


async def test_sticky_consumers_get_only_the_hashes_of_their_ranges(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    low = join(subscription, sticky("low", (0, 32767)), permits=1000)
    high = join(subscription, sticky("high", (32768, 65535)), permits=1000)
    keys = KEYS[:50]
    await append_keys(ledger, keys)
    low_count = sum(hash_of(k) <= 32767 for k in keys)

    assert all(hash_of(key_of(d)) <= 32767 for d in await receive(low, low_count))
    assert all(hash_of(key_of(d)) > 32767 for d in await receive(high, 50 - low_count))
    assert subscription.hash_ranges() == {
        low: [HashRange(0, 32767)],
        high: [HashRange(32768, 65535)],
    }


async def test_an_overlapping_sticky_consumer_is_refused_and_changes_nothing(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    first = join(subscription, sticky("first", (0, 1000)))

    with pytest.raises(ConsumerAssignError, match="overlaps"):
        join(subscription, sticky("second", (900, 2000)))

    assert subscription.consumers == [first]
    assert list(subscription.hash_ranges()) == [first]


async def test_a_consumer_of_the_other_mode_is_refused(ledger, subscriptions):
    subscription = subscriptions(KEY_SHARED)
    join(subscription, Consumer("auto"))
    with pytest.raises(ConsumerAssignError, match="AUTO_SPLIT consumers"):
        join(subscription, sticky("sticky", (0, 10)))
    subscription.remove_consumer(subscription.consumers[0])
    join(subscription, sticky("sticky", (0, 10)))
    assert subscription.key_shared_mode is KeySharedMode.STICKY
