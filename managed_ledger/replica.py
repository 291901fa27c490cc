"""A broker's copies of other brokers' topic logs: the replica side of replicated ledgers.

A topic's owner (its writer) sends each batch of entries, as the frames its own
Segment.write put on disk, to the other brokers of the ledger's ensemble. Here a
broker keeps those copies in exactly the on-disk form of a ManagedLedger: the same
directory, the same segment files, the same ledger-list record in LEDGERS_DB. A
replica promoted to owner therefore opens its copy with `ManagedLedger.open` and finds
every entry it holds (its open ledger recovered as after a crash), at the same
positions, with the same Kafka offsets (stamped in the headers; the list's
`next_offset` keeps the end of the confirmed entries).

Promises (BookKeeper's bookie rules):
- Epochs: the highest epoch seen per topic is durable (fsynced) before a fence is
  answered or a write carrying a higher epoch is accepted; a lower epoch is refused
  (ReplicaFencedError). It is kept in its own database (REPLICAS_DB), never in the
  ledger list, so the list stays what ManagedLedger reads.
- Every frame's CRC is checked before anything is written (ReplicaCorruptEntryError,
  nothing written). Appended bytes are fsynced (in a worker thread) before `append`
  returns.
- A write starting past what the replica holds is refused with the count it holds
  (ReplicaGapError.held); one starting below it (a resend, a rewind) cuts the copy
  there first, never at or below the last add confirmed (ReplicaError).
- A write to a ledger closed here, or older than the newest one, is refused
  (ReplicaLedgerClosedError). A newer ledger closes the newest at what it holds and
  is listed durably before its first byte is written.
- A transaction-buffer snapshot (write_snapshot) is kept where the buffer of a
  ManagedLedger opened on the copy reads it; a change to it is applied only on top
  of the state it names (snapshot_copy.py), else refused
  (ReplicaSnapshotMismatchError) for the whole snapshot to be sent.
- Calls for one topic run one at a time (a lock per topic); topics run in parallel.
  Metadata reads, and the scan of an open copy after a restart, run on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sortedcontainers import SortedDict

from managed_ledger.cursor import newest_states
from managed_ledger.entry import EntryHeader
from managed_ledger.errors import (
    CorruptEntryError,
    ReplicaCorruptEntryError,
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
    StorageError,
    storage_error,
)
from managed_ledger.framing import decode_frame, encode_frame
from managed_ledger.ledger import CURSORS_DB, LEDGERS_DB, LedgerInfo
from managed_ledger.ledger_files import LedgerFiles
from managed_ledger.local_store import LocalStore
from managed_ledger.position import EARLIEST, Position
from managed_ledger.segment import Segment, delete_files
from managed_ledger.snapshot_copy import (
    SnapshotCopy,
    apply_copy,
    check_copy,
    delete_all,
    held_digest,
)

log = logging.getLogger(__name__)

# name -> {"epoch": the highest epoch seen for the topic}
REPLICAS_DB = b"replicas"
# The epoch of a topic this replica has never heard of: any epoch is at least it.
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What a replica holds of a topic, as it answers every call."""

    epoch: int  # the highest epoch this replica has seen for the topic (durable)
    ledger_id: int  # its newest ledger (-1: holds nothing)
    entry_count: int  # entries held in that ledger
    closed: bool  # that ledger is closed here


@dataclass(slots=True)
class _Replica:
    """One topic's copy: loop state, changed only under `lock`."""

    name: str
    directory: Path
    epoch: int
    ledgers: SortedDict  # ledger id -> LedgerInfo, as ManagedLedger lists them
    next_ledger_id: int
    # The stored log end (ManagedLedger's `next_offset`): only ever raised, and only
    # to the end of an entry at or below the last add confirmed, which is never cut.
    next_offset: int
    # The newest ledger's segment while it is open here (appends go to it).
    current: Segment | None = None
    # Segments of closed ledgers opened for reads.
    segments: dict[int, Segment] = field(default_factory=dict)
    # The highest last add confirmed a writer told: nothing at or below it is cut.
    last_add_confirmed: Position = EARLIEST
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Ledger -> the epoch whose recovery closed it here (close_ledger): no writer of
    # that epoch extends it. Kept in memory only: a correct writer of a later epoch
    # never sends past the end its record gives, so a restart losing it is harmless.
    closed_at_epoch: dict[int, int] = field(default_factory=dict)

    def path(self, ledger_id: int) -> Path:
        return self.directory / f"{ledger_id:016x}.log"

    @property
    def newest(self) -> LedgerInfo | None:
        return self.ledgers.peekitem(-1)[1] if self.ledgers else None

    def entry_count(self, ledger_id: int) -> int:
        if self.current is not None and self.current.ledger_id == ledger_id:
            return self.current.entry_count
        info = self.ledgers.get(ledger_id)
        return info.entries if info is not None else 0

    def state(self) -> ReplicaState:
        newest = self.newest
        if newest is None:
            return ReplicaState(self.epoch, -1, 0, False)
        return ReplicaState(
            self.epoch, newest.ledger_id, self.entry_count(newest.ledger_id), newest.closed
        )

    def segment(self, ledger_id: int, files: LedgerFiles) -> Segment | None:
        """The segment holding `ledger_id` (None when it holds nothing)."""
        if self.current is not None and self.current.ledger_id == ledger_id:
            return self.current
        segment = self.segments.get(ledger_id)
        if segment is None:
            info = self.ledgers.get(ledger_id)
            if info is None or info.entries == 0:
                return None
            segment = Segment.open_closed(
                ledger_id, self.path(ledger_id), files, frozenset(info.damaged)
            )
            self.segments[ledger_id] = segment
        return segment

    def release(self) -> None:
        for segment in self.segments.values():
            segment.release()
        self.segments.clear()
        if self.current is not None:
            self.current.release()


class ReplicaLogs:
    """Every topic this broker keeps a replica of, in the directory `directory_of(name)`
    (the one a ManagedLedger of that storage name uses) with their metadata in `store`
    (the broker's LocalStore, same LEDGERS_DB record format). `name` is always a
    topic's storage name."""

    def __init__(
        self,
        store: LocalStore,
        directory_of: Callable[[str], Path],
        files: LedgerFiles,
        fsync: bool = True,
    ):
        self.store = store
        self.directory_of = directory_of
        self.files = files
        # Off only in tests that are not about durability.
        self.fsync = fsync
        self._replicas: dict[str, _Replica] = {}

    # ------------------------------------------------------------ calls

    async def fence(self, name: str, epoch: int) -> ReplicaState:
        """Hold `epoch` (durably) as the topic's highest; the state answers the new
        owner's recovery of the last ledger."""
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            await self._take_epoch(replica, epoch)
            return replica.state()

    async def append(
        self,
        name: str,
        epoch: int,
        ledger_id: int,
        first_entry_id: int,
        frames: list[bytes],
        last_add_confirmed: Position,
    ) -> ReplicaState:
        """Write `frames` as entries first_entry_id... of `ledger_id` (the rules in the
        module's docstring); returns once they are durable."""
        _check_frames(name, frames)
        if ledger_id < 0 or first_entry_id < 0:
            raise ValueError(f"{name}: no ledger {ledger_id} entry {first_entry_id}")
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            # A higher epoch is held before anything else is looked at: even a write
            # refused for another reason fences the owners before this one.
            await self._take_epoch(replica, epoch)
            newest = replica.newest
            newest_id = newest.ledger_id if newest is not None else -1
            held = replica.entry_count(ledger_id) if ledger_id == newest_id else 0
            if (
                ledger_id == newest_id
                and newest.closed
                and first_entry_id == held
                and frames
                and epoch > replica.closed_at_epoch.get(ledger_id, NO_EPOCH)
            ):
                # Closed here when this broker let go of the topic (its own writer
                # sealed it) or by a writer of an older epoch: a writer of a newer
                # epoch, which matched its copy to the ledger's end in the record,
                # completes it. A close made at this epoch (recovery's) stays final.
                await self._reopen_newest(replica, newest)
            if ledger_id < newest_id or (ledger_id == newest_id and newest.closed):
                raise ReplicaLedgerClosedError(
                    f"{name}: ledger {ledger_id} is closed on this replica (its newest is "
                    f"{newest_id}); it takes no more entries"
                )
            if first_entry_id > held:
                raise ReplicaGapError(
                    f"{name}: ledger {ledger_id} holds {held} entries here; a write "
                    f"starting at entry {first_entry_id} would leave a gap: resend from {held}",
                    held,
                )
            if first_entry_id < held:
                self._check_cut(replica, ledger_id, first_entry_id, last_add_confirmed)
            # Told by the topic's current owner: whatever becomes of this write, no
            # entry at or below it may be cut from now on.
            replica.last_add_confirmed = max(replica.last_add_confirmed, last_add_confirmed)
            if ledger_id > newest_id:
                await self._start_ledger(replica, ledger_id)
            segment = replica.current
            assert segment is not None and segment.ledger_id == ledger_id
            if segment.fenced:
                raise StorageError(
                    f"{name}: the disk failed ledger {ledger_id} here earlier; this copy "
                    "takes no more entries"
                )
            if first_entry_id < held:
                log.info(
                    "%s: cutting ledger %d from %d to %d entries for a rewrite",
                    name,
                    ledger_id,
                    held,
                    first_entry_id,
                )
                segment.truncate(first_entry_id)
            try:
                await asyncio.get_running_loop().run_in_executor(
                    None, segment.write, frames, self.fsync
                )
            except OSError as error:
                raise storage_error(f"replica append to {name}", error) from error
            segment.commit_offsets([len(frame) for frame in frames])
            return replica.state()

    def read(
        self, name: str, ledger_id: int, first_entry_id: int, max_entries: int, max_bytes: int
    ) -> list[bytes]:
        """Frames of `ledger_id` from `first_entry_id` on, in order, CRC-checked: at
        most `max_entries`, stopping before `max_bytes` would be passed (the first is
        always returned) and before a damaged entry (ReplicaCorruptEntryError when the
        first one is damaged). Entries past the last add confirmed included: a new
        owner's recovery reads them."""
        replica = self._replica(name)
        count = replica.entry_count(ledger_id)
        if max_entries <= 0 or first_entry_id < 0 or first_entry_id >= count:
            return []
        segment = replica.segment(ledger_id, self.files)
        if segment is None:
            return []
        last = min(count - 1, first_entry_id + max_entries - 1)
        last = max(first_entry_id, segment.last_within(first_entry_id, last, max(max_bytes, 0)))
        frames: list[bytes] = []
        expected = first_entry_id
        for entry_id, header, payload in segment.read(first_entry_id, last):
            if entry_id != expected:
                break  # a damaged entry: the frames after it would be out of place
            frames.append(_frame_of(header, payload))
            expected += 1
        if not frames:
            raise ReplicaCorruptEntryError(
                f"{name}: entry {first_entry_id} of ledger {ledger_id} is damaged on this "
                "replica; read it from another"
            )
        return frames

    async def close_ledger(
        self, name: str, epoch: int, ledger_id: int, last_entry_id: int
    ) -> ReplicaState:
        """Close the copy of `ledger_id` at `last_entry_id` (the end a new owner
        recovered): entries past it are cut. A copy holding fewer entries is refused
        with ReplicaGapError (its count), and a copy of a ledger never received is
        listed closed and empty, so no late write can land in it."""
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            await self._take_epoch(replica, epoch)
            wanted = last_entry_id + 1
            info = replica.ledgers.get(ledger_id)
            newest = replica.newest
            if info is None:
                if newest is None or ledger_id > newest.ledger_id:
                    if wanted > 0:
                        raise ReplicaGapError(
                            f"{name}: ledger {ledger_id} holds no entries here, {wanted} recovered",
                            0,
                        )
                    await self._start_ledger(replica, ledger_id, create_file=False)
                return replica.state()
            held = replica.entry_count(ledger_id)
            if held < wanted:
                raise ReplicaGapError(
                    f"{name}: ledger {ledger_id} holds {held} entries here, fewer than the "
                    f"{wanted} recovered: send the rest before closing it",
                    held,
                )
            if held > wanted and replica.last_add_confirmed.ledger_id == ledger_id:
                # Within the ledger the LAC is in, never below it. An older ledger's end
                # is the one its record gives (recovery's close): what a copy holds past
                # it was never confirmed (a batch the quorum refused, the ledger closed
                # below it), whatever the LAC in a later ledger says.
                self._check_cut(replica, ledger_id, wanted, replica.last_add_confirmed)
            replica.closed_at_epoch[ledger_id] = epoch
            if info.closed and held == wanted:
                return replica.state()
            await self._close_at(replica, info, wanted)
            return replica.state()

    def state(self, name: str) -> ReplicaState:
        return self._replica(name).state()

    def ledgers(self, name: str) -> dict[int, int]:
        """Every ledger of the copy -> the entries it holds."""
        replica = self._replica(name)
        return {ledger_id: replica.entry_count(ledger_id) for ledger_id in replica.ledgers}

    async def write_cursors(
        self, name: str, epoch: int, states: dict[str, bytes], deleted: list[str]
    ) -> None:
        """Keep the writer's cursor states (name -> ManagedCursor.to_json) where a
        ManagedLedger opening this copy reads them, durably; same epoch rule. A state
        older than the one held (two writes of one writer crossing on the way) is
        dropped: a cursor's version only grows."""
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            await self._take_epoch(replica, epoch)
            prefix = f"{name}\x00"
            held = {
                cursor: raw
                for cursor in states
                if (raw := self.store.get(CURSORS_DB, prefix + cursor)) is not None
            }
            newer = newest_states(states, held)
            self.store.write_many(
                CURSORS_DB,
                {
                    prefix + cursor: value
                    for cursor, value in newer.items()
                    if value is states[cursor]
                },
                [prefix + cursor for cursor in deleted],
            )
            await self.store.sync_async()

    def cursor_states(self, name: str) -> dict[str, bytes]:
        """The cursor states this copy holds (name -> ManagedCursor.to_json), which a
        broker taking the topic merges with the other members' (newest_states)."""
        prefix = f"{name}\x00"
        return {
            key[len(prefix) :]: value for key, value in self.store.scan_prefix(CURSORS_DB, prefix)
        }

    async def write_snapshot(self, name: str, epoch: int, copy: SnapshotCopy) -> None:
        """Keep the writer's transaction-buffer snapshot where the buffer of a
        ManagedLedger opening this copy reads it, durably; same epoch rule. A change
        naming another state than the one held is refused
        (ReplicaSnapshotMismatchError, nothing written); a whole one replaces it."""
        why = check_copy(name, copy)
        if why is not None:
            raise ReplicaCorruptEntryError(f"{why}; nothing of it was written")
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            await self._take_epoch(replica, epoch)
            if not copy.whole and held_digest(self.store, name) != copy.follows:
                raise ReplicaSnapshotMismatchError(
                    f"{name}: this replica holds another transaction buffer snapshot than "
                    "the one the change follows; nothing was written: send the whole snapshot"
                )
            apply_copy(self.store, name, copy)
            await self.store.sync_async()

    async def trim(self, name: str, epoch: int, below_ledger_id: int) -> ReplicaState:
        """Delete the copy's ledgers older than `below_ledger_id` (the writer's retention
        deleted them; same epoch rule). The newest ledger is never deleted. The shorter
        list is durable before any file goes, as ManagedLedger.trim does, and the log
        end it carries never goes back."""
        replica = self._replica(name)
        async with replica.lock:
            replica = self._replica(name)
            await self._take_epoch(replica, epoch)
            newest = replica.newest
            doomed = [
                ledger_id
                for ledger_id in replica.ledgers
                if ledger_id < below_ledger_id and (newest is None or ledger_id != newest.ledger_id)
            ]
            if not doomed:
                return replica.state()
            replica.next_offset = max(replica.next_offset, self._confirmed_end_offset(replica))
            for ledger_id in doomed:
                del replica.ledgers[ledger_id]
            await self._persist(replica)
            for ledger_id in doomed:
                segment = replica.segments.pop(ledger_id, None)
                if segment is not None:
                    segment.release()
                delete_files(replica.path(ledger_id))
            log.info("%s: retention deleted copies of ledgers %s", name, doomed)
            return replica.state()

    def names(self) -> list[str]:
        """Every topic this broker has a copy's epoch for (a replica, or its own)."""
        return [name for name, _ in self.store.scan_prefix(REPLICAS_DB, "")]

    def holds(self, name: str) -> bool:
        """Whether this broker keeps a copy's epoch for the topic."""
        return self.store.get(REPLICAS_DB, name) is not None

    async def drop(self, name: str) -> None:
        """Forget the topic's copy: its files, its ledger list and its epoch (the topic
        was deleted). Metadata goes first, as ManagedLedger.delete does: a crash in
        between leaves orphan files, which the next open removes."""
        replica = self._replica(name)
        async with replica.lock:
            replica.release()
            self._replicas.pop(name, None)
            self.store.delete(LEDGERS_DB, name)
            self.store.delete(REPLICAS_DB, name)
            self.store.delete_prefix(CURSORS_DB, f"{name}\x00")
            delete_all(self.store, name)
            await self.store.sync_async()
            for ledger_id in replica.ledgers:
                delete_files(replica.path(ledger_id))

    def unload(self, name: str) -> None:
        """Let go of the topic's copy in memory (its file descriptors), keeping it on
        disk: before this broker opens it as a ManagedLedger."""
        replica = self._replicas.pop(name, None)
        if replica is not None:
            replica.release()

    def close(self) -> None:
        for name in list(self._replicas):
            self.unload(name)

    # ------------------------------------------------------------ rules

    def _check_epoch(self, replica: _Replica, epoch: int) -> None:
        if epoch < replica.epoch:
            raise ReplicaFencedError(
                f"{replica.name}: this replica holds epoch {replica.epoch}; a call with "
                f"epoch {epoch} comes from an owner that has been replaced"
            )

    async def _take_epoch(self, replica: _Replica, epoch: int) -> None:
        """Raise the held epoch to `epoch`, durably, before anything answers it."""
        self._check_epoch(replica, epoch)
        if epoch > replica.epoch:
            self.store.put_json(REPLICAS_DB, replica.name, {"epoch": epoch})
            await self.store.sync_async()
            replica.epoch = epoch

    def _check_cut(
        self, replica: _Replica, ledger_id: int, keep: int, last_add_confirmed: Position
    ) -> None:
        """Refuse a cut to `keep` entries that would lose a confirmed entry."""
        confirmed = max(last_add_confirmed, replica.last_add_confirmed)
        if confirmed.ledger_id > ledger_id or (
            confirmed.ledger_id == ledger_id and keep <= confirmed.entry_id
        ):
            raise ReplicaError(
                f"{replica.name}: cutting ledger {ledger_id} to {keep} entries would cut "
                f"confirmed entries (last add confirmed {confirmed})"
            )

    # ------------------------------------------------------------ ledgers

    async def _start_ledger(
        self, replica: _Replica, ledger_id: int, create_file: bool = True
    ) -> None:
        """Close the newest ledger at what it holds and list `ledger_id` after it,
        durably, before any of its bytes are written (ManagedLedger._adopt_new_ledger's
        order). Without `create_file` it is listed closed and empty."""
        loop = asyncio.get_running_loop()
        old = replica.current
        if old is not None:
            await loop.run_in_executor(None, old.seal)
            info = replica.ledgers[old.ledger_id]
            info.entries, info.size, info.closed = old.entry_count, old.size, True
            replica.segments[old.ledger_id] = old
            replica.current = None
        segment = None
        if create_file:
            path = replica.path(ledger_id)
            # A file left by a crash before an earlier listing of this id: never listed,
            # so never acknowledged into.
            delete_files(path)
            segment = await loop.run_in_executor(None, Segment.create, ledger_id, path, self.files)
        replica.ledgers[ledger_id] = LedgerInfo(
            ledger_id, 0, 0, int(time.time() * 1000), not create_file
        )
        replica.next_ledger_id = max(replica.next_ledger_id, ledger_id + 1)
        try:
            await self._persist(replica)
        except BaseException:
            del replica.ledgers[ledger_id]
            if segment is not None:
                segment.delete()
            raise
        replica.current = segment

    async def _reopen_newest(self, replica: _Replica, info: LedgerInfo) -> None:
        """Take appends again at the end of the newest ledger, listed closed here."""
        segment = replica.segment(info.ledger_id, self.files)
        if segment is None:  # listed empty, with no file: start its file now
            del replica.ledgers[info.ledger_id]
            await self._start_ledger(replica, info.ledger_id)
            return
        replica.segments.pop(info.ledger_id, None)
        info.closed = False
        await self._persist(replica)
        segment.reopen()
        replica.current = segment

    async def _close_at(self, replica: _Replica, info: LedgerInfo, entries: int) -> None:
        """Seal the copy of `info`'s ledger with `entries` entries, and list it closed.
        A closed copy being cut is listed open first: a crash mid-cut leaves it to be
        scanned on open, never listed with more entries than its file holds."""
        loop = asyncio.get_running_loop()
        ledger_id = info.ledger_id
        segment = replica.segment(ledger_id, self.files)
        if segment is None:  # listed empty, with no file
            info.closed = True
            await self._persist(replica)
            return
        if info.closed:
            info.closed = False
            await self._persist(replica)
            segment.reopen()
        segment.truncate(entries)
        await loop.run_in_executor(None, segment.seal)
        info.entries, info.size, info.closed = segment.entry_count, segment.size, True
        if replica.current is segment:
            replica.current = None
        replica.segments[ledger_id] = segment
        await self._persist(replica)

    async def _persist(self, replica: _Replica) -> None:
        """The ledger list, durably, in ManagedLedger's record format."""
        replica.next_offset = max(replica.next_offset, self._confirmed_end_offset(replica))
        self.store.put_json(
            LEDGERS_DB,
            replica.name,
            {
                "next_ledger_id": replica.next_ledger_id,
                "next_offset": replica.next_offset,
                "ledgers": [info.to_json() for info in replica.ledgers.values()],
            },
        )
        await self.store.sync_async()

    def _confirmed_end_offset(self, replica: _Replica) -> int:
        """The offset after the last confirmed entry this copy holds (0 when unknown):
        read from that entry's header, where the writer stamped its base offset."""
        confirmed = replica.last_add_confirmed
        if confirmed.entry_id < 0 or confirmed.entry_id >= replica.entry_count(confirmed.ledger_id):
            return 0
        segment = replica.segment(confirmed.ledger_id, self.files)
        if segment is None:
            return 0
        found = segment.read(confirmed.entry_id, confirmed.entry_id)
        if not found:
            return 0
        header = EntryHeader.decode(found[0][1])
        if header.base_offset is None:
            return 0
        return header.base_offset + header.offset_count

    # ------------------------------------------------------------ loading

    def _replica(self, name: str) -> _Replica:
        replica = self._replicas.get(name)
        if replica is None:
            replica = self._replicas[name] = self._load(name)
        return replica

    def _load(self, name: str) -> _Replica:
        """The copy as the store and the files have it: the open ledger scanned and its
        torn tail cut (as ManagedLedger._recover does), then taken up again."""
        meta = self.store.get_json(LEDGERS_DB, name) or {"next_ledger_id": 0, "ledgers": []}
        epoch = (self.store.get_json(REPLICAS_DB, name) or {}).get("epoch", NO_EPOCH)
        replica = _Replica(
            name,
            self.directory_of(name),
            epoch,
            SortedDict(),
            meta["next_ledger_id"],
            meta.get("next_offset", 0),
        )
        for data in meta["ledgers"]:
            info = LedgerInfo.from_json(data)
            replica.ledgers[info.ledger_id] = info
        for ledger_id, info in replica.ledgers.items():
            if info.closed:
                continue
            segment = Segment.recover(ledger_id, replica.path(ledger_id), self.files)
            info.entries, info.size = segment.entry_count, segment.size
            info.damaged = sorted(segment.damaged)
            if ledger_id == replica.ledgers.peekitem(-1)[0]:
                segment.reopen()  # listed open still: it takes appends again
                replica.current = segment
            else:
                info.closed = True
                replica.segments[ledger_id] = segment
        known = {replica.path(ledger_id).name for ledger_id in replica.ledgers}
        if replica.directory.exists():
            for path in replica.directory.glob("*.log"):
                if path.name not in known:
                    log.warning("%s: removing orphan replica file %s", name, path.name)
                    delete_files(path)
        return replica


def _check_frames(name: str, frames: list[bytes]) -> None:
    """Every frame whole and CRC-valid, each exactly one frame."""
    for index, frame in enumerate(frames):
        try:
            _header, _payload, end = decode_frame(frame, 0)
        except CorruptEntryError as error:
            raise ReplicaCorruptEntryError(
                f"{name}: frame {index} of the batch fails its checks ({error}); "
                "nothing of the batch was written"
            ) from None
        if end != len(frame):
            raise ReplicaCorruptEntryError(
                f"{name}: frame {index} of the batch has {len(frame) - end} bytes past its "
                "end; nothing of the batch was written"
            )


def _frame_of(header: bytes, payload: bytes) -> bytes:
    """The frame as it lies on disk (encoding is deterministic)."""
    return encode_frame(header, payload)
