"""The writer's half of replication (managed_ledger/replication.py), with a Replication
played by the test at the unit's edge: a batch is confirmed only once the replication
says the quorum holds it, and one it refuses is never read, kept or numbered."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from managed_ledger import EntryHeader, ManagedLedger, ManagedLedgerConfig, Position
from managed_ledger.cursor import is_tombstone, state_version
from managed_ledger.framing import encode_frame
from managed_ledger.replication import ReplicationError


def header(i: int) -> EntryHeader:
    return EntryHeader(publish_time_ms=1_000 + i, sequence_id=i, producer_name="producer")


@dataclass
class ScriptedReplication:
    """Confirms a batch when `release` is set; refuses when `refuse` says why."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    refuse: str | None = None
    refuse_open: str | None = None
    batches: list[tuple[int, int, list[bytes], Position]] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)
    closed: bool = False
    next_ledger_id: int = 0
    epoch: int = 1
    cursor_writes: list = field(default_factory=list)
    snapshots: list = field(default_factory=list)

    async def open_ledger(self, ledger_id: int, closing) -> None:
        if self.refuse_open is not None:
            raise ReplicationError(self.refuse_open)
        self.opened.append((ledger_id, closing))

    async def replicate(self, ledger_id, first_entry_id, frames, last_add_confirmed) -> None:
        self.batches.append((ledger_id, first_entry_id, list(frames), last_add_confirmed))
        await self.release.wait()
        if self.refuse is not None:
            raise ReplicationError(self.refuse)

    async def replicate_cursors(self, states, deleted) -> None:
        self.cursor_writes.append((dict(states), list(deleted)))

    def trimmed(self, below_ledger_id) -> None:
        self.trimmed_below = below_ledger_id

    def replicate_snapshot(self, copy) -> None:
        self.snapshots.append(copy)

    def attach(self, read_frames, confirmed, ledger_ids, cursor_states, whole_snapshot) -> None:
        self.attached = (read_frames, confirmed, ledger_ids, cursor_states, whole_snapshot)

    def close(self) -> None:
        self.closed = True


async def _open(harness, replication) -> ManagedLedger:
    return await ManagedLedger.open(
        harness.name,
        harness.directory,
        harness.open_store(),
        ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3),
        replication=replication,
    )


async def test_an_append_is_confirmed_only_once_the_replication_holds_it(harness):
    replication = ScriptedReplication()
    ledger = await _open(harness, replication)
    pending = asyncio.ensure_future(ledger.append(header(0), b"a"))
    while not replication.batches:
        await asyncio.sleep(0)
    # Written here, not confirmed: nobody may see it yet.
    assert not pending.done()
    assert ledger.read(Position(0, 0), 10) == []
    assert ledger.last_confirmed == Position(0, -1)
    replication.release.set()
    assert await pending == Position(0, 0)
    assert ledger.last_confirmed == Position(0, 0)
    assert [entry.payload for entry in ledger.read(Position(0, 0), 10)] == [b"a"]
    assert replication.opened == [(0, None)]
    await ledger.close()
    assert replication.closed


async def test_the_frames_sent_are_the_bytes_on_disk_and_carry_the_lac_before_them(harness):
    replication = ScriptedReplication()
    replication.release.set()
    ledger = await _open(harness, replication)
    for i in range(5):  # over a rollover: 3 entries per ledger
        await ledger.append(header(i), b"payload-%d" % i)
    sent = [(ledger_id, first, lac) for ledger_id, first, _, lac in replication.batches]
    assert sent == [
        (0, 0, Position(0, -1)),
        (0, 1, Position(0, 0)),
        (0, 2, Position(0, 1)),
        (1, 0, Position(0, 2)),
        (1, 1, Position(1, 0)),
    ]
    assert replication.opened == [(0, None), (1, (0, 3))]
    for ledger_id, first, frames, _ in replication.batches:
        assert ledger.frames(ledger_id, first, first + len(frames) - 1) == frames
    entries = ledger.read(Position(0, 0), 10)
    assert [encode_frame(e.header.encode(), e.payload) for e in entries[:1]] == [
        replication.batches[0][2][0]
    ]
    await ledger.close()


async def test_a_refused_batch_is_never_read_kept_or_its_id_given_again(harness):
    replication = ScriptedReplication()
    replication.release.set()
    ledger = await _open(harness, replication)
    assert await ledger.append(header(0), b"first") == Position(0, 0)
    replication.refuse = "one of three replicas is up; two are needed"
    with pytest.raises(ReplicationError, match="two are needed"):
        await ledger.append(header(1), b"lost")
    assert ledger.last_confirmed == Position(0, 0)
    assert [e.payload for e in ledger.read(Position(0, 0), 10)] == [b"first"]
    assert ledger.offsets.end_offset == 1
    replication.refuse = None
    # A replica may hold (0, 1): the next entry goes to a new ledger, whose opening
    # records that ledger 0 ends with 1 entry. The Kafka offset is not lost.
    assert await ledger.append(header(2), b"kept") == Position(1, 0)
    assert replication.opened == [(0, None), (1, (0, 1))]
    await ledger.close()
    reopened = await harness.open()
    entries = reopened.read(Position(0, 0), 10)
    assert [(e.position, e.payload) for e in entries] == [
        (Position(0, 0), b"first"),
        (Position(1, 0), b"kept"),
    ]
    assert [e.header.base_offset for e in entries] == [0, 1]


async def test_a_refused_new_ledger_fails_the_queue_and_writes_nothing(harness):
    replication = ScriptedReplication(refuse_open="the topic's epoch moved to 4")
    replication.release.set()
    ledger = await _open(harness, replication)
    with pytest.raises(ReplicationError, match="epoch moved"):
        await ledger.append(header(0), b"x")
    assert not list(harness.directory.glob("*.log"))
    replication.refuse_open = None
    assert await ledger.append(header(1), b"y") == Position(0, 0)
    await ledger.close()


async def test_cursor_writes_and_deletions_go_to_the_replication(harness):
    replication = ScriptedReplication()
    replication.release.set()
    ledger = await _open(harness, replication)
    await ledger.append(header(0), b"a")
    cursor, created = ledger.open_cursor("sub", start_at_earliest=True)
    assert created
    cursor.ack_cumulative(Position(0, 0))
    await ledger.write_cursor("sub")
    written = [states for states, _ in replication.cursor_writes]
    assert written and all(set(states) == {"sub"} for states in written)
    assert written[-1]["sub"] == cursor.to_json(ledger.config.max_persisted_acked_positions)
    assert cursor.mark_delete == Position(0, 0)
    written_version = cursor.version
    ledger.delete_cursor("sub")
    for _ in range(100):  # the deletion is sent from a task of its own
        if is_tombstone(replication.cursor_writes[-1][0].get("sub", b"{}")):
            break
        await asyncio.sleep(0)
    states, deleted = replication.cursor_writes[-1]
    # A tombstone newer than every state written, so no older copy brings it back.
    assert is_tombstone(states["sub"]) and deleted == []
    assert state_version(states["sub"]) > written_version
    await ledger.close()


async def test_cursor_versions_start_at_the_writers_epoch_and_only_grow(harness):
    replication = ScriptedReplication(epoch=3)
    replication.release.set()
    ledger = await _open(harness, replication)
    await ledger.append(header(0), b"a")
    await ledger.append(header(1), b"b")
    cursor, _ = ledger.open_cursor("sub", start_at_earliest=True)
    versions = [cursor.version]
    cursor.ack_cumulative(Position(0, 1))
    await ledger.write_cursor("sub")
    versions.append(cursor.version)
    cursor.reset(Position(0, -1))  # back: the state goes back, its version does not
    await ledger.write_cursor("sub")
    versions.append(cursor.version)
    assert versions[0][0] == 3 and versions == sorted(set(versions))
    await ledger.close()
    # A later writer (epoch 4) opens the copy: its first write is newer than all.
    replication = ScriptedReplication(epoch=4)
    replication.release.set()
    ledger = await _open(harness, replication)
    reopened = ledger.cursors["sub"]
    assert reopened.version == cursor.version >= versions[-1]  # close() wrote it last
    await ledger.write_cursor("sub")
    assert reopened.version == (4, 1)
    await ledger.close()


async def test_a_batch_refused_before_it_was_sent_keeps_the_ledger_open(harness):
    replication = ScriptedReplication()
    replication.release.set()
    ledger = await _open(harness, replication)
    assert await ledger.append(header(0), b"first") == Position(0, 0)

    async def refuse_unsent(*args) -> None:
        error = ReplicationError("no member is up")
        error.may_be_held = False
        raise error

    replication.replicate = refuse_unsent
    with pytest.raises(ReplicationError):
        await ledger.append(header(1), b"refused")
    del replication.replicate
    # No copy can hold it: its id is given to the next entry, in the same ledger.
    assert await ledger.append(header(2), b"next") == Position(0, 1)
    await ledger.close()
