"""Planning a batch read: partitions within ledgers, covering the range exactly, split
as Spark splits files (at least minPartitions, at most maxBytesPerPartition)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stableline._types import MessageId
from stableline.spark._options import parse_options
from stableline.spark._read import TopicLayout, after, partition_bytes, plan, read_bytes

MB = 1024 * 1024


def _options(**extra: str):
    return parse_options({"service": "127.0.0.1:6650", "topic": "t", **extra})


def _layout(ledgers: list[tuple[int, int]]) -> TopicLayout:
    """(entries, bytes) per ledger, ids 0, 1, ...; readable to the end."""
    rows = tuple((i, entries, size) for i, (entries, size) in enumerate(ledgers))
    last = rows[-1]
    return TopicLayout(rows, MessageId(last[0], last[1] - 1))


def test_a_topic_smaller_than_the_byte_cap_is_split_among_min_partitions():
    options = _options(minPartitions="2")
    layout = _layout([(1000, 104 * MB)])
    target = partition_bytes(options, read_bytes(layout, MessageId(0, 0), MessageId(1, 0)))
    parts = plan(options, "t", layout, MessageId(0, 0), MessageId(1, 0), target)
    assert [(p.first_entry, p.last_entry) for p in parts] == [(0, 499), (500, 999)]


def test_the_byte_cap_and_the_4_mb_floor_bound_a_partition():
    assert partition_bytes(_options(minPartitions="2"), 10 * 1024 * MB) == 128 * MB
    assert partition_bytes(_options(minPartitions="64"), 10 * MB) == 4 * MB
    assert (
        partition_bytes(_options(minPartitions="4", maxBytesPerPartition=str(MB)), 100 * MB) == MB
    )


@given(
    ledgers=st.lists(
        st.tuples(st.integers(1, 300), st.integers(0, 50 * MB)), min_size=1, max_size=4
    ),
    min_partitions=st.integers(1, 16),
    max_entries=st.integers(1, 400),
    data=st.data(),
)
def test_partitions_cover_the_range_exactly_each_within_one_ledger(
    ledgers, min_partitions, max_entries, data
):
    options = _options(minPartitions=str(min_partitions), maxEntriesPerPartition=str(max_entries))
    layout = _layout(ledgers)
    every = [MessageId(i, e) for i, (entries, _) in enumerate(ledgers) for e in range(entries)]
    low = data.draw(st.integers(0, len(every)))
    high = data.draw(st.integers(low, len(every)))
    start = every[low] if low < len(every) else after(layout.bound)
    end = every[high] if high < len(every) else after(layout.bound)
    target = partition_bytes(options, read_bytes(layout, start, end))
    parts = plan(options, "t", layout, start, end, target)
    covered = [
        MessageId(p.ledger_id, e) for p in parts for e in range(p.first_entry, p.last_entry + 1)
    ]
    assert covered == every[low:high]
    assert all(p.last_entry - p.first_entry + 1 <= max_entries for p in parts)
