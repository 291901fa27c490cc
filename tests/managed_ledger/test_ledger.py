"""The managed ledger's promises, each pinned by a test that breaks with it.

Real files and LMDB in tmp_path (see conftest.py). Faults are injected at the
unit-test edge by monkeypatching `os.pwrite` / `os.fdatasync`; a crash is what
`harness.crash` leaves behind. Synchronisation with the writer's worker thread
goes through threading events, never through sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import managed_ledger.ledger as ledger_module
from managed_ledger import (
    EntryHeader,
    EntryTooLargeError,
    LedgerClosedError,
    LedgerState,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerError,
    Position,
    StorageError,
    StorageFullError,
)
from managed_ledger.cache import ENTRY_OVERHEAD_BYTES
from managed_ledger.framing import FRAME
from managed_ledger.segment import Segment
from managed_ledger.state import IllegalStateTransition

DURABLE = ManagedLedgerConfig(fsync=True)
# Cursors flush (and so trim) only when a test says so.
NO_BACKGROUND_FLUSH = ManagedLedgerConfig(fsync=False, cursor_flush_interval_s=3600.0)


def header(i: int) -> EntryHeader:
    return EntryHeader(publish_time_ms=1_000 + i, sequence_id=i, producer_name="producer")


def stamped(entry_header: EntryHeader, base_offset: int) -> EntryHeader:
    return dataclasses.replace(entry_header, base_offset=base_offset)


def payload(i: int) -> bytes:
    return f"payload-{i:06d}".encode()  # every payload the same length


def sequence_ids(entries) -> list[int]:
    return [entry.header.sequence_id for entry in entries]


def read_all(ledger: ManagedLedger) -> list:
    return ledger.read(ledger.first_position(), 1_000_000)


def ledger_file(harness, ledger_id: int) -> Path:
    return harness.directory / f"{ledger_id:016x}.log"


async def append_many(ledger: ManagedLedger, ids) -> list[Position]:
    """Append one by one, each awaited: one entry per batch."""
    return [await ledger.append(header(i), payload(i)) for i in ids]


async def fence_after_two_entries(harness, faulty_disk) -> tuple[ManagedLedger, int]:
    """A durable ledger holding entries 0 and 1 whose next append failed its fsync
    (the disk still failing them); returns it and its first ledger id."""
    ledger = await harness.open(DURABLE)
    first = ledger.current_ledger_id
    await append_many(ledger, range(2))
    faulty_disk.fail_syncs(errno.EIO)
    with pytest.raises(StorageError, match="the disk failed"):
        await ledger.append(header(90), payload(90))
    return ledger, first


def fail_once(real, error: OSError):
    """A stand-in for an os function that raises `error` on its first call only."""
    calls = {"failed": 0}

    def fake(*args):
        if not calls["failed"]:
            calls["failed"] = 1
            raise error
        return real(*args)

    return fake


class FakeClock:
    """`time` as seen by managed_ledger.ledger: moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(ledger_module, "time", SimpleNamespace(time=fake.time))
    return fake


class FsyncGate:
    """os.fdatasync that blocks in the worker thread until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()
        self.calls = 0
        self._real = os.fdatasync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        assert self.open.wait(10), "the test never opened the fsync gate"
        self._real(fd)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 10), "no fdatasync was started"


@pytest.fixture
def fsync_gate(monkeypatch):
    gate = FsyncGate()
    monkeypatch.setattr(os, "fdatasync", gate)
    yield gate
    gate.open.set()  # never leave a worker thread blocked behind a failed assertion


@pytest.fixture
def fsync_calls(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


# ---------------------------------------------------------------- append and the LAC


async def test_sequential_appends_return_consecutive_positions_in_one_ledger(harness):
    ledger = await harness.open()
    ledger_id = ledger.current_ledger_id
    positions = await append_many(ledger, range(5))
    assert positions == [Position(ledger_id, i) for i in range(5)]
    assert ledger.last_confirmed == positions[-1]


async def test_concurrent_appends_get_positions_in_the_order_they_were_called(harness):
    ledger = await harness.open()
    ledger_id = ledger.current_ledger_id
    positions = await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(200)))
    assert positions == [Position(ledger_id, i) for i in range(200)]
    assert sequence_ids(read_all(ledger)) == list(range(200))


async def test_new_ledger_lac_lies_before_its_first_entry_and_nothing_is_readable(harness):
    ledger = await harness.open()
    assert ledger.last_confirmed == Position(ledger.current_ledger_id, -1)
    assert read_all(ledger) == []


async def test_lac_does_not_move_while_the_batch_is_not_yet_fsynced(harness, fsync_gate):
    ledger = await harness.open(DURABLE)
    before = ledger.last_confirmed
    append = asyncio.create_task(ledger.append(header(0), payload(0)))
    await fsync_gate.wait_entered()
    # The bytes are written, the fsync has not returned: nothing is acknowledged.
    assert ledger.last_confirmed == before
    assert read_all(ledger) == []
    assert not append.done()
    fsync_gate.open.set()
    position = await append
    assert ledger.last_confirmed == position == Position(before.ledger_id, 0)
    assert sequence_ids(read_all(ledger)) == [0]


async def test_lac_only_moves_forward_and_every_move_is_announced(harness):
    ledger = await harness.open()
    seen: list[Position] = []
    ledger.add_listener(lambda: seen.append(ledger.last_confirmed))
    await append_many(ledger, range(3))
    await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(3, 50)))
    assert seen == sorted(set(seen)), "the LAC moved backwards or stood still when announced"
    assert seen[-1] == ledger.last_confirmed == Position(ledger.current_ledger_id, 49)


async def test_entry_listeners_see_a_batch_before_the_lac_covers_it(harness):
    ledger = await harness.open()
    seen: list[tuple[list[Position], Position]] = []
    ledger.add_entry_listener(
        lambda entries: seen.append(([e.position for e in entries], ledger.last_confirmed))
    )
    await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(10)))
    await ledger.append(header(10), payload(10))
    positions = [position for batch, _ in seen for position in batch]
    assert positions == [Position(ledger.current_ledger_id, i) for i in range(11)]
    for batch, lac_when_seen in seen:
        assert lac_when_seen < batch[0]


async def test_entry_larger_than_the_limit_is_refused_and_nothing_is_appended(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entry_size_bytes=100))
    await ledger.append(header(0), b"x" * 100)
    with pytest.raises(EntryTooLargeError):
        await ledger.append(header(1), b"x" * 101)
    assert sequence_ids(read_all(ledger)) == [0]


async def test_append_to_a_closed_ledger_raises_ledger_closed(harness):
    ledger = await harness.open()
    await ledger.close()
    with pytest.raises(LedgerClosedError):
        await ledger.append(header(0), payload(0))


async def test_appends_beyond_the_pending_byte_limit_wait_and_all_complete(harness):
    # Every append is bigger than the limit: each waits for the writer to drain.
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_pending_bytes=1))
    positions = await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(50)))
    ledger_id = ledger.current_ledger_id
    assert sorted(positions) == [Position(ledger_id, i) for i in range(50)]
    assert sorted(sequence_ids(read_all(ledger))) == list(range(50))


async def test_close_finishes_in_flight_and_queued_appends(harness, fsync_gate):
    ledger = await harness.open(DURABLE)
    in_flight = [asyncio.create_task(ledger.append(header(i), payload(i))) for i in range(5)]
    await fsync_gate.wait_entered()  # the first batch is in its fsync
    queued = [asyncio.create_task(ledger.append(header(i), payload(i))) for i in range(5, 10)]
    closing = asyncio.create_task(ledger.close())  # runs after the queued appends enqueued
    fsync_gate.open.set()
    await closing
    positions = [await task for task in in_flight + queued]
    assert positions == sorted(positions) and len(set(positions)) == 10
    reopened = await harness.open(DURABLE)
    assert sequence_ids(read_all(reopened)) == list(range(10))


# ---------------------------------------------------------------- reads


async def test_reads_return_recent_entries_from_the_cache_in_order(harness):
    ledger = await harness.open()
    await append_many(ledger, range(20))
    entries = read_all(ledger)
    assert sequence_ids(entries) == list(range(20))
    assert [entry.payload for entry in entries] == [payload(i) for i in range(20)]
    # The ledger stamps each entry with its base offset (one message each here).
    assert [entry.header for entry in entries] == [stamped(header(i), i) for i in range(20)]
    assert ledger.cache.hits == 20 and ledger.cache.misses == 0


async def test_reads_without_a_cache_come_from_disk_and_match_what_was_appended(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, cache_size_bytes=0))
    positions = await append_many(ledger, range(20))
    entries = read_all(ledger)
    assert [entry.position for entry in entries] == positions
    # The ledger stamps each entry with its base offset (one message each here).
    assert [entry.header for entry in entries] == [stamped(header(i), i) for i in range(20)]
    assert [entry.payload for entry in entries] == [payload(i) for i in range(20)]
    assert ledger.cache.hits == 0 and ledger.cache.misses > 0


async def test_evicted_entries_are_read_from_disk_and_recent_ones_from_the_cache(harness):
    # Room for five entries: the older fifteen have been evicted.
    cache_bytes = 5 * (len(payload(0)) + ENTRY_OVERHEAD_BYTES)
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, cache_size_bytes=cache_bytes))
    positions = await append_many(ledger, range(20))
    assert len(ledger.cache) == 5
    entries = read_all(ledger)
    assert sequence_ids(entries) == list(range(20))
    assert [entry.payload for entry in entries] == [payload(i) for i in range(20)]
    assert ledger.cache.misses > 0
    hits = ledger.cache.hits
    assert sequence_ids(ledger.read(positions[15], 10)) == [15, 16, 17, 18, 19]
    assert ledger.cache.hits == hits + 5


async def test_entries_read_from_disk_are_served_from_the_cache_on_the_next_read(harness):
    # A reader that takes only part of one disk read (its consumer's permits) finds
    # the rest in the cache on its next pass, not on the disk again.
    ledger = await harness.open(ManagedLedgerConfig(fsync=False))
    positions = await append_many(ledger, range(20))
    await ledger.close()
    ledger = await harness.open(ManagedLedgerConfig(fsync=False))
    assert sequence_ids(ledger.read(positions[0], 20)) == list(range(20))
    misses = ledger.cache.misses
    assert sequence_ids(ledger.read(positions[5], 10)) == list(range(5, 15))
    assert ledger.cache.misses == misses


async def test_a_read_from_disk_returns_what_was_asked_and_reads_the_rest_ahead(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False))
    positions = await append_many(ledger, range(20))
    await ledger.close()
    ledger = await harness.open(ManagedLedgerConfig(fsync=False))
    assert sequence_ids(ledger.read(positions[0], 3)) == [0, 1, 2]
    assert sequence_ids(ledger.read(positions[0], 10, bound=positions[4])) == [0, 1, 2, 3, 4]
    misses = ledger.cache.misses
    # The entries after those asked for came in the same read, into the cache.
    assert sequence_ids(ledger.read(positions[5], 15)) == list(range(5, 20))
    assert ledger.cache.misses == misses


async def test_read_stops_at_max_entries_and_at_the_bound(harness):
    ledger = await harness.open()
    positions = await append_many(ledger, range(10))
    assert sequence_ids(ledger.read(positions[2], 3)) == [2, 3, 4]
    assert sequence_ids(ledger.read(positions[2], 100, bound=positions[5])) == [2, 3, 4, 5]
    assert ledger.read(positions[9].next_in_ledger(), 10) == []
    assert ledger.read(positions[0], 0) == []


async def test_read_never_returns_entries_past_the_lac_even_with_a_later_bound(harness):
    ledger = await harness.open()
    positions = await append_many(ledger, range(3))
    beyond = Position(positions[-1].ledger_id + 5, 0)
    assert sequence_ids(ledger.read(positions[0], 100, bound=beyond)) == [0, 1, 2]


async def test_an_entry_corrupted_on_disk_is_skipped_counted_and_remembered(harness):
    config = ManagedLedgerConfig(fsync=False, cache_size_bytes=0)
    ledger = await harness.open(config)
    positions = await append_many(ledger, range(3))
    ledger = await harness.reopen(ledger, config)
    path = ledger_file(harness, positions[0].ledger_id)
    data = bytearray(path.read_bytes())
    frame_size = len(data) // 3
    data[frame_size + frame_size // 2] ^= 0x01  # inside the middle entry
    path.write_bytes(bytes(data))
    assert sequence_ids(ledger.read(positions[0], 3)) == [0, 2]
    assert sequence_ids(ledger.read(positions[1], 1)) == [2]  # never comes back short
    assert ledger.corrupt_entries == 1
    assert ledger.first_position_after(positions[0]) == positions[2]
    assert ledger.count_entries(Position(positions[0].ledger_id, -1), positions[2]) == 2
    ledger = await harness.reopen(ledger, config)
    assert ledger.corrupt_entries == 1
    assert sequence_ids(ledger.read(positions[0], 3)) == [0, 2]


# ---------------------------------------------------------------- rollover


async def test_rollover_by_entry_count_starts_a_new_ledger(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3))
    first = ledger.current_ledger_id
    positions = await append_many(ledger, range(7))
    assert positions == [Position(first + i // 3, i % 3) for i in range(7)]
    assert ledger.ledger_ids() == [first, first + 1, first + 2]
    infos = ledger.ledger_infos()
    assert [(info.entries, info.closed) for info in infos] == [(3, True), (3, True), (1, False)]


async def test_concurrent_appends_never_overfill_a_ledger(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=7))
    positions = await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(50)))
    assert positions == sorted(positions)
    first = positions[0].ledger_id
    assert positions == [Position(first + i // 7, i % 7) for i in range(50)]
    assert all(info.entries <= 7 for info in ledger.ledger_infos())


async def test_rollover_by_size_starts_a_new_ledger_once_the_limit_is_reached(harness):
    ledger = await harness.open()
    await ledger.append(header(0), payload(0))
    frame_size = ledger.ledger_infos()[-1].size
    await ledger.close()
    # Two frames reach the limit; the third entry goes to a new ledger.
    config = ManagedLedgerConfig(fsync=False, max_ledger_size_bytes=2 * frame_size)
    ledger = await harness.open(config)
    positions = await append_many(ledger, range(1, 6))
    first = positions[0].ledger_id
    assert positions == [Position(first + i // 2, i % 2) for i in range(5)]
    assert [info.size for info in ledger.ledger_infos()][-3:] == [
        2 * frame_size,
        2 * frame_size,
        frame_size,
    ]


async def test_rollover_by_age_starts_a_new_ledger_once_the_ledger_is_old_enough(harness, clock):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_ledger_age_s=60.0))
    first = ledger.current_ledger_id
    # A ledger's age counts from its first append, which creates it.
    assert await ledger.append(header(0), payload(0)) == Position(first, 0)
    clock.now += 59.0
    assert await ledger.append(header(1), payload(1)) == Position(first, 1)
    clock.now += 1.0
    assert await ledger.append(header(2), payload(2)) == Position(first + 1, 0)
    clock.now += 59.0
    assert await ledger.append(header(3), payload(3)) == Position(first + 1, 1)


async def test_an_empty_ledger_is_never_rolled_over(harness, clock):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_ledger_age_s=1.0))
    first = ledger.current_ledger_id
    clock.now += 3600.0
    assert await ledger.append(header(0), payload(0)) == Position(first, 0)


async def test_reads_cross_ledger_boundaries_in_order_from_disk(harness):
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=4, cache_size_bytes=0)
    ledger = await harness.open(config)
    positions = await append_many(ledger, range(14))
    assert len(ledger.ledger_ids()) == 4
    assert [entry.position for entry in read_all(ledger)] == positions
    # A read starting inside one ledger and bounded inside another.
    middle = ledger.read(positions[3], 6)
    assert sequence_ids(middle) == [3, 4, 5, 6, 7, 8]
    # The end of a closed ledger is not an entry: reading goes on in the next one.
    assert sequence_ids(ledger.read(positions[3].next_in_ledger(), 2)) == [4, 5]


# ---------------------------------------------------------------- group commit


async def test_concurrent_appends_share_fsyncs_and_are_all_acknowledged(harness, fsync_calls):
    ledger = await harness.open(DURABLE)
    appends = 300
    positions = await asyncio.gather(
        *(ledger.append(header(i), payload(i)) for i in range(appends))
    )
    assert positions == [Position(ledger.current_ledger_id, i) for i in range(appends)]
    assert 1 <= len(fsync_calls) < appends
    assert ledger.entries_added == appends
    assert sequence_ids(read_all(ledger)) == list(range(appends))


async def test_appends_arriving_during_an_fsync_share_the_next_one(harness, fsync_gate):
    ledger = await harness.open(DURABLE)
    first = asyncio.create_task(ledger.append(header(0), payload(0)))
    await fsync_gate.wait_entered()
    rest = [asyncio.create_task(ledger.append(header(i), payload(i))) for i in range(1, 100)]
    fsync_gate.open.set()
    positions = [await first] + [await task for task in rest]
    assert positions == [Position(ledger.current_ledger_id, i) for i in range(100)]
    assert fsync_gate.calls == 2  # one for the first entry, one for the 99 behind it


async def test_group_commit_batches_are_bounded_by_max_group_commit_bytes(harness, fsync_calls):
    # Any frame reaches a 1-byte bound: every batch holds exactly one entry.
    ledger = await harness.open(ManagedLedgerConfig(fsync=True, max_group_commit_bytes=1))
    positions = await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(20)))
    assert positions == [Position(ledger.current_ledger_id, i) for i in range(20)]
    assert len(fsync_calls) == 20


async def test_fsync_off_acknowledges_without_fdatasync(harness, fsync_calls):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False))
    await asyncio.gather(*(ledger.append(header(i), payload(i)) for i in range(20)))
    assert fsync_calls == []


# ---------------------------------------------------------------- reopen


async def test_reopen_after_close_sees_every_entry_across_ledgers(harness):
    config = ManagedLedgerConfig(fsync=True, max_entries_per_ledger=5)
    ledger = await harness.open(config)
    positions = await append_many(ledger, range(12))
    ledger_ids = ledger.ledger_ids()
    reopened = await harness.reopen(ledger, config)
    assert reopened.last_confirmed == positions[-1]
    assert reopened.ledger_ids()[: len(ledger_ids)] == ledger_ids
    entries = read_all(reopened)
    assert [entry.position for entry in entries] == positions
    assert [entry.payload for entry in entries] == [payload(i) for i in range(12)]
    assert reopened.total_entries == 12


async def test_appends_after_reopen_get_positions_after_every_earlier_one(harness):
    ledger = await harness.open()
    before = await append_many(ledger, range(3))
    reopened = await harness.reopen(ledger)
    after = await append_many(reopened, range(3, 6))
    assert after[0] > before[-1]
    assert after == sorted(after)
    assert sequence_ids(read_all(reopened)) == list(range(6))


async def test_reopening_an_empty_ledger_leaves_no_empty_ledgers_behind(harness):
    ledger = await harness.open()
    await append_many(ledger, range(2))
    for _ in range(3):
        ledger = await harness.reopen(ledger)
    # Only the ledger with the entries: opening creates no ledger file.
    assert len(ledger.ledger_ids()) == 1
    assert len(list(harness.directory.glob("*.log"))) == 1
    assert sequence_ids(read_all(ledger)) == [0, 1]


async def test_entries_written_before_a_crash_are_all_there_after_reopen(harness):
    ledger = await harness.open()
    positions = await append_many(ledger, range(10))
    reopened = await harness.crash_and_reopen(ledger)
    assert reopened.last_confirmed == positions[-1]
    assert [entry.position for entry in read_all(reopened)] == positions


# ---------------------------------------------------------------- recovery of a torn tail


async def crash_with_entries(harness, count: int) -> tuple[Path, int]:
    """Append `count` equal-sized entries, crash; the open ledger's file and frame size."""
    ledger = await harness.open()
    await append_many(ledger, range(count))
    path = ledger_file(harness, ledger.current_ledger_id)
    harness.crash(ledger)
    size = path.stat().st_size
    assert size % count == 0
    return path, size // count


async def assert_recovers_whole_entries(harness, path: Path, whole: int, frame_size: int) -> None:
    """After reopen only the first `whole` entries remain, and appends go on after them."""
    ledger = await harness.open()
    assert sequence_ids(read_all(ledger)) == list(range(whole))
    assert path.stat().st_size == whole * frame_size
    last = ledger.last_confirmed
    assert last == Position(0, whole - 1)
    position = await ledger.append(header(100), payload(100))
    assert position > last
    assert sequence_ids(read_all(ledger)) == [*range(whole), 100]
    # The cut is durable: a second reopen sees the same log.
    ledger = await harness.crash_and_reopen(ledger)
    assert sequence_ids(read_all(ledger)) == [*range(whole), 100]


async def test_torn_tail_is_cut_at_the_last_whole_entry_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    os.truncate(path, 3 * frame_size - 3)  # the last frame lost its last bytes
    await assert_recovers_whole_entries(harness, path, 2, frame_size)


async def test_tail_torn_inside_a_frame_header_is_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    os.truncate(path, 2 * frame_size + FRAME.size // 2)
    await assert_recovers_whole_entries(harness, path, 2, frame_size)


async def test_garbage_after_the_last_entry_is_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    with path.open("ab") as handle:
        handle.write(b"\xde\xad\xbe\xef" * 50)
    await assert_recovers_whole_entries(harness, path, 3, frame_size)


async def test_zero_filled_tail_is_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    with path.open("ab") as handle:
        handle.write(bytes(4096))
    await assert_recovers_whole_entries(harness, path, 3, frame_size)


async def test_frame_claiming_more_bytes_than_the_file_holds_is_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    with path.open("ab") as handle:
        handle.write(FRAME.pack(10_000, 0, 4) + b"head" + b"short")
    await assert_recovers_whole_entries(harness, path, 3, frame_size)


async def test_a_damaged_entry_before_valid_ones_is_skipped_not_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 10)
    data = bytearray(path.read_bytes())
    data[3 * frame_size + frame_size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    ledger = await harness.open()
    assert sequence_ids(read_all(ledger)) == [i for i in range(10) if i != 3]
    assert path.stat().st_size == 10 * frame_size
    assert ledger.corrupt_entries == 1
    assert ledger.last_confirmed == Position(0, 9)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([Position(0, i) for i in range(10) if i != 3])
    assert cursor.mark_delete == Position(0, 9) and cursor.backlog == 0
    ledger = await harness.crash_and_reopen(ledger)
    assert ledger.corrupt_entries == 1
    assert sequence_ids(read_all(ledger)) == [i for i in range(10) if i != 3]


async def test_last_entry_with_a_bad_crc_is_cut_on_reopen(harness):
    path, frame_size = await crash_with_entries(harness, 3)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    await assert_recovers_whole_entries(harness, path, 2, frame_size)


async def test_open_ledger_torn_to_nothing_is_dropped_on_reopen(harness):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2))
    positions = await append_many(ledger, range(3))  # ledgers 0 (full) and 1 (open)
    path = ledger_file(harness, positions[-1].ledger_id)
    harness.crash(ledger)
    os.truncate(path, 5)
    ledger = await harness.open()
    assert ledger.last_confirmed == positions[1]
    assert positions[-1].ledger_id not in ledger.ledger_ids()
    assert not path.exists()
    assert sequence_ids(read_all(ledger)) == [0, 1]
    assert await ledger.append(header(3), payload(3)) > positions[1]


# ---------------------------------------------------------------- failed writes


async def reopen_by(harness, ledger: ManagedLedger, how: str, config) -> ManagedLedger:
    if how == "close":
        return await harness.reopen(ledger, config)
    return await harness.crash_and_reopen(ledger, config)


@pytest.mark.parametrize("how", ["close", "crash"])
async def test_failed_fdatasync_fails_the_whole_batch_and_leaves_no_phantom_entries(
    harness, monkeypatch, how
):
    ledger = await harness.open(DURABLE)
    ledger_id = ledger.current_ledger_id
    await append_many(ledger, range(2))
    lac = ledger.last_confirmed
    monkeypatch.setattr(os, "fdatasync", fail_once(os.fdatasync, OSError(errno.EIO, "EIO")))
    results = await asyncio.gather(
        *(ledger.append(header(i), payload(i)) for i in range(10, 15)), return_exceptions=True
    )
    assert all(isinstance(result, ManagedLedgerError) for result in results), results
    assert all(isinstance(result, StorageError) for result in results), results
    assert not any(isinstance(result, StorageFullError) for result in results), results
    assert ledger.last_confirmed == lac
    assert sequence_ids(read_all(ledger)) == [0, 1]
    # A failed fsync fences the ledger: the page cache of that file can no longer
    # be trusted, so the next append rolls over to a fresh ledger.
    assert await ledger.append(header(2), payload(2)) == Position(ledger_id + 1, 0)
    assert ledger_file(harness, ledger_id).stat().st_size == ledger.ledger_infos()[0].size
    assert sequence_ids(read_all(ledger)) == [0, 1, 2]
    reopened = await reopen_by(harness, ledger, how, DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


@pytest.mark.parametrize("how", ["close", "crash"])
async def test_write_that_fails_part_way_leaves_no_frames_of_its_batch_behind(
    harness, monkeypatch, how
):
    ledger = await harness.open(DURABLE)
    ledger_id = ledger.current_ledger_id
    await append_many(ledger, range(2))
    path = ledger_file(harness, ledger_id)
    committed_size = path.stat().st_size
    frame_size = committed_size // 2
    real_pwrite = os.pwrite

    def partial_then_fail(fd: int, data: bytes, offset: int) -> int:
        # Two whole frames and part of a third reach the file, then the disk fills.
        real_pwrite(fd, data[: 2 * frame_size + 7], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    calls = {"n": 0}

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return partial_then_fail(fd, data, offset)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    results = await asyncio.gather(
        *(ledger.append(header(i), payload(i)) for i in range(10, 14)), return_exceptions=True
    )
    assert all(isinstance(result, ManagedLedgerError) for result in results), results
    assert path.stat().st_size == committed_size  # the whole frames were cut too
    assert await ledger.append(header(2), payload(2)) == Position(ledger_id, 2)
    reopened = await reopen_by(harness, ledger, how, DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


async def test_short_write_fails_the_append_and_the_ledger_goes_on(harness, monkeypatch):
    ledger = await harness.open(DURABLE)
    ledger_id = ledger.current_ledger_id
    real_pwrite = os.pwrite
    calls = {"n": 0}

    def short_once(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_pwrite(fd, data[: len(data) // 2], offset)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", short_once)
    with pytest.raises(ManagedLedgerError, match="short write"):
        await ledger.append(header(0), payload(0))
    assert await ledger.append(header(1), payload(1)) == Position(ledger_id, 0)
    reopened = await harness.crash_and_reopen(ledger, DURABLE)
    assert sequence_ids(read_all(reopened)) == [1]


async def test_failed_batch_stays_gone_after_a_crash_even_if_its_cut_also_failed(
    harness, monkeypatch
):
    ledger = await harness.open(DURABLE)
    await append_many(ledger, range(2))
    monkeypatch.setattr(os, "fdatasync", fail_once(os.fdatasync, OSError(errno.EIO, "EIO")))
    monkeypatch.setattr(os, "ftruncate", fail_once(os.ftruncate, OSError(errno.EIO, "EIO")))
    results = await asyncio.gather(
        *(ledger.append(header(i), payload(i)) for i in (10, 11)), return_exceptions=True
    )
    assert all(isinstance(result, ManagedLedgerError) for result in results), results
    await ledger.append(header(2), payload(2))  # same size as one failed frame
    reopened = await harness.crash_and_reopen(ledger, DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


async def test_failed_rollover_fails_queued_appends_and_the_next_append_retries_it(
    harness, monkeypatch
):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2))
    first = ledger.current_ledger_id
    await append_many(ledger, range(2))
    real_create = Segment.create.__func__

    def create_fails_once(cls, ledger_id, path, files=None):
        monkeypatch.setattr(Segment, "create", classmethod(real_create))
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(Segment, "create", classmethod(create_fails_once))
    with pytest.raises(ManagedLedgerError, match="rollover"):
        await ledger.append(header(90), payload(90))
    assert await ledger.append(header(2), payload(2)) == Position(first + 1, 0)
    reopened = await harness.reopen(ledger)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


async def test_full_disk_fails_appends_with_storage_full_and_they_resume_when_space_returns(
    harness, faulty_disk
):
    ledger = await harness.open(DURABLE)
    ledger_id = ledger.current_ledger_id
    await append_many(ledger, range(2))
    lac = ledger.last_confirmed
    faulty_disk.fail_writes(errno.ENOSPC)
    for _attempt in range(3):
        results = await asyncio.gather(
            *(ledger.append(header(i), payload(i)) for i in range(10, 13)),
            return_exceptions=True,
        )
        assert all(isinstance(result, StorageFullError) for result in results), results
        assert "disk is full" in str(results[0]) and "Free disk space" in str(results[0])
        # Readable all along, and nothing moved.
        assert ledger.last_confirmed == lac
        assert sequence_ids(read_all(ledger)) == [0, 1]
    faulty_disk.heal()
    # A full disk is not a failing one: the same ledger takes the next append.
    assert await ledger.append(header(2), payload(2)) == Position(ledger_id, 2)
    reopened = await harness.crash_and_reopen(ledger, DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


async def test_failing_fsyncs_fence_the_ledger_and_appends_resume_in_a_new_one_once_healed(
    harness, faulty_disk
):
    ledger, first = await fence_after_two_entries(harness, faulty_disk)
    # The rollover's seal needs an fsync too: it fails while the device does, and
    # every later append fails with it, without touching the fenced file.
    with pytest.raises(StorageError, match="rollover"):
        await ledger.append(header(91), payload(91))
    assert sequence_ids(read_all(ledger)) == [0, 1]
    faulty_disk.heal()
    assert await ledger.append(header(2), payload(2)) == Position(first + 1, 0)
    assert sequence_ids(read_all(ledger)) == [0, 1, 2]
    reopened = await harness.crash_and_reopen(ledger, DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


async def test_close_with_a_failing_disk_leaves_the_ledger_to_be_scanned_on_reopen(
    harness, faulty_disk
):
    ledger = await harness.open(DURABLE)
    await append_many(ledger, range(3))
    faulty_disk.fail_syncs(errno.EIO)
    await ledger.close()  # logs the failed seal instead of raising out of shutdown
    faulty_disk.heal()
    assert not ledger_file(harness, ledger.current_ledger_id).with_suffix(".idx").exists()
    reopened = await harness.open(DURABLE)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2]


# ---------------------------------------------------------------- states


async def test_a_ledger_is_opened_then_closing_while_it_drains_then_closed(
    harness, fsync_gate, wait_for
):
    ledger = await harness.open(DURABLE)
    assert ledger.state is LedgerState.LEDGER_OPENED
    appending = asyncio.create_task(ledger.append(header(0), payload(0)))
    await fsync_gate.wait_entered()
    closing = asyncio.create_task(ledger.close())
    await wait_for(lambda: ledger.state is LedgerState.CLOSING, 5, "the close to begin")
    with pytest.raises(LedgerClosedError):
        await ledger.append(header(1), payload(1))
    fsync_gate.open.set()
    await closing
    assert ledger.state is LedgerState.CLOSED
    assert (await appending).entry_id == 0


async def test_a_full_disk_leaves_the_ledger_write_failed_until_an_append_lands(
    harness, faulty_disk
):
    ledger = await harness.open(DURABLE)
    ledger_id = ledger.current_ledger_id
    faulty_disk.fail_writes(errno.ENOSPC)
    for _attempt in range(2):
        with pytest.raises(StorageFullError):
            await ledger.append(header(0), payload(0))
        assert ledger.state is LedgerState.WRITE_FAILED
    faulty_disk.heal()
    assert await ledger.append(header(1), payload(1)) == Position(ledger_id, 0)
    assert ledger.state is LedgerState.LEDGER_OPENED


async def test_a_failed_fsync_fences_the_ledger_until_a_rollover_opens_the_next(
    harness, faulty_disk
):
    ledger, first = await fence_after_two_entries(harness, faulty_disk)
    assert ledger.state is LedgerState.FENCED
    # The rollover's seal fails as well: still fenced, the file still unwritten.
    with pytest.raises(StorageError, match="rollover"):
        await ledger.append(header(91), payload(91))
    assert ledger.state is LedgerState.FENCED
    faulty_disk.heal()
    assert await ledger.append(header(2), payload(2)) == Position(first + 1, 0)
    assert ledger.state is LedgerState.LEDGER_OPENED


async def test_a_rollover_is_closing_ledger_until_the_next_ledger_is_adopted(harness, monkeypatch):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=1))
    await ledger.append(header(0), payload(0))
    real_create = Segment.create.__func__
    creating, release = threading.Event(), threading.Event()

    def gated_create(cls, ledger_id, path, files=None):
        creating.set()
        assert release.wait(10), "the test never released the rollover"
        return real_create(cls, ledger_id, path, files)

    monkeypatch.setattr(Segment, "create", classmethod(gated_create))
    appending = asyncio.create_task(ledger.append(header(1), payload(1)))
    try:
        assert await asyncio.to_thread(creating.wait, 10), "no rollover started"
        assert ledger.state is LedgerState.CLOSING_LEDGER
    finally:
        release.set()
    assert (await appending).entry_id == 0
    assert ledger.state is LedgerState.LEDGER_OPENED


async def test_a_failed_rollover_of_a_full_ledger_leaves_it_write_failed(harness, monkeypatch):
    ledger = await harness.open(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=1))
    first = ledger.current_ledger_id
    await ledger.append(header(0), payload(0))
    real_create = Segment.create.__func__

    def create_fails_once(cls, ledger_id, path, files=None):
        monkeypatch.setattr(Segment, "create", classmethod(real_create))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Segment, "create", classmethod(create_fails_once))
    with pytest.raises(StorageFullError, match="rollover"):
        await ledger.append(header(90), payload(90))
    assert ledger.state is LedgerState.WRITE_FAILED
    assert await ledger.append(header(1), payload(1)) == Position(first + 1, 0)
    assert ledger.state is LedgerState.LEDGER_OPENED


async def test_appends_queued_before_a_close_still_roll_over_a_ledger_fenced_meanwhile(
    harness, monkeypatch, wait_for
):
    ledger = await harness.open(DURABLE)
    first = ledger.current_ledger_id
    real = os.fdatasync
    entered, release = threading.Event(), threading.Event()
    calls = {"n": 0}

    def first_sync_blocks_then_fails(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            entered.set()
            assert release.wait(10), "the test never released the fsync"
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", first_sync_blocks_then_fails)
    failing = asyncio.create_task(ledger.append(header(90), payload(90)))
    try:
        assert await asyncio.to_thread(entered.wait, 10), "no fdatasync was started"
        queued = asyncio.create_task(ledger.append(header(0), payload(0)))
        closing = asyncio.create_task(ledger.close())
        await wait_for(lambda: ledger.state is LedgerState.CLOSING, 5, "the close to begin")
    finally:
        release.set()
    with pytest.raises(StorageError):
        await failing
    # Closing keeps its state, yet the queued append is not written to the fenced
    # file: it lands in the next ledger, which the close then seals.
    assert await asyncio.wait_for(queued, 10) == Position(first + 1, 0)
    await closing
    assert ledger.state is LedgerState.CLOSED
    reopened = await harness.open(DURABLE)
    assert sequence_ids(read_all(reopened)) == [0]


async def test_a_move_the_state_table_does_not_list_raises(harness):
    ledger = await harness.open()
    await ledger.close()
    with pytest.raises(IllegalStateTransition, match="from Closed to LedgerOpened"):
        ledger._transition(LedgerState.LEDGER_OPENED)
    assert ledger.state is LedgerState.CLOSED


# ---------------------------------------------------------------- orphan files


async def test_orphan_ledger_files_not_in_the_ledger_list_are_removed_on_open(harness):
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2)
    ledger = await harness.open(config)
    await append_many(ledger, range(4))
    listed = ledger.ledger_ids()
    next_id = ledger.current_ledger_id + 1
    valid_frames = ledger_file(harness, listed[0]).read_bytes()
    await ledger.close()
    # Leftovers of an interrupted deletion and of a crash just after creating a ledger.
    stale = ledger_file(harness, 0x99)
    stale.write_bytes(valid_frames)
    stale.with_suffix(".idx").write_bytes(b"\x00" * 8)
    ahead = ledger_file(harness, next_id)
    ahead.write_bytes(valid_frames)
    reopened = await harness.open(config)
    assert not stale.exists() and not stale.with_suffix(".idx").exists()
    assert sequence_ids(read_all(reopened)) == [0, 1, 2, 3]
    assert all(ledger_file(harness, ledger_id).exists() for ledger_id in reopened.ledger_ids())
    # The id the crash left a file at is used afresh, without the orphan's entries.
    assert await reopened.append(header(4), payload(4)) == Position(next_id, 0)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2, 3, 4]
    reopened = await harness.reopen(reopened, config)
    assert sequence_ids(read_all(reopened)) == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------- retention


async def three_full_ledgers(harness, config=None) -> tuple[ManagedLedger, list[Position]]:
    """Ledgers 0 and 1 closed, ledger 2 current; two entries each."""
    ledger = await harness.open(
        config
        or ManagedLedgerConfig(
            fsync=False, max_entries_per_ledger=2, cursor_flush_interval_s=3600.0
        )
    )
    positions = await append_many(ledger, range(6))
    assert ledger.ledger_ids() == [0, 1, 2] and ledger.current_ledger_id == 2
    return ledger, positions


async def test_retention_deletes_closed_ledgers_below_every_cursors_mark_delete(harness):
    ledger, positions = await three_full_ledgers(harness)
    fast, _ = ledger.open_cursor("fast", start_at_earliest=True)
    slow, _ = ledger.open_cursor("slow", start_at_earliest=True)
    fast.ack_cumulative(positions[5])
    slow.ack_cumulative(positions[2])  # ledger 0 and the first entry of ledger 1
    assert ledger.trim() == [0]
    assert ledger.ledger_ids() == [1, 2]
    assert not ledger_file(harness, 0).exists()
    assert not ledger_file(harness, 0).with_suffix(".idx").exists()
    assert sequence_ids(read_all(ledger)) == [2, 3, 4, 5]


async def test_retention_keeps_every_ledger_a_cursor_has_not_consumed(harness):
    ledger, positions = await three_full_ledgers(harness)
    fast, _ = ledger.open_cursor("fast", start_at_earliest=True)
    ledger.open_cursor("idle", start_at_earliest=True)
    fast.ack_cumulative(positions[5])
    assert ledger.trim() == []
    # One entry short of the end of ledger 0 is not enough either.
    idle = ledger.cursors["idle"]
    idle.ack_cumulative(positions[0])
    assert ledger.trim() == []
    assert ledger.ledger_ids() == [0, 1, 2]


async def test_retention_never_deletes_the_current_ledger(harness):
    ledger, positions = await three_full_ledgers(harness)
    cursor, _ = ledger.open_cursor("all", start_at_earliest=True)
    cursor.ack_cumulative(positions[5])  # every entry, the current ledger's included
    assert ledger.trim() == [0, 1]
    assert ledger.ledger_ids() == [2]
    assert ledger_file(harness, 2).exists()
    assert await ledger.append(header(6), payload(6)) == Position(3, 0)


async def test_retention_without_cursors_deletes_nothing(harness):
    ledger, _ = await three_full_ledgers(harness)
    assert ledger.trim() == []
    assert ledger.ledger_ids() == [0, 1, 2]


async def test_retention_never_deletes_past_the_trim_floor(harness):
    ledger, positions = await three_full_ledgers(harness)
    floor = positions[1]
    ledger.set_trim_floor(lambda: floor)
    cursor, _ = ledger.open_cursor("all", start_at_earliest=True)
    cursor.ack_cumulative(positions[5])
    assert ledger.trim() == [0]
    floor = positions[5]
    assert ledger.trim() == [1]


async def test_retention_time_keeps_consumed_ledgers_until_they_are_old_enough(harness, clock):
    config = ManagedLedgerConfig(
        fsync=False, max_entries_per_ledger=2, retention_time_s=60.0, cursor_flush_interval_s=3600.0
    )
    ledger, positions = await three_full_ledgers(harness, config)
    cursor, _ = ledger.open_cursor("all", start_at_earliest=True)
    cursor.ack_cumulative(positions[5])
    clock.now += 59.0
    assert ledger.trim() == []
    clock.now += 1.0
    assert ledger.trim() == [0, 1]


async def test_retention_runs_when_cursor_positions_are_flushed(harness):
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2, cursor_flush_interval_s=0.0)
    ledger, positions = await three_full_ledgers(harness, config)
    deleted: list[int] = []
    done = asyncio.Event()

    def on_deleted(ledger_id: int) -> None:
        deleted.append(ledger_id)
        done.set()

    ledger.add_ledger_deleted_listener(on_deleted)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[1])
    await asyncio.wait_for(done.wait(), 5)
    assert deleted == [0]
    assert ledger.ledger_ids() == [1, 2]


async def test_ledgers_deleted_by_retention_stay_deleted_after_reopen(harness):
    ledger, positions = await three_full_ledgers(harness)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[3])
    assert ledger.trim() == [0, 1]
    reopened = await harness.reopen(ledger)
    assert reopened.ledger_ids()[:1] == [2]
    assert sequence_ids(read_all(reopened)) == [4, 5]
    late, _ = reopened.open_cursor("late", start_at_earliest=True)
    assert late.mark_delete == Position(2, -1)


async def test_crash_during_retention_never_leaves_a_listed_ledger_without_its_file(
    harness, monkeypatch
):
    ledger, positions = await three_full_ledgers(harness)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[1])

    def crash_here() -> None:
        raise SystemExit("crash while persisting the ledger list")

    monkeypatch.setattr(ledger, "_persist_ledger_list", crash_here)
    with pytest.raises(SystemExit):
        ledger.trim()
    reopened = await harness.crash_and_reopen(ledger)
    for ledger_id in reopened.ledger_ids():
        assert ledger_file(harness, ledger_id).exists(), f"ledger {ledger_id} has no file"
    assert sequence_ids(read_all(reopened)) in ([0, 1, 2, 3, 4, 5], [2, 3, 4, 5])


@pytest.mark.parametrize("cached", [True, False], ids=["from-cache", "from-disk"])
async def test_a_byte_bounded_read_stops_before_max_bytes_and_returns_at_least_one(harness, cached):
    ledger = await harness.open()
    big = [await ledger.append(header(i), bytes(1000)) for i in range(6)]
    if not cached:
        ledger.cache.clear()
    start = big[0]
    # Each entry takes a little over 1000 bytes with its header: 2500 holds two.
    assert sequence_ids(ledger.read(start, 100, max_bytes=2500)) == [0, 1]
    assert sequence_ids(ledger.read(big[2], 100, max_bytes=2500)) == [2, 3]
    assert sequence_ids(ledger.read(start, 100, max_bytes=1)) == [0]
    assert sequence_ids(ledger.read(start, 100, max_bytes=10**9)) == list(range(6))
    assert sequence_ids(ledger.read(start, 100)) == list(range(6))
