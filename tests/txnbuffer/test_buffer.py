"""TransactionBuffer over a real ManagedLedger: DESIGN.md's transaction buffer rules 1-5,
recovery, readiness, and the aborted-transaction index behind Kafka-style pull reads.

READ_COMMITTED is checked the way the dispatcher reads: `CommittedReadView.bound()` over
`ledger.read`, minus what `should_skip` drops. READ_UNCOMMITTED uses `LogReadView`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time

import pytest

from dispatcher.read_view import CommittedReadView, LogReadView, ReadView
from managed_ledger import (
    Entry,
    EntryHeader,
    EntryType,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    TxnId,
)
from txnbuffer import (
    AbortedTxn,
    BufferState,
    SnapshotPolicy,
    TransactionBuffer,
    TransactionEndedError,
)
from txnbuffer.snapshot import SNAPSHOTS_DB

COORDINATOR = 1
OTHER_COORDINATOR = 2
WAIT_S = 5.0


def txn(sequence: int, coordinator: int = COORDINATOR) -> TxnId:
    return TxnId(coordinator, sequence)


def before(position: Position) -> Position:
    return Position(position.ledger_id, position.entry_id - 1)


async def publish(
    buffer: TransactionBuffer, payload: bytes, txn_id: TxnId | None = None
) -> Position:
    """What the broker's Topic.publish does: transactional appends pass the buffer first.
    Entries come from a named producer, "writer-" and the payload's first letter."""
    name = f"writer-{payload[:1].decode()}"
    header = EntryHeader(producer_name=name, sequence_id=next(_sequences), txn_id=txn_id)
    if txn_id is None:
        return await buffer.ledger.append(header, payload)
    await buffer.before_append(txn_id)
    try:
        return await buffer.ledger.append(header, payload)
    finally:
        buffer.after_append(txn_id)


_sequences = itertools.count()


def all_entries(ledger: ManagedLedger) -> list[Entry]:
    return ledger.read(ledger.first_position().next_in_ledger(), 1_000_000)


def visible(view: ReadView, ledger: ManagedLedger) -> list[bytes]:
    """Payloads a subscription with this view would be delivered, in log order."""
    entries = ledger.read(ledger.first_position().next_in_ledger(), 1_000_000, view.bound())
    return [entry.payload for entry in entries if not view.should_skip(entry)]


def read_committed(buffer: TransactionBuffer) -> list[bytes]:
    return visible(CommittedReadView(buffer), buffer.ledger)


def read_uncommitted(buffer: TransactionBuffer) -> list[bytes]:
    return visible(LogReadView(buffer.ledger), buffer.ledger)


def markers(ledger: ManagedLedger) -> list[tuple[EntryType, TxnId]]:
    return [(e.header.type, e.header.txn_id) for e in all_entries(ledger) if e.header.is_marker]


class ZombieAborter:
    """Wired like the broker's Topic: schedule buffer.end(txn, abort, watermark)."""

    def __init__(self, buffer: TransactionBuffer):
        self.buffer = buffer
        self.calls: list[tuple[TxnId, int]] = []
        self.tasks: list[asyncio.Task] = []
        buffer.set_zombie_aborter(self)

    def __call__(self, txn_id: TxnId, low_watermark: int) -> None:
        self.calls.append((txn_id, low_watermark))
        self.tasks.append(asyncio.create_task(self.buffer.end(txn_id, False, low_watermark)))

    async def settle(self) -> None:
        await asyncio.wait_for(asyncio.gather(*self.tasks), WAIT_S)


class MaxReadPositionWatch:
    """Records maxReadPosition after every durable batch (an entry listener after the buffer's)."""

    def __init__(self, buffer: TransactionBuffer):
        self.buffer = buffer
        self.seen = [buffer.max_read_position]
        buffer.ledger.add_entry_listener(self._on_entries)

    def _on_entries(self, _entries: list[Entry]) -> None:
        self.seen.append(self.buffer.max_read_position)

    def assert_never_moved_backwards(self) -> None:
        assert self.seen == sorted(self.seen), self.seen


# ---------------------------------------------------------------- rule 1


async def test_plain_append_moves_max_read_position_only_when_nothing_is_ongoing(buffer):
    m1 = await publish(buffer, b"m1")
    assert buffer.max_read_position == m1

    t1 = await publish(buffer, b"t1", txn(1))
    await publish(buffer, b"m2")
    await publish(buffer, b"m3")
    assert buffer.max_read_position == before(t1) == m1

    await buffer.end(txn(1), True, 0)
    marker = buffer.ledger.last_confirmed
    assert buffer.max_read_position == marker

    m4 = await publish(buffer, b"m4")
    assert buffer.max_read_position == m4


# ---------------------------------------------------------------- rule 2


async def test_transactional_append_records_only_the_first_position(buffer):
    first = await publish(buffer, b"a1", txn(1))
    for index in range(2, 6):
        await publish(buffer, f"a{index}".encode(), txn(1))
    assert buffer.ongoing == {txn(1): first}
    assert buffer.max_read_position == before(first)


async def test_ongoing_is_ordered_by_first_position(buffer):
    b1 = await publish(buffer, b"b1", txn(2))
    a1 = await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"b2", txn(2))
    assert list(buffer.ongoing.items()) == [(txn(2), b1), (txn(1), a1)]


# ---------------------------------------------------------------- rule 3: the example


async def test_read_committed_sees_only_the_plain_entry_before_an_open_txn(buffer):
    await publish(buffer, b"m1")
    await publish(buffer, b"m2", txn(1))
    await publish(buffer, b"m3")
    assert read_committed(buffer) == [b"m1"]
    assert read_uncommitted(buffer) == [b"m1", b"m2", b"m3"]


async def test_commit_releases_the_txn_entry_and_the_plain_entry_behind_it(buffer):
    await publish(buffer, b"m1")
    await publish(buffer, b"m2", txn(1))
    await publish(buffer, b"m3")
    await buffer.end(txn(1), True, 0)
    assert read_committed(buffer) == [b"m1", b"m2", b"m3"]
    assert buffer.max_read_position == buffer.ledger.last_confirmed
    assert txn(1) not in buffer.aborted


async def test_abort_releases_the_plain_entry_and_hides_the_txn_entry(buffer):
    await publish(buffer, b"m1")
    m2 = await publish(buffer, b"m2", txn(1))
    await publish(buffer, b"m3")
    await buffer.end(txn(1), False, 0)
    marker = buffer.ledger.last_confirmed
    assert read_committed(buffer) == [b"m1", b"m3"]
    assert read_uncommitted(buffer) == [b"m1", b"m2", b"m3"]  # markers never delivered
    assert buffer.aborted_txn(txn(1)) == AbortedTxn(txn(1), m2, marker, marker)


# ---------------------------------------------------------------- rule 3: interleaving


async def test_committing_the_later_of_two_interleaved_txns_releases_nothing(buffer):
    a1 = await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"b1", txn(2))
    await publish(buffer, b"a2", txn(1))
    await publish(buffer, b"b2", txn(2))
    assert buffer.max_read_position == before(a1)

    await buffer.end(txn(2), True, 0)
    assert buffer.max_read_position == before(a1)
    assert read_committed(buffer) == []


async def test_committing_the_earlier_txn_releases_exactly_up_to_the_later_txns_first_entry(buffer):
    await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"p1")
    b1 = await publish(buffer, b"b1", txn(2))
    await publish(buffer, b"a2", txn(1))
    await publish(buffer, b"b2", txn(2))

    await buffer.end(txn(1), True, 0)
    assert buffer.max_read_position == before(b1)
    assert read_committed(buffer) == [b"a1", b"p1"]

    await buffer.end(txn(2), True, 0)
    assert buffer.max_read_position == buffer.ledger.last_confirmed
    assert read_committed(buffer) == [b"a1", b"p1", b"b1", b"a2", b"b2"]


async def test_abort_of_head_txn_moves_max_read_position_to_next_ongoing(buffer):
    await publish(buffer, b"a1", txn(1))
    b1 = await publish(buffer, b"b1", txn(2))
    await publish(buffer, b"c1", txn(3))
    await buffer.end(txn(1), False, 0)
    assert buffer.max_read_position == before(b1)
    assert buffer.aborted_txn(txn(1)).max_read_position_after == before(b1)
    assert read_committed(buffer) == []


async def test_end_of_a_txn_with_no_entries_here_writes_a_marker_and_keeps_the_head(buffer):
    a1 = await publish(buffer, b"a1", txn(1))
    await buffer.end(txn(2), True, 0)
    assert markers(buffer.ledger) == [(EntryType.TXN_COMMIT, txn(2))]
    assert buffer.max_read_position == before(a1)


# ---------------------------------------------------------------- rule 3: idempotent end


@pytest.mark.parametrize("commit", [True, False])
async def test_ending_an_ended_txn_again_is_a_no_op(buffer, commit):
    await publish(buffer, b"a1", txn(1))
    await buffer.end(txn(1), commit, 0)
    lac = buffer.ledger.last_confirmed
    aborted = dict(buffer.aborted)

    await buffer.end(txn(1), commit, 0)
    await buffer.end(txn(1), not commit, 0)  # a confused retry does not change the outcome

    assert buffer.ledger.last_confirmed == lac
    assert len(markers(buffer.ledger)) == 1
    assert buffer.aborted == aborted


async def test_concurrent_ends_of_one_txn_write_one_marker(buffer):
    await publish(buffer, b"a1", txn(1))
    await asyncio.gather(*[buffer.end(txn(1), True, 0) for _ in range(5)])
    assert markers(buffer.ledger) == [(EntryType.TXN_COMMIT, txn(1))]


async def test_end_waits_for_in_flight_appends_and_refuses_new_ones(buffer):
    await publish(buffer, b"a1", txn(1))
    await buffer.before_append(txn(1))  # an append admitted, not yet written
    ending = asyncio.create_task(buffer.end(txn(1), True, 0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ending.done()  # held back by the in-flight append
    with pytest.raises(TransactionEndedError):
        await buffer.before_append(txn(1))

    late = await buffer.ledger.append(EntryHeader(txn_id=txn(1)), b"a2")
    buffer.after_append(txn(1))
    await asyncio.wait_for(ending, WAIT_S)

    marker = buffer.ledger.last_confirmed
    assert marker > late
    assert read_committed(buffer) == [b"a1", b"a2"]


# ---------------------------------------------------------------- rule 4: low watermark


async def test_marker_low_watermark_aborts_zombie_txn_of_the_same_coordinator(buffer):
    aborter = ZombieAborter(buffer)
    await publish(buffer, b"z1", txn(2))  # ended at its coordinator; its marker never came here
    await publish(buffer, b"x1", txn(3))
    await publish(buffer, b"p1")

    await buffer.end(txn(3), True, 2)  # the coordinator: every sequence <= 2 has ended
    assert aborter.calls == [(txn(2), 2)]
    await aborter.settle()

    assert markers(buffer.ledger) == [
        (EntryType.TXN_COMMIT, txn(3)),
        (EntryType.TXN_ABORT, txn(2)),
    ]
    assert buffer.ongoing == {}
    assert txn(2) in buffer.aborted
    assert buffer.max_read_position == buffer.ledger.last_confirmed
    assert read_committed(buffer) == [b"x1", b"p1"]


async def test_watermark_leaves_txns_above_it_and_of_other_coordinators_alone(buffer):
    aborter = ZombieAborter(buffer)
    await publish(buffer, b"y1", txn(5))
    await publish(buffer, b"w1", txn(1, OTHER_COORDINATOR))
    await buffer.end(txn(3), True, 4)
    await aborter.settle()
    assert aborter.calls == []
    assert set(buffer.ongoing) == {txn(5), txn(1, OTHER_COORDINATOR)}


async def test_zombie_at_the_watermark_itself_is_aborted(buffer):
    aborter = ZombieAborter(buffer)
    await publish(buffer, b"z", txn(4))
    await buffer.end(txn(5), False, 4)
    await aborter.settle()
    assert aborter.calls == [(txn(4), 4)]
    assert txn(4) in buffer.aborted


@pytest.mark.parametrize("sequence", [2, 3])
async def test_append_at_or_below_the_watermark_is_refused_and_nothing_is_written(buffer, sequence):
    await buffer.end(txn(9), True, 3)
    lac = buffer.ledger.last_confirmed
    with pytest.raises(TransactionEndedError):
        await publish(buffer, b"late", txn(sequence))
    assert buffer.ledger.last_confirmed == lac
    assert txn(sequence) not in buffer.ongoing

    await publish(buffer, b"fresh", txn(4))  # above the watermark: fine
    assert txn(4) in buffer.ongoing


@pytest.mark.parametrize("commit", [True, False])
async def test_append_to_a_txn_ended_here_is_refused_and_nothing_is_written(buffer, commit):
    await publish(buffer, b"a1", txn(1))
    await buffer.end(txn(1), commit, 0)
    lac = buffer.ledger.last_confirmed
    with pytest.raises(TransactionEndedError):
        await publish(buffer, b"late", txn(1))
    assert buffer.ledger.last_confirmed == lac


async def test_late_entry_of_an_ended_txn_is_never_visible_to_read_committed(buffer):
    # An append admitted before the watermark rose lands after it: never visible.
    await buffer.before_append(txn(2))
    await buffer.end(txn(3), True, 2)
    await buffer.ledger.append(EntryHeader(txn_id=txn(2)), b"late")
    buffer.after_append(txn(2))
    await publish(buffer, b"p")
    assert txn(2) not in buffer.ongoing
    assert read_committed(buffer) == [b"p"]
    assert read_uncommitted(buffer) == [b"late", b"p"]


# ---------------------------------------------------------------- rule 5: cleanup


async def test_aborted_txn_is_forgotten_when_retention_deletes_the_ledger_of_its_marker(
    open_ledger,
):
    ledger = await open_ledger(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    cursor, _ = ledger.open_cursor("sub", start_at_earliest=True)

    await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"p1")
    await buffer.end(txn(1), False, 0)  # ledger 0: a1, p1, abort marker
    first_ledger = buffer.aborted_txn(txn(1)).marker_position.ledger_id
    await publish(buffer, b"p2")  # rolls over
    assert ledger.current_ledger_id != first_ledger
    assert not buffer.abort_index.txn_index_empty(first_ledger)

    cursor.ack_cumulative(ledger.last_confirmed)
    assert ledger.trim() == [first_ledger]

    assert txn(1) not in buffer.aborted
    assert len(buffer.abort_index) == 0
    assert buffer.abort_index.txn_index_empty(first_ledger)


async def test_commit_is_forgotten_with_the_ledger_of_its_marker_as_a_replay_would(open_ledger):
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3)
    ledger = await open_ledger(config)
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    cursor, _ = ledger.open_cursor("sub", start_at_earliest=True)

    await publish(buffer, b"c1", txn(1))
    await publish(buffer, b"p1")
    await buffer.end(txn(1), True, 0)  # ledger 0: c1, p1, commit marker (above watermark 0)
    await publish(buffer, b"p2")  # rolls over
    assert txn(1) in buffer.committed
    cursor.ack_cumulative(ledger.last_confirmed)
    assert ledger.trim() == [0]
    assert txn(1) not in buffer.committed

    live = snapshot(buffer)
    buffer.close(snapshot=False)
    await ledger.close()
    replayed = TransactionBuffer(await open_ledger(config))
    await replayed.recover()
    assert not replayed.recovered_from_snapshot
    assert snapshot(replayed) == live


async def test_abort_is_kept_while_the_ledger_of_its_marker_is_retained(open_ledger):
    ledger = await open_ledger(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    cursor, _ = ledger.open_cursor("sub", start_at_earliest=True)

    a1 = await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"p1")
    await buffer.end(txn(1), False, 0)  # its marker opens the second ledger
    await publish(buffer, b"p2")
    await publish(buffer, b"p3")  # third ledger
    marker = buffer.aborted_txn(txn(1)).marker_position
    assert marker.ledger_id > a1.ledger_id

    cursor.ack_cumulative(Position(marker.ledger_id, -1))  # consumed the data ledger only
    assert ledger.trim() == [a1.ledger_id]
    assert txn(1) in buffer.aborted
    # A retried end is still recognised, and a late append still refused.
    lac = ledger.last_confirmed
    await buffer.end(txn(1), False, 0)
    with pytest.raises(TransactionEndedError):
        await publish(buffer, b"late", txn(1))
    assert ledger.last_confirmed == lac


async def test_retention_never_trims_past_max_read_position(open_ledger):
    ledger = await open_ledger(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=2))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    # A READ_UNCOMMITTED subscription that consumes everything.
    cursor, _ = ledger.open_cursor("ru", start_at_earliest=True)

    await publish(buffer, b"p0")
    p1 = await publish(buffer, b"p1")  # ledger 0 full
    t1 = await publish(buffer, b"t1", txn(1))  # ledger 1
    for index in range(2, 7):
        await publish(buffer, f"p{index}".encode())
    cursor.ack_cumulative(ledger.last_confirmed)

    deleted = ledger.trim()
    assert deleted == [0]  # ledger 1 holds t1, which READ_COMMITTED has not seen yet
    assert t1.ledger_id in ledger.ledger_ids()
    assert buffer.max_read_position == p1  # the entry just before t1
    assert read_committed(buffer) == []  # p0, p1 went with ledger 0; t1 is not visible

    await buffer.end(txn(1), True, 0)
    assert t1.ledger_id in ledger.trim()
    assert buffer.max_read_position == ledger.last_confirmed


# ---------------------------------------------------------------- recovery and readiness


def snapshot(buffer: TransactionBuffer) -> dict:
    return {
        "ongoing": list(buffer.ongoing.items()),
        "aborted": dict(buffer.aborted),
        "abort_index": buffer.abort_index.all(),
        "committed": dict(buffer.committed),
        "low_watermarks": dict(buffer.low_watermarks),
        "late_positions": list(buffer.late_positions),
        "max_read_position": buffer.max_read_position,
        "producers": dict(buffer.producers.persisted),
    }


# How the buffer stopped and what it left in LMDB, and whether recovery replays
# everything ("full"), nothing, or the tail after a snapshot taken midway.
RECOVERY_CASES = {
    "clean close: snapshot of everything": ("close", "none"),
    "crash after a snapshot midway: the tail is replayed": ("midway", "tail"),
    "crash with no snapshot: the whole log is replayed": ("crash", "full"),
    "corrupt snapshot: the whole log is replayed": ("corrupt", "full"),
    "corrupt aborted-txn record: the whole log is replayed": ("corrupt abort", "full"),
}


@pytest.mark.parametrize("case", RECOVERY_CASES)
async def test_recover_on_a_reopened_ledger_rebuilds_the_live_state(
    open_ledger, store, caplog, case
):
    how, replayed = RECOVERY_CASES[case]
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=4)
    ledger = await open_ledger(config)
    # Only the snapshots this test asks for: none by count or by timer.
    buffer = TransactionBuffer(ledger, SnapshotPolicy(every_changes=10**9, interval_s=3600))
    aborter = ZombieAborter(buffer)
    watch = MaxReadPositionWatch(buffer)
    await buffer.recover()

    await publish(buffer, b"p0")
    await publish(buffer, b"a1", txn(1))
    await publish(buffer, b"b1", txn(2))
    await publish(buffer, b"z1", txn(3))  # becomes a zombie
    await publish(buffer, b"p1")
    await publish(buffer, b"a2", txn(1))
    await buffer.end(txn(1), False, 0)
    await publish(buffer, b"c1", txn(5))
    if how in ("midway", "corrupt", "corrupt abort"):
        buffer.take_snapshot()
    snapshot_position = buffer.applied_position
    await publish(buffer, b"w1", txn(1, OTHER_COORDINATOR))
    await buffer.end(txn(2), True, 0)  # txn 2 began before the snapshot, ends after it
    await buffer.end(txn(4), True, 3)  # watermark 3: txn 3 is a zombie
    await aborter.settle()
    await publish(buffer, b"d1", txn(6))
    await publish(buffer, b"p2")
    await buffer.end(txn(1, OTHER_COORDINATOR), False, 0)
    await buffer.end(txn(5), True, 4)
    assert set(buffer.ongoing) == {txn(6)}
    assert len(ledger.ledger_ids()) > 2
    watch.assert_never_moved_backwards()

    live = snapshot(buffer)
    live_view = read_committed(buffer)
    buffer.close(snapshot=how == "close")  # otherwise a crash: nothing more is written
    await ledger.close()
    if how.startswith("corrupt"):
        key = buffer.snapshots._meta_key
        if how == "corrupt abort":
            ((key, _),) = store.scan_prefix(SNAPSHOTS_DB, buffer.snapshots._abort_prefix)
        damaged = bytearray(store.get(SNAPSHOTS_DB, key))
        damaged[len(damaged) // 2] ^= 0xFF
        store.put(SNAPSHOTS_DB, key, bytes(damaged))

    reopened = await open_ledger(config)
    recovered = TransactionBuffer(reopened)
    ZombieAborter(recovered)
    assert recovered.state is BufferState.INITIALIZING
    await recovered.recover()
    assert recovered.state is BufferState.READY
    assert snapshot(recovered) == live
    assert recovered.max_read_position >= live["max_read_position"]
    assert read_committed(recovered) == live_view
    log_entries = all_entries(reopened)
    expected_replay = {
        "none": 0,
        "full": len(log_entries),
        "tail": len([e for e in log_entries if e.position > snapshot_position]),
    }[replayed]
    assert recovered.replayed_entries == expected_replay
    assert recovered.recovered_from_snapshot is (replayed != "full")
    assert ("checksum mismatch" in caplog.text) is how.startswith("corrupt")


async def test_state_is_initializing_until_recover_then_ready(ledger):
    buffer = TransactionBuffer(ledger)
    assert buffer.state is BufferState.INITIALIZING
    await buffer.recover()
    assert buffer.state is BufferState.READY
    buffer.close()
    assert buffer.state is BufferState.CLOSED


async def test_before_append_waits_until_ready(ledger):
    buffer = TransactionBuffer(ledger)
    admitted = asyncio.create_task(buffer.before_append(txn(1)))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not admitted.done()

    await buffer.recover()
    await asyncio.wait_for(admitted, WAIT_S)
    position = await ledger.append(EntryHeader(txn_id=txn(1)), b"a1")
    buffer.after_append(txn(1))
    assert buffer.ongoing == {txn(1): position}


async def test_end_waits_until_ready(ledger):
    buffer = TransactionBuffer(ledger)
    ending = asyncio.create_task(buffer.end(txn(1), True, 0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not ending.done()
    assert markers(ledger) == []
    await buffer.recover()
    await asyncio.wait_for(ending, WAIT_S)
    assert markers(ledger) == [(EntryType.TXN_COMMIT, txn(1))]


async def test_plain_append_while_initializing_is_neither_lost_nor_reordered(open_ledger):
    ledger = await open_ledger()
    first = TransactionBuffer(ledger)
    await first.recover()
    await publish(first, b"m1")
    await publish(first, b"t1", txn(1))
    first.close()
    await ledger.close()

    reopened = await open_ledger()
    buffer = TransactionBuffer(reopened)
    stable_before = buffer.stable_position
    # Plain appends do not wait for the buffer; READ_COMMITTED sees nothing new yet.
    await reopened.append(EntryHeader(), b"m2")
    assert buffer.stable_position == stable_before
    assert read_committed(buffer) == []

    await buffer.recover()
    assert read_committed(buffer) == [b"m1"]  # t1 is still open: m2 waits behind it
    await buffer.end(txn(1), True, 0)
    assert read_committed(buffer) == [b"m1", b"t1", b"m2"]


async def test_max_read_position_never_moves_backwards(buffer):
    watch = MaxReadPositionWatch(buffer)
    aborter = ZombieAborter(buffer)
    await publish(buffer, b"p")
    await publish(buffer, b"a", txn(1))
    await publish(buffer, b"b", txn(2))
    await publish(buffer, b"c", txn(3))
    await publish(buffer, b"p")
    await buffer.end(txn(2), True, 0)  # not the head
    await buffer.end(txn(1), False, 0)  # head: moves to before c
    await publish(buffer, b"d", txn(4))
    await buffer.end(txn(5), True, 3)  # watermark: txn 3 is a zombie
    await aborter.settle()
    await buffer.end(txn(4), True, 5)
    await publish(buffer, b"p")
    watch.assert_never_moved_backwards()
    assert len(set(watch.seen)) > 4


async def test_a_snapshot_older_than_a_retention_deletion_keeps_the_stable_position(
    open_ledger,
):
    # Found by the model test: a snapshot of the empty topic, then a plain entry (no
    # change, so a clean close takes no new snapshot), retention deletes its ledger,
    # a crash: loading the old snapshot took the stable position back behind it.
    only_when_asked = SnapshotPolicy(every_changes=10**9, interval_s=3600)
    ledger = await open_ledger()
    buffer = TransactionBuffer(ledger, only_when_asked)
    await buffer.recover()
    buffer.take_snapshot()
    stable = await publish(buffer, b"p")
    assert buffer.stable_position == stable
    buffer.close()
    await ledger.close()

    ledger = await open_ledger()  # the entry's ledger is closed; retention can delete it
    buffer = TransactionBuffer(ledger, only_when_asked)
    await buffer.recover()
    cursor, _ = ledger.open_cursor("retention", start_at_earliest=True)
    cursor.ack_cumulative(stable)
    ledger.trim()
    assert stable.ledger_id not in ledger.ledger_ids()
    buffer.close(snapshot=False)  # a crash
    await ledger.close()

    recovered = TransactionBuffer(await open_ledger())
    await recovered.recover()
    assert recovered.recovered_from_snapshot
    assert recovered.max_read_position >= stable
    assert recovered.stable_position >= stable


async def test_a_snapshot_past_what_its_ledger_holds_is_not_loaded_and_the_log_replayed(
    open_ledger,
):
    # A copy of a replicated log may hold a snapshot from another copy: one whose
    # position its ledger does not hold (below the LAC, past that ledger's end) would
    # describe entries this log does not have.
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3)
    ledger = await open_ledger(config)
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    positions = [await publish(buffer, b"p%d" % i) for i in range(5)]
    assert positions[-1].ledger_id > positions[0].ledger_id
    buffer.take_snapshot()
    snapshot = buffer.snapshots.read()
    snapshot.position = Position(positions[0].ledger_id, 50)
    assert snapshot.position < ledger.last_confirmed
    buffer.snapshots.write(snapshot, [], [])
    buffer.close(snapshot=False)
    await ledger.close()

    recovered = TransactionBuffer(await open_ledger(config))
    await recovered.recover()
    assert not recovered.recovered_from_snapshot
    assert recovered.replayed_entries == 5
    assert recovered.stable_position == positions[-1]


async def test_snapshots_by_count_wait_for_as_many_changes_as_there_are_open_transactions(
    ledger,
):
    # A snapshot records every open transaction: with more open than every_changes,
    # taking one every every_changes would cost each change more as more are open.
    buffer = TransactionBuffer(ledger, SnapshotPolicy(every_changes=2, interval_s=3600))
    await buffer.recover()
    for sequence in (1, 2):
        await publish(buffer, b"o", txn(sequence))
    assert buffer.snapshots_taken == 1  # 2 changes, 2 open
    for sequence in range(3, 7):
        await publish(buffer, b"o", txn(sequence))
        await publish(buffer, b"p")  # plain entries are no change
    assert buffer.snapshots_taken == 1  # 4 changes, but 6 open
    await buffer.end(txn(1), True, 0)
    assert buffer.snapshots_taken == 2  # 5 changes, 5 open
    assert [t for t, _ in buffer.snapshots.read().ongoing] == [txn(s) for s in range(2, 7)]
    for sequence in (2, 3):
        await buffer.end(txn(sequence), True, 0)
    assert buffer.snapshots_taken == 2  # 2 changes, 3 open
    await buffer.end(txn(4), True, 0)
    assert buffer.snapshots_taken == 3  # 3 changes, 2 open
    buffer.close(snapshot=False)


# ---------------------------------------------------------------- the aborted-transaction index

# Kafka's design ("Exactly Once Delivery and Transactional Messaging in Kafka", sections
# "Aborted Transaction Index" and fetch handling, step 4) describes the index entries
# (PID, first offset, last offset, LSO at abort) and the scan that stops at an entry whose
# LSO reaches the end of the fetch. We could not find the P1/P2 figure over offsets 0-10
# itself, so this is an equivalent log built for the same purpose: two producers, two
# aborts, one ledger, offset N = Position(0, N). P1's and P2's successive transactions
# get their own TxnIds, as Pulsar's do.
#
#   0  P1 data   A         A aborts at 3: maxReadPosition after = 0 (B open since 1)
#   1  P2 data   B
#   2  P1 data   A
#   3  ABORT A
#   4  P2 data   B
#   5  P1 data   C
#   6  COMMIT B             maxReadPosition -> 4 (C open since 5)
#   7  P1 data   C
#   8  P2 data   D
#   9  ABORT C             C aborts at 9: maxReadPosition after = 7 (D open since 8)
#  10  COMMIT D             maxReadPosition -> 10
A, B, C, D, E = txn(1), txn(2), txn(3), txn(4), txn(5)
KAFKA_LOG: list[tuple[str, TxnId]] = [
    ("data", A),
    ("data", B),
    ("data", A),
    ("abort", A),
    ("data", B),
    ("data", C),
    ("commit", B),
    ("data", C),
    ("data", D),
    ("abort", C),
    ("commit", D),
]


async def write_kafka_log(buffer: TransactionBuffer) -> None:
    for offset, (kind, txn_id) in enumerate(KAFKA_LOG):
        if kind == "data":
            position = await publish(buffer, f"{offset}".encode(), txn_id)
            assert position == Position(0, offset)
        else:
            await buffer.end(txn_id, kind == "commit", 0)
            assert buffer.ledger.last_confirmed == Position(0, offset)


def kafka_consumer_filter(entries: list[Entry], aborted: list[AbortedTxn]) -> list[bytes]:
    """Kafka's READ_COMMITTED consumer: a min-heap of aborted txns by first offset."""
    heap = [(a.first_position, a.txn_id) for a in aborted]
    heapq.heapify(heap)
    active: set[TxnId] = set()
    delivered = []
    for entry in entries:
        while heap and heap[0][0] <= entry.position:
            active.add(heapq.heappop(heap)[1])
        header = entry.header
        if header.type is EntryType.TXN_ABORT:
            active.discard(header.txn_id)
        elif not header.is_marker and header.txn_id not in active:
            delivered.append(entry.payload)
    return delivered


@pytest.fixture
async def kafka_buffer(open_ledger) -> TransactionBuffer:
    ledger = await open_ledger(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=11))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    await write_kafka_log(buffer)
    return buffer


async def test_kafka_example_index_holds_each_abort_with_the_stable_position_after_it(
    kafka_buffer,
):
    assert kafka_buffer.abort_index.all() == [
        AbortedTxn(A, Position(0, 0), Position(0, 3), Position(0, 0)),
        AbortedTxn(C, Position(0, 5), Position(0, 9), Position(0, 7)),
    ]
    assert kafka_buffer.max_read_position == Position(0, 10)
    assert read_committed(kafka_buffer) == [b"1", b"4", b"8"]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 10, [A, C]),  # the whole log
        (0, 2, [A]),  # C starts after the range; A's stable position stops nothing yet
        (1, 1, [A]),  # A is open across offset 1 even though its entry there is B's
        (3, 3, [A]),  # A's marker is in range: reported (last offset >= start) to retire it
        (3, 4, [A]),
        (4, 4, []),  # between A's end and C's start
        (4, 7, [C]),
        (6, 8, [C]),
        (10, 10, []),  # after both markers
    ],
)
async def test_kafka_example_fetch_ranges_return_the_overlapping_aborts(
    kafka_buffer, start, end, expected
):
    found = kafka_buffer.aborted_overlapping(Position(0, start), Position(0, end))
    assert [a.txn_id for a in found] == expected

    # A Kafka client given those aborts filters the range exactly as READ_COMMITTED does.
    entries = kafka_buffer.ledger.read(Position(0, start), 100, Position(0, end))
    view = CommittedReadView(kafka_buffer)
    assert kafka_consumer_filter(entries, found) == [
        e.payload for e in entries if not view.should_skip(e)
    ]


async def test_abort_index_scan_stops_early_and_skips_ledgers_without_aborts(kafka_buffer):
    buffer = kafka_buffer
    ledger = buffer.ledger
    for index in range(11):  # ledger 1: plain entries only
        await publish(buffer, f"q{index}".encode())
    e1 = await publish(buffer, b"e1", txn(5))  # ledger 2: one more abort
    await buffer.end(E, False, 0)
    assert ledger.ledger_ids() == [0, 1, 2]
    assert buffer.abort_index.txn_index_empty(1)
    index = buffer.abort_index

    # The range ends before C's stable position after abort (0:7): ledger 0 alone answers.
    lookups, skipped = index.index_lookups, index.empty_ledgers_skipped
    assert [a.txn_id for a in buffer.aborted_overlapping(Position(0, 0), Position(0, 2))] == [A]
    assert index.index_lookups - lookups == 1
    assert index.empty_ledgers_skipped - skipped == 0

    # Past 0:7 the scan goes on: ledger 1 is skipped without a lookup, ledger 2 stops it.
    lookups, skipped = index.index_lookups, index.empty_ledgers_skipped
    found = buffer.aborted_overlapping(Position(0, 6), Position(0, 8))
    assert [a.txn_id for a in found] == [C]
    assert index.index_lookups - lookups == 2
    assert index.empty_ledgers_skipped - skipped == 1

    # A fetch starting in ledger 1 never looks at ledger 0.
    lookups, skipped = index.index_lookups, index.empty_ledgers_skipped
    found = buffer.aborted_overlapping(Position(1, 0), e1)
    assert [a.txn_id for a in found] == [E]
    assert index.index_lookups - lookups == 1
    assert index.empty_ledgers_skipped - skipped == 1


async def test_ledgers_without_aborts_are_skipped_without_lookup(open_ledger):
    ledger = await open_ledger(ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    for index in range(10):
        await publish(buffer, f"p{index}".encode())
    await publish(buffer, b"t", txn(1))
    await buffer.end(txn(1), True, 0)  # commits leave the index empty too
    ledger_count = len(ledger.ledger_ids())
    assert ledger_count >= 4

    found = buffer.aborted_overlapping(Position(0, 0), ledger.last_confirmed)
    assert found == []
    assert buffer.abort_index.index_lookups == 0
    assert buffer.abort_index.empty_ledgers_skipped == ledger_count
    assert buffer.stats()["emptyAbortIndexesSkipped"] == ledger_count


# ---------------------------------------------------------------- stats


async def test_stable_lag_counts_entries_behind_the_open_txn_and_the_age_of_the_first(buffer):
    await publish(buffer, b"m1")
    assert buffer.stable_lag() == (0, 0)
    published_ms = int(time.time() * 1000) - 1500
    await buffer.before_append(txn(1))
    await buffer.ledger.append(EntryHeader(publish_time_ms=published_ms, txn_id=txn(1)), b"t1")
    buffer.after_append(txn(1))
    await publish(buffer, b"m2")
    await publish(buffer, b"m3")
    entries, age_ms = buffer.stable_lag()
    assert entries == 3  # the txn's entry and the two plain entries behind it
    assert 1500 <= age_ms < 60_000
    stats = buffer.stats()
    assert stats["stableLagEntries"] == 3 and stats["stableLagMs"] >= 1500
    await buffer.end(txn(1), True, 0)
    assert buffer.stable_lag() == (0, 0)
