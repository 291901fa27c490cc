"""AbortIndex on its own: per-ledger lists of aborts, Kafka's range scan with early stop,
and KIP-1058's skipping of ledgers whose index is empty."""

from __future__ import annotations

import pytest

from managed_ledger import Position, TxnId
from txnbuffer import AbortedTxn, AbortIndex


def aborted(
    sequence: int, first: tuple[int, int], marker: tuple[int, int], stable: tuple[int, int]
):
    return AbortedTxn(TxnId(1, sequence), Position(*first), Position(*marker), Position(*stable))


def ids(found: list[AbortedTxn]) -> list[int]:
    return [a.txn_id.least_bits for a in found]


def test_new_index_is_empty_everywhere():
    index = AbortIndex()
    assert len(index) == 0
    assert index.all() == []
    assert index.txn_index_empty(0)
    assert index.txn_index_empty(7)


def test_abort_is_indexed_in_the_ledger_of_its_marker_only():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 3), marker=(1, 2), stable=(1, 2)))
    assert index.txn_index_empty(0)  # where its data lies
    assert not index.txn_index_empty(1)  # where its marker lies
    assert len(index) == 1


def test_aborts_within_a_ledger_must_arrive_in_marker_order():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 0), marker=(0, 5), stable=(0, 5)))
    with pytest.raises(AssertionError):
        index.add(aborted(2, first=(0, 1), marker=(0, 4), stable=(0, 5)))
    with pytest.raises(AssertionError):
        index.add(aborted(3, first=(0, 1), marker=(0, 5), stable=(0, 5)))
    # Another ledger has its own order.
    index.add(aborted(4, first=(0, 6), marker=(1, 0), stable=(1, 0)))
    assert ids(index.all()) == [1, 4]


def test_all_lists_aborts_in_ledger_then_marker_order():
    index = AbortIndex()
    index.add(aborted(3, first=(2, 0), marker=(2, 1), stable=(2, 1)))
    index.add(aborted(1, first=(0, 0), marker=(0, 1), stable=(0, 1)))
    index.add(aborted(2, first=(0, 2), marker=(0, 3), stable=(0, 3)))
    assert ids(index.all()) == [1, 2, 3]


def test_overlapping_finds_aborts_whose_data_meets_the_range():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 0), marker=(0, 2), stable=(0, 2)))
    index.add(aborted(2, first=(0, 4), marker=(0, 6), stable=(0, 6)))
    index.add(aborted(3, first=(0, 8), marker=(0, 9), stable=(0, 9)))
    assert ids(index.overlapping(Position(0, 1), Position(0, 5), [0])) == [1, 2]
    assert ids(index.overlapping(Position(0, 3), Position(0, 3), [0])) == []
    assert ids(index.overlapping(Position(0, 0), Position(0, 9), [0])) == [1, 2, 3]


def test_overlapping_skips_aborts_that_ended_before_the_range():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 0), marker=(0, 2), stable=(0, 2)))
    assert ids(index.overlapping(Position(0, 2), Position(0, 4), [0])) == [1]  # marker in range
    assert ids(index.overlapping(Position(0, 3), Position(0, 4), [0])) == []


def test_overlapping_excludes_aborts_that_started_after_the_range():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 5), marker=(0, 6), stable=(0, 6)))
    assert ids(index.overlapping(Position(0, 0), Position(0, 4), [0])) == []
    assert ids(index.overlapping(Position(0, 0), Position(0, 5), [0])) == [1]


def test_overlapping_is_ordered_by_first_position_not_marker_position():
    index = AbortIndex()
    # Txn 2 started first but aborted last, in a later ledger.
    index.add(aborted(1, first=(0, 3), marker=(0, 4), stable=(0, 0)))
    index.add(aborted(2, first=(0, 1), marker=(1, 0), stable=(1, 0)))
    found = index.overlapping(Position(0, 0), Position(1, 0), [0, 1])
    assert ids(found) == [2, 1]


def test_overlapping_stops_at_the_first_abort_whose_stable_position_covers_the_range():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 0), marker=(0, 3), stable=(0, 3)))
    index.add(aborted(2, first=(1, 0), marker=(1, 2), stable=(1, 2)))
    index.add(aborted(3, first=(2, 0), marker=(2, 2), stable=(2, 2)))

    assert ids(index.overlapping(Position(0, 0), Position(0, 2), [0, 1, 2])) == [1]
    assert index.index_lookups == 1  # ledgers 1 and 2 never looked at

    assert ids(index.overlapping(Position(0, 0), Position(1, 1), [0, 1, 2])) == [1, 2]
    assert index.index_lookups == 1 + 2


def test_overlapping_reads_every_ledger_when_no_stable_position_covers_the_range():
    index = AbortIndex()
    # An older transaction stayed open throughout: every abort's stable position lags.
    index.add(aborted(1, first=(0, 1), marker=(0, 2), stable=(0, -1)))
    index.add(aborted(2, first=(1, 1), marker=(1, 2), stable=(0, -1)))
    found = index.overlapping(Position(0, 0), Position(2, 5), [0, 1, 2])
    assert ids(found) == [1, 2]
    assert index.index_lookups == 2
    assert index.empty_ledgers_skipped == 1


def test_overlapping_skips_empty_ledgers_without_a_lookup():
    index = AbortIndex()
    index.add(aborted(1, first=(3, 0), marker=(3, 1), stable=(3, 1)))
    found = index.overlapping(Position(0, 0), Position(3, 5), [0, 1, 2, 3])
    assert ids(found) == [1]
    assert index.empty_ledgers_skipped == 3
    assert index.index_lookups == 1


def test_overlapping_ignores_ledgers_before_the_start():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 0), marker=(0, 1), stable=(0, 1)))
    found = index.overlapping(Position(1, 0), Position(1, 5), [0, 1])
    assert found == []
    assert index.index_lookups == 0
    assert index.empty_ledgers_skipped == 1  # ledger 1 only; ledger 0 not even counted


def test_overlapping_finds_a_txn_spanning_ledgers_from_a_range_in_the_middle():
    index = AbortIndex()
    index.add(aborted(1, first=(0, 5), marker=(2, 0), stable=(2, 0)))
    found = index.overlapping(Position(1, 0), Position(1, 3), [0, 1, 2])
    assert ids(found) == [1]


def test_drop_ledger_forgets_the_aborts_whose_marker_it_held():
    index = AbortIndex()
    first = aborted(1, first=(0, 0), marker=(0, 1), stable=(0, 1))
    spanning = aborted(2, first=(0, 2), marker=(1, 0), stable=(1, 0))
    index.add(first)
    index.add(spanning)

    assert index.drop_ledger(0) == [first]
    assert index.txn_index_empty(0)
    assert index.all() == [spanning]
    assert index.drop_ledger(0) == []
    assert index.drop_ledger(42) == []
    assert len(index) == 1


class CountingList(list):
    """A ledger's aborts that count how many of them a query touches."""

    touched = 0

    def __getitem__(self, index):
        CountingList.touched += 1
        return super().__getitem__(index)

    def __iter__(self):
        for item in super().__iter__():
            CountingList.touched += 1
            yield item


def test_overlapping_seeks_to_the_range_instead_of_walking_the_ledgers_aborts():
    index = AbortIndex()
    count = 100_000
    for sequence in range(count):
        entry = 2 * sequence
        index.add(aborted(sequence, first=(0, entry), marker=(0, entry + 1), stable=(0, entry + 1)))
    index._by_ledger[0] = CountingList(index._by_ledger[0])
    CountingList.touched = 0
    start = Position(0, 2 * (count - 10))
    found = index.overlapping(start, Position(0, 2 * count), [0])
    assert ids(found) == list(range(count - 10, count))
    # A bisect (log2(100,000) ~ 17 probes) and the ten aborts in range, not 100,000.
    assert CountingList.touched <= 40, CountingList.touched
