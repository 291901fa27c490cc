"""ReplicaLogs (managed_ledger/replica.py): a broker's copies of other brokers' topic
logs, kept so that ManagedLedger.open on a copy is the topic, and refusing what
BookKeeper's bookies refuse (stale epochs, gaps, closed ledgers, damaged frames)."""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from pathlib import Path

import pytest

from managed_ledger import EntryHeader, LedgerFiles, LocalStore, ManagedLedger, Position
from managed_ledger.config import ManagedLedgerConfig
from managed_ledger.cursor import newest_states, tombstone
from managed_ledger.errors import (
    ReplicaCorruptEntryError,
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
)
from managed_ledger.framing import encode_frame
from managed_ledger.ledger import LEDGERS_DB
from managed_ledger.replica import REPLICAS_DB, ReplicaLogs, ReplicaState
from managed_ledger.snapshot_copy import FIRST, SNAPSHOTS_DB, SnapshotCopy, meta_digest

TOPIC = "persistent://public/default/t"
NOTHING = Position(-1, -1)


def frame(i: int) -> bytes:
    header = EntryHeader(publish_time_ms=1_000 + i, sequence_id=i, num_messages=1 + i % 3)
    return encode_frame(header.stamped(i * 3).encode(), f"payload-{i:05d}".encode())


def frames(ids) -> list[bytes]:
    return [frame(i) for i in ids]


class Replicas:
    """A ReplicaLogs on its own directory and store, reopened as after a restart."""

    def __init__(self, root: Path):
        self.root = root
        self.store: LocalStore | None = None
        self.logs: ReplicaLogs | None = None

    def directory_of(self, name: str) -> Path:
        return self.root / "ledgers" / name.replace("://", "/")

    def open(self) -> ReplicaLogs:
        self.store = LocalStore(self.root / "metadata")
        self.logs = ReplicaLogs(self.store, self.directory_of, LedgerFiles(64), fsync=False)
        return self.logs

    def restart(self) -> ReplicaLogs:
        """What a kill -9 leaves: no seal; committed LMDB writes survive."""
        self.close()
        return self.open()

    def close(self) -> None:
        if self.logs is not None:
            self.logs.close()
            self.logs = None
        if self.store is not None:
            self.store.close()
            self.store = None

    async def promote(self, name: str = TOPIC, **config) -> ManagedLedger:
        """Open the copy as its owner would."""
        assert self.logs is not None and self.store is not None
        self.logs.unload(name)
        return await ManagedLedger.open(
            name, self.directory_of(name), self.store, ManagedLedgerConfig(fsync=False, **config)
        )


@pytest.fixture
def replicas(tmp_path: Path):
    opened = Replicas(tmp_path / "replica")
    opened.open()
    yield opened
    opened.close()


@pytest.fixture
def logs(replicas: Replicas) -> ReplicaLogs:
    assert replicas.logs is not None
    return replicas.logs


# ---------------------------------------------------------------- epochs


async def test_fence_of_an_unknown_topic_holds_the_epoch_and_nothing_else(logs, replicas):
    assert await logs.fence(TOPIC, 3) == ReplicaState(3, -1, 0, False)
    assert replicas.store.get_json(REPLICAS_DB, TOPIC) == {"epoch": 3}
    assert replicas.store.get_json(LEDGERS_DB, TOPIC) is None
    assert replicas.restart().state(TOPIC) == ReplicaState(3, -1, 0, False)


async def test_a_lower_epoch_is_refused_naming_the_topic_and_both_epochs(logs):
    await logs.fence(TOPIC, 5)
    with pytest.raises(ReplicaFencedError, match=rf"{TOPIC}.*epoch 5.*epoch 4"):
        await logs.fence(TOPIC, 4)
    with pytest.raises(ReplicaFencedError):
        await logs.append(TOPIC, 4, 0, 0, frames([0]), NOTHING)
    with pytest.raises(ReplicaFencedError):
        await logs.close_ledger(TOPIC, 4, 0, -1)
    assert logs.state(TOPIC) == ReplicaState(5, -1, 0, False)
    assert await logs.fence(TOPIC, 5) == ReplicaState(5, -1, 0, False)  # the same: fine


async def test_an_append_with_a_higher_epoch_raises_the_held_epoch_durably(logs, replicas):
    await logs.append(TOPIC, 1, 0, 0, frames([0]), NOTHING)
    assert (await logs.append(TOPIC, 2, 0, 1, frames([1]), NOTHING)).epoch == 2
    assert replicas.store.get_json(REPLICAS_DB, TOPIC) == {"epoch": 2}
    with pytest.raises(ReplicaFencedError):
        await replicas.restart().append(TOPIC, 1, 0, 2, frames([2]), NOTHING)


# ---------------------------------------------------------------- appends


async def test_appends_hold_the_entries_and_read_gives_back_the_same_frames(logs):
    assert await logs.append(TOPIC, 1, 4, 0, frames(range(3)), NOTHING) == ReplicaState(
        1, 4, 3, False
    )
    assert await logs.append(TOPIC, 1, 4, 3, frames(range(3, 5)), Position(4, 2)) == (
        ReplicaState(1, 4, 5, False)
    )
    assert logs.read(TOPIC, 4, 0, 100, 1 << 20) == frames(range(5))
    assert logs.read(TOPIC, 4, 2, 2, 1 << 20) == frames([2, 3])
    assert logs.read(TOPIC, 4, 1, 100, 1) == frames([1])  # the first always comes
    assert logs.read(TOPIC, 4, 1, 100, 2 * len(frame(1))) == frames([1, 2])
    assert logs.read(TOPIC, 4, 5, 100, 1 << 20) == []
    assert logs.read(TOPIC, 3, 0, 100, 1 << 20) == []


async def test_a_write_past_what_is_held_is_refused_with_the_held_count(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(2)), NOTHING)
    with pytest.raises(ReplicaGapError) as refused:
        await logs.append(TOPIC, 1, 0, 3, frames([3]), NOTHING)
    assert refused.value.held == 2
    with pytest.raises(ReplicaGapError) as refused:
        await logs.append(TOPIC, 1, 1, 1, frames([1]), NOTHING)  # a new ledger starts at 0
    assert refused.value.held == 0
    assert logs.state(TOPIC) == ReplicaState(1, 0, 2, False)


async def test_a_resend_below_what_is_held_cuts_the_copy_there_and_appends(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(5)), Position(0, 0))
    state = await logs.append(TOPIC, 1, 0, 2, frames([20, 21]), Position(0, 1))
    assert state == ReplicaState(1, 0, 4, False)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames([0, 1, 20, 21])


async def test_a_cut_at_or_below_the_last_add_confirmed_is_refused(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(5)), NOTHING)
    with pytest.raises(ReplicaError, match="would cut confirmed entries"):
        await logs.append(TOPIC, 1, 0, 2, frames([9]), Position(0, 2))
    await logs.append(TOPIC, 1, 0, 5, frames([5]), Position(0, 3))
    # The replica remembers the highest one it was told, whatever a later call says.
    with pytest.raises(ReplicaError, match="would cut confirmed entries"):
        await logs.append(TOPIC, 1, 0, 3, frames([9]), NOTHING)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(6))


async def test_a_damaged_frame_is_refused_by_index_and_nothing_is_written(logs):
    await logs.append(TOPIC, 1, 0, 0, frames([0]), NOTHING)
    bad = bytearray(frame(2))
    bad[-1] ^= 0xFF
    with pytest.raises(ReplicaCorruptEntryError, match="frame 1 "):
        await logs.append(TOPIC, 2, 0, 1, [frame(1), bytes(bad)], NOTHING)
    with pytest.raises(ReplicaCorruptEntryError, match=r"frame 0 .*past its end"):
        await logs.append(TOPIC, 2, 0, 1, [frame(1) + frame(2)], NOTHING)
    assert logs.state(TOPIC) == ReplicaState(1, 0, 1, False)


async def test_a_newer_ledger_closes_the_newest_and_older_or_closed_ones_are_refused(
    logs, replicas
):
    await logs.append(TOPIC, 1, 0, 0, frames(range(3)), NOTHING)
    assert await logs.append(TOPIC, 1, 2, 0, frames([3]), Position(0, 2)) == ReplicaState(
        1, 2, 1, False
    )
    listed = replicas.store.get_json(LEDGERS_DB, TOPIC)
    assert [(d["id"], d["entries"], d["closed"]) for d in listed["ledgers"]] == [
        (0, 3, True),
        (2, 0, False),
    ]
    assert listed["next_ledger_id"] == 3
    with pytest.raises(ReplicaLedgerClosedError, match="ledger 0 is closed"):
        await logs.append(TOPIC, 1, 0, 3, frames([9]), NOTHING)
    await logs.close_ledger(TOPIC, 1, 2, 0)
    with pytest.raises(ReplicaLedgerClosedError, match="ledger 2 is closed"):
        await logs.append(TOPIC, 1, 2, 1, frames([9]), NOTHING)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(3))


async def test_a_newest_ledger_closed_here_is_completed_by_a_writer_of_a_newer_epoch(
    logs, replicas
):
    # As a broker that let go of a topic leaves its copy: the newest ledger sealed.
    await logs.append(TOPIC, 1, 0, 0, frames(range(3)), NOTHING)
    await logs.close_ledger(TOPIC, 1, 0, 2)
    # Epoch 1's own close is final for epoch 1...
    with pytest.raises(ReplicaLedgerClosedError):
        await logs.append(TOPIC, 1, 0, 3, frames([3]), NOTHING)
    # ...while the writer of epoch 2, whose copy ends later, completes it at its end.
    assert await logs.append(TOPIC, 2, 0, 3, frames([3, 4]), Position(0, 2)) == ReplicaState(
        2, 0, 5, False
    )
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(5))
    ledger = await replicas.promote()
    try:
        assert [e.header.sequence_id for e in ledger.read(Position(0, 0), 100)] == list(range(5))
    finally:
        await ledger.close()


async def test_trim_deletes_older_ledgers_but_never_the_newest_nor_the_log_end(logs, replicas):
    await logs.append(TOPIC, 1, 0, 0, frames(range(3)), NOTHING)
    await logs.append(TOPIC, 1, 1, 0, frames(range(3, 5)), Position(0, 2))
    await logs.append(TOPIC, 1, 2, 0, frames([5]), Position(1, 1))
    with pytest.raises(ReplicaFencedError):
        await logs.trim(TOPIC, 0, 2)
    await logs.trim(TOPIC, 1, 99)  # asks for all: the newest stays
    assert logs.ledgers(TOPIC) == {2: 1}
    assert not (replicas.directory_of(TOPIC) / f"{0:016x}.log").exists()
    ledger = await replicas.promote()
    try:
        assert [e.header.sequence_id for e in ledger.read(Position(0, 0), 100)] == [5]
        assert ledger.offsets.end_offset >= 6  # the Kafka offsets never go back
    finally:
        await ledger.close()


# ---------------------------------------------------------------- closing


async def test_close_ledger_cuts_the_copy_past_the_recovered_end(logs, replicas):
    await logs.append(TOPIC, 1, 0, 0, frames(range(6)), Position(0, 1))
    assert await logs.close_ledger(TOPIC, 2, 0, 3) == ReplicaState(2, 0, 4, True)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(4))
    assert await logs.close_ledger(TOPIC, 2, 0, 3) == ReplicaState(2, 0, 4, True)
    assert replicas.restart().read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(4))


async def test_close_ledger_cuts_a_copy_that_a_rollover_closed_at_what_it_held(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(6)), NOTHING)
    await logs.append(TOPIC, 1, 1, 0, frames([10]), NOTHING)
    await logs.close_ledger(TOPIC, 2, 0, 2)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(3))
    assert logs.state(TOPIC) == ReplicaState(2, 1, 1, False)


async def test_close_ledger_below_the_last_add_confirmed_is_refused(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(6)), Position(0, 3))
    with pytest.raises(ReplicaError, match="would cut confirmed entries"):
        await logs.close_ledger(TOPIC, 2, 0, 2)


async def test_close_ledger_cuts_an_older_ledger_past_its_end_whatever_a_later_lac(logs):
    # Entries 3..4 of ledger 0 were a batch the quorum refused: the writer closed
    # ledger 0 at 3 entries and went on in ledger 1, whose LAC this copy was told.
    await logs.append(TOPIC, 1, 0, 0, frames(range(5)), NOTHING)
    await logs.append(TOPIC, 1, 1, 0, frames([10, 11]), Position(1, 0))
    await logs.close_ledger(TOPIC, 2, 0, 2)
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(3))


async def test_close_ledger_of_more_entries_than_held_is_refused_with_the_count(logs):
    await logs.append(TOPIC, 1, 0, 0, frames(range(2)), NOTHING)
    with pytest.raises(ReplicaGapError) as refused:
        await logs.close_ledger(TOPIC, 2, 0, 4)
    assert refused.value.held == 2
    assert logs.state(TOPIC) == ReplicaState(2, 0, 2, False)


async def test_close_of_a_ledger_never_received_lists_it_closed_so_late_writes_are_refused(
    logs, replicas
):
    await logs.append(TOPIC, 1, 0, 0, frames(range(2)), NOTHING)
    assert await logs.close_ledger(TOPIC, 2, 1, -1) == ReplicaState(2, 1, 0, True)
    with pytest.raises(ReplicaLedgerClosedError):
        await logs.append(TOPIC, 2, 1, 0, frames([5]), NOTHING)
    ledger = await replicas.promote()
    try:
        assert [entry.header.sequence_id for entry in ledger.read(Position(0, 0), 100)] == [0, 1]
        assert ledger.current_ledger_id == 2  # never a listed id again
    finally:
        await ledger.close()


# ---------------------------------------------------------------- restart, drop, topics


async def test_a_restart_recovers_the_open_copy_and_appends_go_on(logs, replicas):
    await logs.append(TOPIC, 1, 0, 0, frames(range(3)), NOTHING)
    directory = replicas.directory_of(TOPIC)
    with open(directory / f"{0:016x}.log", "ab") as torn:
        torn.write(frame(3)[:7])  # a write the kill cut short: never acknowledged
    logs = replicas.restart()
    assert logs.state(TOPIC) == ReplicaState(1, 0, 3, False)
    await logs.append(TOPIC, 1, 0, 3, frames([3, 4]), Position(0, 2))
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(5))


async def test_drop_forgets_the_copy_its_epoch_and_its_files(logs, replicas):
    await logs.append(TOPIC, 7, 0, 0, frames(range(3)), NOTHING)
    await logs.append(TOPIC, 7, 1, 0, frames([3]), NOTHING)
    await logs.drop(TOPIC)
    assert list(replicas.directory_of(TOPIC).glob("*")) == []
    assert logs.state(TOPIC) == ReplicaState(-1, -1, 0, False)
    assert replicas.restart().state(TOPIC) == ReplicaState(-1, -1, 0, False)


async def test_topics_are_kept_apart_and_appended_to_at_once(logs):
    others = [f"{TOPIC}-{index}" for index in range(4)]
    await asyncio.gather(
        *(
            logs.append(name, 1, 0, 0, frames(range(index + 1)), NOTHING)
            for index, name in enumerate(others)
        )
    )
    for index, name in enumerate(others):
        assert logs.read(name, 0, 0, 100, 1 << 20) == frames(range(index + 1))


async def test_appends_to_one_topic_called_at_once_run_one_after_another(logs):
    await asyncio.gather(
        *(logs.append(TOPIC, 1, 0, index, frames([index]), NOTHING) for index in range(20))
    )
    assert logs.read(TOPIC, 0, 0, 100, 1 << 20) == frames(range(20))


# ---------------------------------------------------------------- the copy is the topic


def written_frames(ledger: ManagedLedger, ledger_id: int, first: int, last: int) -> list[bytes]:
    """The frames the writer put on disk for entries first..last of `ledger_id`."""
    current = ledger._current
    if current is not None and current.ledger_id == ledger_id:
        segment = current
    else:
        segment = ledger._segment(ledger_id)
    return [encode_frame(header, payload) for _, header, payload in segment.read(first, last)]


class Shipper:
    """The writer's side, as simply as a test can have it: after each append, send
    every entry the replica lacks, with the writer's LAC."""

    def __init__(self, writer: ManagedLedger, logs: ReplicaLogs, epoch: int = 1):
        self.writer = writer
        self.logs = logs
        self.epoch = epoch
        self.sent = Position(-1, -1)

    async def ship(self) -> None:
        lac = self.writer.last_confirmed
        for ledger_id in self.writer.ledger_ids():
            count = self.writer._entry_count(ledger_id)
            first = self.sent.entry_id + 1 if ledger_id == self.sent.ledger_id else 0
            if ledger_id < self.sent.ledger_id or first >= count:
                continue
            await self.logs.append(
                TOPIC,
                self.epoch,
                ledger_id,
                first,
                written_frames(self.writer, ledger_id, first, count - 1),
                self.sent,
            )
            self.sent = Position(ledger_id, count - 1)
        assert self.sent == lac


async def append_numbered(writer: ManagedLedger, ids) -> None:
    for i in ids:
        await writer.append(
            EntryHeader(publish_time_ms=5_000 + i, sequence_id=i, num_messages=1 + i % 4),
            f"message-{i}".encode(),
        )


async def same_log(writer: ManagedLedger, copy: ManagedLedger) -> None:
    written = writer.read(writer.first_position(), 10_000)
    copied = copy.read(copy.first_position(), 10_000)
    assert [(e.position, e.header, e.payload) for e in copied] == [
        (e.position, e.header, e.payload) for e in written
    ]
    assert copy.last_confirmed == writer.last_confirmed
    assert copy.offsets.end_offset == writer.offsets.end_offset
    for entry in written:
        base = writer.offsets.base_of(entry)
        assert copy.offsets.position_of(base) == entry.position


async def test_a_promoted_copy_is_the_writers_log_across_rollovers(tmp_path, replicas):
    config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=4)
    store = LocalStore(tmp_path / "writer-metadata")
    writer = await ManagedLedger.open(TOPIC, tmp_path / "writer", store, config)
    try:
        shipper = Shipper(writer, replicas.logs)
        for start in range(0, 22, 3):
            await append_numbered(writer, range(start, start + 3))
            await shipper.ship()
        assert len(writer.ledger_ids()) >= 5
        copy = await replicas.promote(max_entries_per_ledger=4)
        try:
            await same_log(writer, copy)
            # It goes on where the writer stopped: the next ledger, the next offset.
            end = writer.offsets.end_offset
            position = await copy.append(EntryHeader(sequence_id=99), b"after failover")
            assert position.ledger_id > writer.last_confirmed.ledger_id
            assert copy.read(position, 1)[0].header.base_offset == end
        finally:
            await copy.close()
    finally:
        await writer.close()
        store.close()


async def test_a_promoted_copy_after_a_rewind_holds_only_the_rewritten_entries(tmp_path, replicas):
    config = ManagedLedgerConfig(fsync=False)
    store = LocalStore(tmp_path / "writer-metadata")
    writer = await ManagedLedger.open(TOPIC, tmp_path / "writer", store, config)
    try:
        logs = replicas.logs
        await append_numbered(writer, range(4))
        # An old owner sent two entries the new one never wrote (a failed quorum)...
        stale = [frame(100), frame(101)]
        await logs.append(TOPIC, 1, 0, 0, written_frames(writer, 0, 0, 1), NOTHING)
        await logs.append(TOPIC, 1, 0, 2, stale, Position(0, 0))
        # ...the new owner fences, rewrites from its recovered end, and closes there.
        await logs.fence(TOPIC, 2)
        await logs.append(TOPIC, 2, 0, 2, written_frames(writer, 0, 2, 3), Position(0, 1))
        await logs.close_ledger(TOPIC, 2, 0, 3)
        copy = await replicas.promote()
        try:
            await same_log(writer, copy)
        finally:
            await copy.close()
    finally:
        await writer.close()
        store.close()


async def test_a_copy_promoted_after_a_crash_recovers_its_open_ledger(tmp_path, replicas):
    store = LocalStore(tmp_path / "writer-metadata")
    writer = await ManagedLedger.open(
        TOPIC, tmp_path / "writer", store, ManagedLedgerConfig(fsync=False)
    )
    try:
        await append_numbered(writer, range(7))
        await Shipper(writer, replicas.logs).ship()
        replicas.restart()  # killed: the copy's ledger stays listed open
        copy = await replicas.promote()
        try:
            await same_log(writer, copy)
        finally:
            await copy.close()
    finally:
        await writer.close()
        store.close()


# ---------------------------------------------------------------- random sequences


@pytest.mark.parametrize("seed", range(8))
async def test_random_appends_resends_fences_and_closes_match_a_list_model(seed, replicas):
    """A seeded stream of what writers may send, checked against a model after each
    step: ledger id -> list of frames, a closed set, the epoch. No legitimate step
    ever cuts a confirmed entry."""
    rng = random.Random(seed)
    logs = replicas.logs
    model: dict[int, list[bytes]] = {}
    closed: set[int] = set()
    epoch = 1
    held_epoch = -1  # what the replica holds: the epoch of its last accepted call
    confirmed = NOTHING
    counter = 0
    for _step in range(120):
        newest = max(model) if model else -1
        action = rng.choice(
            ["append", "append", "append", "resend", "roll", "fence", "close", "restart", "stale"]
        )
        if action in ("append", "resend") and newest >= 0 and newest not in closed:
            held = len(model[newest])
            low = confirmed.entry_id + 1 if confirmed.ledger_id == newest else 0
            first = held if action == "append" else rng.randint(min(low, held), held)
            batch = frames(range(counter, counter + rng.randint(0, 4)))
            counter += len(batch)
            await logs.append(TOPIC, epoch, newest, first, batch, confirmed)
            model[newest] = model[newest][:first] + batch
            if model[newest] and rng.random() < 0.5:
                confirmed = max(
                    confirmed,
                    Position(
                        newest,
                        rng.randint(
                            max(confirmed.entry_id if confirmed.ledger_id == newest else 0, 0),
                            len(model[newest]) - 1,
                        ),
                    ),
                )
        elif action == "roll":
            ledger_id = newest + rng.randint(1, 2)
            batch = frames(range(counter, counter + rng.randint(1, 3)))
            counter += len(batch)
            await logs.append(TOPIC, epoch, ledger_id, 0, batch, confirmed)
            if newest >= 0:
                closed.add(newest)
            model[ledger_id] = batch
        elif action == "fence":
            epoch += rng.randint(0, 2)
            assert (await logs.fence(TOPIC, epoch)).epoch == epoch
        elif action == "close" and newest >= 0:
            low = confirmed.entry_id + 1 if confirmed.ledger_id == newest else 0
            keep = rng.randint(min(low, len(model[newest])), len(model[newest]))
            await logs.close_ledger(TOPIC, epoch, newest, keep - 1)
            model[newest] = model[newest][:keep]
            closed.add(newest)
        elif action == "restart":
            logs = replicas.restart()
            # A restart forgets the confirmed position it was told: the model does not.
        elif action == "stale" and epoch > 1:
            with pytest.raises(ReplicaFencedError):
                await logs.append(TOPIC, epoch - 1, max(newest, 0), 0, frames([0]), NOTHING)
        if action in ("append", "resend", "roll", "fence", "close") and (
            model or action == "fence"
        ):
            held_epoch = epoch
        state = logs.state(TOPIC)
        newest = max(model) if model else -1
        assert state.epoch == held_epoch, (seed, _step, action)
        assert (state.ledger_id, state.entry_count, state.closed) == (
            (newest, len(model[newest]), newest in closed) if newest >= 0 else (-1, 0, False)
        )
        for ledger_id, held in model.items():
            assert logs.read(TOPIC, ledger_id, 0, 1000, 1 << 30) == held, (seed, _step)
    # Promoted, the copy holds exactly the model's entries at the model's positions.
    copy = await replicas.promote()
    try:
        expected = [
            (Position(ledger_id, entry_id), held_frame)
            for ledger_id, held in sorted(model.items())
            for entry_id, held_frame in enumerate(held)
        ]
        entries = copy.read(copy.first_position(), 10_000)
        assert [
            (entry.position, encode_frame(entry.header.encode(), entry.payload))
            for entry in entries
        ] == expected
    finally:
        await copy.close()


# ---------------------------------------------------------------- cursors


def cursor_state(mark_delete_entry: int, version: tuple[int, int]) -> bytes:
    return json.dumps(
        {
            "mark_delete": [0, mark_delete_entry],
            "acked": [],
            "partial": [],
            "properties": {},
            "version": list(version),
        }
    ).encode()


async def test_a_cursor_state_older_than_the_one_held_is_dropped(logs, replicas):
    await logs.write_cursors(TOPIC, 1, {"sub": cursor_state(5, (1, 7))}, [])
    # An earlier write of the same writer arriving late changes nothing...
    await logs.write_cursors(TOPIC, 1, {"sub": cursor_state(3, (1, 6))}, [])
    assert logs.cursor_states(TOPIC) == {"sub": cursor_state(5, (1, 7))}
    # ...while a newer one, even further back (a seek), is kept, and survives a restart.
    await logs.write_cursors(TOPIC, 2, {"sub": cursor_state(1, (2, 1))}, [])
    assert replicas.restart().cursor_states(TOPIC) == {"sub": cursor_state(1, (2, 1))}


async def test_newest_states_keeps_each_cursors_newest_copy_and_its_tombstone():
    mine = {
        "a": cursor_state(1, (2, 4)),
        "b": cursor_state(9, (2, 9)),
        "gone": cursor_state(3, (2, 1)),
    }
    other = {"a": cursor_state(4, (2, 5)), "b": cursor_state(2, (2, 8)), "gone": tombstone((2, 2))}
    assert newest_states(mine, other) == {"a": other["a"], "b": mine["b"], "gone": other["gone"]}
    assert newest_states(mine, {"c": cursor_state(0, (1, 1))})["c"] == cursor_state(0, (1, 1))


async def test_a_promoted_copy_opens_the_cursors_it_holds_but_not_the_deleted_ones(replicas):
    await replicas.logs.write_cursors(
        TOPIC, 1, {"kept": cursor_state(-1, (1, 3)), "deleted": tombstone((1, 4))}, []
    )
    ledger = await replicas.promote()
    try:
        assert set(ledger.cursors) == {"kept"}
        # The next write outversions the tombstone too.
        await ledger.write_cursor("kept")
        assert ledger.cursors["kept"].version > (1, 4)
    finally:
        await ledger.close()


# ------------------------------------------------------------ transaction buffer snapshots


def _stored(value: bytes) -> bytes:
    """A snapshot value as the buffer stores it: its bytes, then their CRC32."""
    return value + zlib.crc32(value).to_bytes(4, "little")


def _snapshot_keys(logs: ReplicaLogs, name: str = TOPIC) -> dict[str, bytes]:
    prefix = f"{name}\x00"
    return {k[len(prefix) :]: v for k, v in logs.store.scan_prefix(SNAPSHOTS_DB, prefix)}


async def test_a_replica_keeps_a_snapshot_and_applies_its_changes_on_top(logs):
    first = {"meta": _stored(b"m1"), "a\x00" + "0" * 15 + "1x": _stored(b"abort-1")}
    await logs.write_snapshot(TOPIC, 1, SnapshotCopy(FIRST, False, first))
    assert _snapshot_keys(logs) == first
    # A change adds an abort and drops ledger 1's aborts, on top of the meta it names.
    change = SnapshotCopy(
        meta_digest(first["meta"]),
        False,
        {"meta": _stored(b"m2"), "a\x00" + "0" * 15 + "2y": _stored(b"abort-2")},
        ("a\x00" + "0" * 15 + "1",),
    )
    await logs.write_snapshot(TOPIC, 1, change)
    assert _snapshot_keys(logs) == change.puts
    # Kept where a ManagedLedger opened on the copy (its buffer) reads them.
    assert logs.store.get(SNAPSHOTS_DB, f"{TOPIC}\x00meta") == _stored(b"m2")


async def test_a_change_on_another_snapshot_than_the_held_one_is_refused_and_a_whole_replaces_it(
    logs,
):
    held = {"meta": _stored(b"m1"), "a\x00k1": _stored(b"abort-1")}
    await logs.write_snapshot(TOPIC, 1, SnapshotCopy(FIRST, True, held))
    # It missed the change after m1 (m1 -> m2): the one after that is not applied.
    missed_one = SnapshotCopy(meta_digest(_stored(b"m2")), False, {"meta": _stored(b"m3")})
    with pytest.raises(ReplicaSnapshotMismatchError, match="send the whole snapshot"):
        await logs.write_snapshot(TOPIC, 1, missed_one)
    # A first snapshot's change names no state: refused by a replica holding one.
    with pytest.raises(ReplicaSnapshotMismatchError):
        await logs.write_snapshot(TOPIC, 1, SnapshotCopy(FIRST, False, {"meta": _stored(b"x")}))
    assert _snapshot_keys(logs) == held
    whole = {"meta": _stored(b"m3"), "a\x00k2": _stored(b"abort-2")}
    await logs.write_snapshot(TOPIC, 1, SnapshotCopy(FIRST, True, whole))
    assert _snapshot_keys(logs) == whole  # abort-1 is gone with the state it was in


async def test_a_snapshot_from_an_older_epoch_or_damaged_is_refused_and_nothing_written(logs):
    await logs.fence(TOPIC, 5)
    snapshot = {"meta": _stored(b"m1")}
    with pytest.raises(ReplicaFencedError):
        await logs.write_snapshot(TOPIC, 4, SnapshotCopy(FIRST, True, snapshot))
    damaged = {"meta": _stored(b"m1")[:-1] + b"\x00"}
    with pytest.raises(ReplicaCorruptEntryError, match="checksum"):
        await logs.write_snapshot(TOPIC, 5, SnapshotCopy(FIRST, True, damaged))
    with pytest.raises(ReplicaCorruptEntryError, match="without its meta"):
        await logs.write_snapshot(TOPIC, 5, SnapshotCopy(FIRST, True, {"a\x00k": _stored(b"a")}))
    assert _snapshot_keys(logs) == {}
    await logs.write_snapshot(TOPIC, 5, SnapshotCopy(FIRST, True, snapshot))
    assert _snapshot_keys(logs) == snapshot


async def test_a_snapshot_survives_a_restart_and_goes_with_the_dropped_copy(logs, replicas):
    other = "persistent://public/default/t2"
    await logs.write_snapshot(TOPIC, 1, SnapshotCopy(FIRST, True, {"meta": _stored(b"m1")}))
    await logs.write_snapshot(other, 1, SnapshotCopy(FIRST, True, {"meta": _stored(b"o1")}))
    logs = replicas.restart()
    assert _snapshot_keys(logs) == {"meta": _stored(b"m1")}
    await logs.drop(TOPIC)
    assert _snapshot_keys(logs) == {}
    assert _snapshot_keys(logs, other) == {"meta": _stored(b"o1")}
