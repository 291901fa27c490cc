"""Key_Shared hash ownership: the AUTO_SPLIT ring, STICKY ranges, policies, key hashes."""

from __future__ import annotations

import pytest

from dispatcher import (
    HASH_RANGE_SIZE,
    ConsumerAssignError,
    HashRange,
    KeySharedMode,
    KeySharedPolicy,
    key_hash,
    sticky_hash,
)
from dispatcher.consumer import Consumer
from dispatcher.key_hash import NO_KEY_HASH, murmur3_32
from dispatcher.key_shared import ConsistentHashSelector, StickyRangeSelector

STICKY = KeySharedMode.STICKY


def sticky(name: str, *ranges: tuple[int, int]) -> Consumer:
    return Consumer(name, key_shared=KeySharedPolicy(STICKY, tuple(HashRange(*r) for r in ranges)))


def owners(selector) -> list:
    return [selector.select(h) for h in range(HASH_RANGE_SIZE)]


# ---------------------------------------------------------------- hashes


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"hello", 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0x2E4FF723),
    ],
)
def test_murmur3_matches_the_reference_vectors(data, expected):
    assert murmur3_32(data) == expected


def test_entries_without_a_key_share_the_hash_of_none_key():
    assert sticky_hash(None) == NO_KEY_HASH == key_hash("NONE_KEY") % HASH_RANGE_SIZE
    assert sticky_hash(key_hash("k")) == key_hash("k") % HASH_RANGE_SIZE


# ---------------------------------------------------------------- AUTO_SPLIT


def test_ring_ranges_cover_every_hash_once_and_agree_with_select():
    selector = ConsistentHashSelector()
    consumers = [Consumer(f"c{i}") for i in range(3)]
    for consumer in consumers:
        selector.add(consumer)
    by_hash = owners(selector)
    covered = 0
    for consumer, ranges in selector.ranges().items():
        for range_ in ranges:
            covered += range_.end - range_.start + 1
            assert all(by_hash[h] is consumer for h in range(range_.start, range_.end + 1))
    assert covered == HASH_RANGE_SIZE
    assert {id(c) for c in by_hash} == {id(c) for c in consumers}


def test_a_joining_consumer_takes_hashes_only_for_itself_and_gives_them_back_on_leaving():
    selector = ConsistentHashSelector()
    first, second = Consumer("a"), Consumer("b")
    selector.add(first)
    selector.add(second)
    before = owners(selector)
    joining = Consumer("c")
    selector.add(joining)
    during = owners(selector)
    moved = [h for h in range(HASH_RANGE_SIZE) if during[h] is not before[h]]
    assert moved and all(during[h] is joining for h in moved)
    selector.remove(joining)
    assert owners(selector) == before


def test_a_consumer_reconnecting_under_its_name_gets_its_hashes_back():
    first = ConsistentHashSelector()
    second = ConsistentHashSelector()
    for selector in (first, second):
        selector.add(Consumer("x"))
        selector.add(Consumer("y"))
    assert [c.name for c in owners(first)] == [c.name for c in owners(second)]


def test_consumers_of_one_name_each_get_hashes():
    selector = ConsistentHashSelector()
    twins = [Consumer("same"), Consumer("same")]
    for consumer in twins:
        selector.add(consumer)
    assert all(selector.ranges()[consumer] for consumer in twins)


def test_empty_ring_has_no_owner():
    assert ConsistentHashSelector().select(5) is None


# ---------------------------------------------------------------- STICKY


def test_sticky_ranges_are_honoured_and_gaps_have_no_owner():
    selector = StickyRangeSelector()
    low, high = sticky("low", (0, 99), (200, 299)), sticky("high", (300, 65535))
    selector.add(low)
    selector.add(high)
    assert selector.select(0) is low and selector.select(250) is low
    assert selector.select(150) is None
    assert selector.select(300) is high and selector.select(65535) is high
    assert selector.ranges()[low] == [HashRange(0, 99), HashRange(200, 299)]


def test_overlapping_sticky_ranges_are_refused_and_change_nothing():
    selector = StickyRangeSelector()
    first = sticky("first", (0, 1000))
    selector.add(first)
    with pytest.raises(ConsumerAssignError, match=r"\[500, 2000\].*overlaps.*\[0, 1000\]"):
        selector.add(sticky("second", (500, 2000)))
    assert list(selector.ranges()) == [first]
    assert selector.select(1500) is None


@pytest.mark.parametrize(
    ("mode", "ranges", "message"),
    [
        (STICKY, (), "at least one hash range"),
        (KeySharedMode.AUTO_SPLIT, ((0, 1),), "for STICKY"),
        (STICKY, ((0, 10), (10, 20)), "overlap"),
    ],
)
def test_bad_policies_are_refused(mode, ranges, message):
    with pytest.raises(ValueError, match=message):
        KeySharedPolicy(mode, tuple(HashRange(*r) for r in ranges))


@pytest.mark.parametrize(("start", "end"), [(-1, 5), (5, 4), (0, 65536)])
def test_ranges_outside_the_hash_space_are_refused(start, end):
    with pytest.raises(ValueError, match="invalid"):
        HashRange(start, end)
