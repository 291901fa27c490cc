"""Log offsets: stamped per entry by the ledger, found by binary search, kept over
restarts and crashes, derived by counting for entries written without them."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

import managed_ledger.ledger as ledger_module
from managed_ledger import EntryHeader, EntryType, ManagedLedgerConfig, Position, TxnId, disk
from managed_ledger.errors import StorageError

# Small ledgers, so lookups cross ledger boundaries.
SMALL_LEDGERS = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=4)


def data(messages: int) -> EntryHeader:
    return EntryHeader(num_messages=messages, producer_name="p")


def marker() -> EntryHeader:
    return EntryHeader(type=EntryType.TXN_ABORT, num_messages=0, txn_id=TxnId(0, 1))


async def append_sizes(ledger, sizes: list[int]) -> list[Position]:
    """One entry per size: a data entry of that many messages, a marker for 0."""
    return [
        await ledger.append(data(size) if size else marker(), b"x" * max(size, 1)) for size in sizes
    ]


def expected_bases(sizes: list[int], start: int = 0) -> list[int]:
    bases, offset = [], start
    for size in sizes:
        bases.append(offset)
        offset += max(size, 1)
    return bases


SIZES = [1, 3, 0, 2, 1, 5, 0, 0, 4, 1, 2]


async def test_every_message_and_marker_takes_the_next_offset(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, SIZES)
    entries = ledger.read(ledger.first_position(), 100)
    assert [entry.header.base_offset for entry in entries] == expected_bases(SIZES)
    assert ledger.offsets.end_offset == sum(max(size, 1) for size in SIZES)
    assert ledger.offsets.start_offset() == 0


async def test_each_offset_finds_the_entry_holding_it_across_ledgers(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    positions = await append_sizes(ledger, SIZES)
    assert len(ledger.ledger_ids()) > 2
    bases = expected_bases(SIZES)
    for index, (position, base) in enumerate(zip(positions, bases, strict=True)):
        for offset in range(base, base + max(SIZES[index], 1)):
            assert ledger.offsets.position_of(offset) == position, offset
    assert ledger.offsets.position_of(ledger.offsets.end_offset) is None


async def test_offset_after_a_position_is_the_next_entrys_base(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    positions = await append_sizes(ledger, SIZES)
    bases = expected_bases(SIZES)
    for position, following_base in zip(positions, bases[1:], strict=False):
        assert ledger.offsets.offset_after(position) == following_base
    assert ledger.offsets.offset_after(positions[-1]) == ledger.offsets.end_offset
    assert ledger.offsets.offset_after(ledger.first_position()) == 0


async def test_offsets_continue_after_a_clean_restart(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, SIZES)
    end = ledger.offsets.end_offset
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    assert ledger.offsets.end_offset == end
    [position] = await append_sizes(ledger, [2])
    assert ledger.read(position, 1)[0].header.base_offset == end
    assert ledger.offsets.position_of(end + 1) == position


async def test_offsets_continue_after_a_crash(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, SIZES)
    end = ledger.offsets.end_offset
    ledger = await harness.crash_and_reopen(ledger, SMALL_LEDGERS)
    assert ledger.offsets.end_offset == end
    [position] = await append_sizes(ledger, [3])
    assert ledger.offsets.position_of(end + 2) == position


async def test_a_failed_write_leaves_no_gap_in_the_offsets(harness, faulty_disk):
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, [2])
    faulty_disk.fail_writes(count=1)
    with pytest.raises(StorageError):
        await append_sizes(ledger, [5])
    [position] = await append_sizes(ledger, [1])
    assert ledger.read(position, 1)[0].header.base_offset == 2


class HeldDisk(disk.FaultyDisk):
    """A disk whose next write waits until released: a write in flight, for as long
    as the test needs; it may then fail (fail_writes) as a FaultyDisk's does."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.entered = threading.Event()
        self.released = threading.Event()

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.holding.is_set():
            self.holding.clear()
            self.entered.set()
            assert self.released.wait(10.0), "the test never released the write"
        return super().pwrite(fd, data, offset)


@pytest.fixture
def held_disk():
    held = HeldDisk()
    previous = disk.install(held)
    yield held
    held.released.set()
    disk.install(previous)


@pytest.mark.parametrize("outcome", ["written", "failed"])
async def test_the_end_offset_counts_no_entry_still_being_written(
    harness, held_disk, wait_for, outcome
):
    ledger = await harness.open(SMALL_LEDGERS)
    [first] = await append_sizes(ledger, [2])
    offsets = ledger.offsets
    assert offsets.end_offset == 2
    held_disk.holding.set()
    in_flight = asyncio.ensure_future(append_sizes(ledger, [5]))
    await wait_for(held_disk.entered.is_set, 5.0, "the write to reach the disk")
    # Stamped 2..6 but not durable: no reader may be told of those offsets.
    assert offsets.end_offset == 2
    assert offsets.offset_after(first) == 2
    assert offsets.position_of(2) is None
    if outcome == "failed":
        held_disk.fail_writes(count=1)
    held_disk.released.set()
    if outcome == "failed":
        with pytest.raises(StorageError):
            await in_flight
        assert offsets.end_offset == 2
        [following] = await append_sizes(ledger, [1])
        assert ledger.read(following, 1)[0].header.base_offset == 2  # consecutive
        assert offsets.end_offset == 3
    else:
        [written] = await in_flight
        assert offsets.end_offset == 7
        assert offsets.position_of(6) == written


def _without_base_offset(encoded: bytes, _base: int) -> bytes:
    """What a broker from before offsets wrote: the same header, no base offset."""
    return dataclasses.replace(EntryHeader.decode(encoded), base_offset=None).encode()


async def test_entries_written_before_offsets_are_numbered_by_count(harness, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(ledger_module, "stamp_base_offset", _without_base_offset)
        ledger = await harness.open(SMALL_LEDGERS)
        old = await append_sizes(ledger, SIZES)
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    assert all(entry.header.base_offset is None for entry in ledger.read(old[0], 100))
    bases = expected_bases(SIZES)
    assert ledger.offsets.end_offset == bases[-1] + max(SIZES[-1], 1)
    assert [ledger.offsets.position_of(base) for base in bases] == old
    [new] = await append_sizes(ledger, [2])
    assert ledger.read(new, 1)[0].header.base_offset == bases[-1] + max(SIZES[-1], 1)
    # Once a stamped entry exists, the old ones are counted back from it: the same.
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    assert [ledger.offsets.position_of(base) for base in bases] == old
    assert [ledger.offsets.base_of(e) for e in ledger.read(old[0], len(old))] == bases


async def test_retention_moves_the_start_offset_and_keeps_the_others(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    positions = await append_sizes(ledger, SIZES)
    bases = expected_bases(SIZES)
    assert ledger.offsets.position_of(bases[1]) == positions[1]  # cached, then trimmed
    cursor, _ = ledger.open_cursor("reader", start_at_earliest=True)
    cursor.ack_cumulative(positions[5])  # past the first ledger (4 entries)
    assert ledger.trim() == [positions[0].ledger_id]
    assert ledger.offsets.start_offset() == bases[4]
    # A trimmed offset finds the first retained entry; the rest are where they were.
    assert ledger.offsets.position_of(bases[1]) == positions[4]
    assert [ledger.offsets.position_of(b) for b in bases[4:]] == positions[4:]
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    assert ledger.offsets.start_offset() == bases[4]
    assert ledger.offsets.end_offset == bases[-1] + max(SIZES[-1], 1)


async def _consume_all_and_trim(harness, ledger, config):
    """Acknowledge the whole log, reopen (the current ledger is sealed), and let
    retention delete every ledger."""
    cursor, _ = ledger.open_cursor("reader", start_at_earliest=True)
    cursor.ack_cumulative(ledger.last_confirmed)
    ledger = await harness.reopen(ledger, config)
    deleted = ledger.trim()
    assert deleted and not ledger.ledger_ids(), deleted
    return ledger


async def test_offsets_never_go_back_once_retention_deleted_every_ledger(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, SIZES)
    end = ledger.offsets.end_offset
    last_ledger = ledger.last_confirmed.ledger_id
    ledger = await _consume_all_and_trim(harness, ledger, SMALL_LEDGERS)
    # Empty: the log start and the end both stay where the end was.
    assert ledger.offsets.end_offset == end
    assert ledger.offsets.start_offset() == end
    for reopen in (harness.reopen, harness.crash_and_reopen):
        ledger = await reopen(ledger, SMALL_LEDGERS)
        assert ledger.offsets.end_offset == end
        assert ledger.offsets.start_offset() == end
        assert ledger.offsets.offset_after(ledger.first_position()) == end
    [position] = await append_sizes(ledger, [2])
    assert ledger.read(position, 1)[0].header.base_offset == end
    assert ledger.offsets.position_of(end) == position
    # A message id is never given again either: the ledger id is a new one.
    assert position.ledger_id > last_ledger


async def test_the_stored_end_lands_with_the_list_retention_shortened(harness):
    """Crash right after trim(): the list it wrote (one LMDB write) already carries
    the log end, so no window lets the offsets restart from 0."""
    ledger = await harness.open(SMALL_LEDGERS)
    await append_sizes(ledger, SIZES)
    end = ledger.offsets.end_offset
    ledger = await _consume_all_and_trim(harness, ledger, SMALL_LEDGERS)
    stored = harness.store.get_json(ledger_module.LEDGERS_DB, harness.name)
    assert stored["ledgers"] == [] and stored["next_offset"] == end
    ledger = await harness.crash_and_reopen(ledger, SMALL_LEDGERS)
    assert ledger.offsets.end_offset == end


async def test_ledger_ids_stay_above_every_id_listed_even_if_the_counter_lags(harness):
    ledger = await harness.open(SMALL_LEDGERS)
    positions = await append_sizes(ledger, SIZES)
    await ledger.close()
    stored = harness.store.get_json(ledger_module.LEDGERS_DB, harness.name)
    stored["next_ledger_id"] = 0  # as a list written by a buggy or older writer
    harness.store.put_json(ledger_module.LEDGERS_DB, harness.name, stored)
    ledger = await harness.open(SMALL_LEDGERS)
    [position] = await append_sizes(ledger, [1])
    assert position.ledger_id > positions[-1].ledger_id


async def test_old_entries_trimmed_before_a_stamped_one_keep_their_numbers(harness, monkeypatch):
    """A log written before offsets, partly trimmed by this version: its entries keep
    the offsets they were told (counted back from the stored end), not from 0."""
    with monkeypatch.context() as patch:
        patch.setattr(ledger_module, "stamp_base_offset", _without_base_offset)
        ledger = await harness.open(SMALL_LEDGERS)
        old = await append_sizes(ledger, SIZES)
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    bases = expected_bases(SIZES)
    end = ledger.offsets.end_offset
    cursor, _ = ledger.open_cursor("reader", start_at_earliest=True)
    cursor.ack_cumulative(old[5])
    assert ledger.trim() == [old[0].ledger_id]
    ledger = await harness.reopen(ledger, SMALL_LEDGERS)
    assert ledger.offsets.end_offset == end
    assert ledger.offsets.start_offset() == bases[4]
    assert [ledger.offsets.position_of(base) for base in bases[4:]] == old[4:]
