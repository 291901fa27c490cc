"""The entry cache: bounded, oldest-first eviction, counts hits and misses."""

from __future__ import annotations

from managed_ledger import Entry, EntryHeader, Position
from managed_ledger.cache import ENTRY_OVERHEAD_BYTES, EntryCache, SharedEntryCache


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


# ---------------------------------------------------------------- shared across ledgers


def _check_shared(shared: SharedEntryCache, views: list[EntryCache]) -> None:
    """The accounting invariants: the budget's totals are its views' totals, each
    view's entries are listed in the shared order and nothing else is."""
    assert shared.size_bytes == sum(view.size_bytes for view in views) <= shared.max_bytes
    assert shared.read_back_bytes == sum(view.read_back_bytes for view in views)
    assert shared.read_back_bytes <= shared.read_back_max_bytes
    assert len(shared) == sum(len(view) for view in views)
    for view in views:
        assert view.size_bytes <= view.max_bytes
        assert view.size_bytes == sum(_cost(e.size) for e in view._entries.values()) + sum(
            _cost(e.size) for e in view._read_back.values()
        )
        for key, entry in view._entries.items():
            assert shared._appended[(view, *key)] is entry
        for key, entry in view._read_back.items():
            assert shared._read_back[(view, *key)] is entry


def test_a_view_is_never_bigger_than_the_shared_budget():
    shared = SharedEntryCache(4 * _cost(100))
    assert shared.view(64 * 1024 * 1024).max_bytes == 4 * _cost(100)
    assert shared.view(2 * _cost(100)).max_bytes == 2 * _cost(100)


def test_the_budget_evicts_the_oldest_entries_of_any_ledger_first():
    shared = SharedEntryCache(4 * _cost(100))
    quiet, busy = shared.view(10**9), shared.view(10**9)
    quiet.put(_entry(0, 0))
    quiet.put(_entry(0, 1))
    for entry_id in range(3):
        busy.put(_entry(0, entry_id))
        _check_shared(shared, [quiet, busy])
    # The quiet topic's entries were the oldest: the first went for the busy one's third.
    assert [quiet.get(0, i) is not None for i in range(2)] == [False, True]
    busy.put(_entry(0, 3))
    assert len(quiet) == 0 and len(busy) == 4
    assert shared.size_bytes == 4 * _cost(100) and shared.evictions == 2
    _check_shared(shared, [quiet, busy])


def test_each_view_keeps_its_own_bound_inside_the_budget():
    shared = SharedEntryCache(10 * _cost(100))
    small, other = shared.view(2 * _cost(100)), shared.view(10**9)
    for entry_id in range(5):
        small.put(_entry(0, entry_id))
    other.put(_entry(0, 0))
    assert [small.get(0, i) is not None for i in range(5)] == [False] * 3 + [True] * 2
    assert shared.evictions == 0  # the view's own bound did it, not the budget's
    _check_shared(shared, [small, other])


def test_read_back_entries_of_all_ledgers_share_one_region_of_the_budget():
    shared = SharedEntryCache(8 * _cost(100))  # a quarter: two entries
    first, second = shared.view(10**9), shared.view(10**9)
    first.put(_entry(5, 0))
    first.put_read(_entry(0, 0))
    second.put_read(_entry(0, 0))
    second.put_read(_entry(0, 1))
    assert first.get(0, 0) is None and first.get(5, 0) is not None  # the tail stays
    assert shared.read_back_bytes == 2 * _cost(100)
    _check_shared(shared, [first, second])


def test_views_with_the_same_ledger_ids_are_kept_apart():
    shared = SharedEntryCache(100 * _cost(100))
    first, second = shared.view(10**9), shared.view(10**9)
    mine, theirs = _entry(0, 0), _entry(0, 0)
    first.put(mine)
    second.put(theirs)
    second.drop_ledger(0)
    assert first.get(0, 0) is mine and second.get(0, 0) is None
    _check_shared(shared, [first, second])


def test_closing_every_view_returns_the_budget_to_zero_and_a_closed_view_takes_nothing():
    shared = SharedEntryCache(50 * _cost(100))
    views = [shared.view(20 * _cost(100)) for _ in range(3)]
    for index, view in enumerate(views):
        for entry_id in range(30):
            view.put(_entry(index, entry_id))
            view.put_read(_entry(index + 10, entry_id))
    _check_shared(shared, views)
    for view in views:
        view.close()
        _check_shared(shared, views)
    assert (shared.size_bytes, shared.read_back_bytes, len(shared)) == (0, 0, 0)
    views[0].put(_entry(0, 99))
    views[0].put_read(_entry(0, 98))
    assert (len(views[0]), shared.size_bytes) == (0, 0)


def test_random_puts_reads_drops_and_closes_keep_the_accounting_exact():
    import random

    rng = random.Random(7)
    shared = SharedEntryCache(40_000)
    views = [shared.view(rng.choice([5_000, 15_000, 10**9])) for _ in range(5)]
    for _ in range(5_000):
        view = rng.choice(views)
        action = rng.random()
        entry = _entry(rng.randrange(4), rng.randrange(50), size=rng.choice([0, 10, 700, 4000]))
        if action < 0.5:
            view.put(entry)
        elif action < 0.9:
            view.put_read(entry)
        elif action < 0.98:
            view.drop_ledger(rng.randrange(4))
        else:
            view.clear()
        _check_shared(shared, views)
    for view in views:
        view.close()
    assert (shared.size_bytes, shared.read_back_bytes, len(shared)) == (0, 0, 0)
