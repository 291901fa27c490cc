"""The entry cache: bounded, oldest-first eviction, counts hits and misses."""

from __future__ import annotations

from managed_ledger import Entry, EntryHeader, Position
from managed_ledger.cache import ENTRY_OVERHEAD_BYTES, EntryCache


def _entry(ledger_id: int, entry_id: int, size: int = 100) -> Entry:
    return Entry(Position(ledger_id, entry_id), EntryHeader(), b"x" * size)


def _cost(size: int) -> int:
    return size + ENTRY_OVERHEAD_BYTES


def test_get_returns_what_was_put_and_counts_hits_and_misses():
    cache = EntryCache(10 * _cost(100))
    entry = _entry(0, 0)
    cache.put(entry)
    assert cache.get(0, 0) is entry
    assert cache.get(0, 1) is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_oldest_entries_are_evicted_first_past_the_bound():
    cache = EntryCache(3 * _cost(100))
    for entry_id in range(5):
        cache.put(_entry(0, entry_id))
    assert [cache.get(0, i) is not None for i in range(5)] == [False, False, True, True, True]
    assert cache.size_bytes == 3 * _cost(100)


def test_size_never_exceeds_the_bound():
    cache = EntryCache(1000)
    for entry_id, size in enumerate([10, 500, 300, 0, 700, 1, 0, 0, 200]):
        cache.put(_entry(0, entry_id, size))
        assert cache.size_bytes <= 1000


def test_entry_larger_than_the_cache_is_not_cached_and_evicts_nothing():
    cache = EntryCache(_cost(100))
    cache.put(_entry(0, 0))
    cache.put(_entry(0, 1, size=101))
    assert cache.get(0, 1) is None
    assert cache.get(0, 0) is not None


def test_zero_size_cache_holds_nothing_not_even_empty_entries():
    cache = EntryCache(0)
    for entry_id in range(100):
        cache.put(_entry(0, entry_id, size=0))
    assert len(cache) == 0
    assert cache.size_bytes == 0


def test_empty_payload_entries_are_bounded_too():
    cache = EntryCache(10 * ENTRY_OVERHEAD_BYTES)
    for entry_id in range(1000):
        cache.put(_entry(0, entry_id, size=0))
    assert len(cache) == 10


def test_putting_the_same_position_twice_is_charged_once():
    cache = EntryCache(10 * _cost(100))
    cache.put(_entry(0, 0))
    cache.put(_entry(0, 0))
    assert (len(cache), cache.size_bytes) == (1, _cost(100))


def test_drop_ledger_removes_only_that_ledger_and_its_bytes():
    cache = EntryCache(100 * _cost(100))
    for ledger_id in range(3):
        for entry_id in range(4):
            cache.put(_entry(ledger_id, entry_id))
    cache.drop_ledger(1)
    assert len(cache) == 8
    assert cache.size_bytes == 8 * _cost(100)
    assert cache.get(1, 0) is None
    assert cache.get(0, 3) is not None and cache.get(2, 0) is not None


def test_clear_empties_the_cache():
    cache = EntryCache(10 * _cost(100))
    cache.put(_entry(0, 0))
    cache.clear()
    assert (len(cache), cache.size_bytes) == (0, 0)


def test_entries_read_back_from_disk_are_served_from_the_cache():
    cache = EntryCache(8 * _cost(100))
    entry = _entry(0, 0)
    cache.put_read(entry)
    assert cache.get(0, 0) is entry
    assert cache.read_back_bytes == cache.size_bytes == _cost(100)


def test_read_back_entries_take_at_most_their_share_and_evict_their_oldest():
    cache = EntryCache(8 * _cost(100))  # a quarter: two entries
    for entry_id in range(5):
        cache.put_read(_entry(0, entry_id))
        assert cache.read_back_bytes <= cache.read_back_max_bytes
    assert [cache.get(0, i) is not None for i in range(5)] == [False, False, False, True, True]


def test_a_reader_catching_up_evicts_at_most_its_share_of_the_appended_tail():
    cache = EntryCache(8 * _cost(100))
    for entry_id in range(8):
        cache.put(_entry(1, entry_id))
    for entry_id in range(100):
        cache.put_read(_entry(0, entry_id))
    tail = [cache.get(1, i) is not None for i in range(8)]
    assert tail == [False, False, True, True, True, True, True, True]
    assert cache.size_bytes <= cache.max_bytes


def test_appends_evict_appended_entries_before_read_back_ones():
    cache = EntryCache(8 * _cost(100))
    cache.put_read(_entry(0, 0))
    for entry_id in range(20):
        cache.put(_entry(1, entry_id))
    assert cache.get(0, 0) is not None
    assert cache.size_bytes <= cache.max_bytes


def test_an_entry_appended_over_a_read_back_copy_is_charged_once():
    cache = EntryCache(8 * _cost(100))
    cache.put_read(_entry(0, 0))
    cache.put(_entry(0, 0))
    cache.put_read(_entry(0, 0))
    assert (len(cache), cache.size_bytes, cache.read_back_bytes) == (1, _cost(100), 0)


def test_dropping_a_ledger_drops_its_read_back_entries_too():
    cache = EntryCache(8 * _cost(100))
    cache.put(_entry(0, 0))
    cache.put_read(_entry(0, 1))
    cache.put_read(_entry(1, 0))
    cache.drop_ledger(0)
    assert (len(cache), cache.size_bytes, cache.read_back_bytes) == (1, _cost(100), _cost(100))
