"""A topic's log: an ordered list of ledgers, appended to with group commit.

Promises:
- `append` returns a position only after the entry's bytes are durable (fsync
  policy permitting); positions are assigned in append order and never reused.
- The last add confirmed (LAC) only moves forward, and only over durable entries.
- Reads return CRC-checked entries in position order, from the cache when they
  are recent, from the segment files otherwise. An entry whose bytes fail their
  checks is damaged: its position is skipped by reads, by first_position_after
  and by count_entries, recorded in the ledger list, and counted in
  `corrupt_entries`; the entries around it stay readable.
- Retention deletes only whole closed ledgers that every cursor has consumed.
- A write or fsync the disk refuses fails its whole batch with a typed
  StorageError (StorageFullError for ENOSPC) and keeps none of its bytes; after
  a failed fsync the ledger is fenced and the next append rolls over to a new
  one. Earlier entries stay readable throughout.
- Opening a ledger writes nothing: its first ledger file is created by the first
  append, so loading a topic costs metadata reads, not fsyncs. Its files are
  opened through a LedgerFiles cache (ledger_files.py) only while in use.
- The ledger is in one LedgerState at a time (managed_ledger/state.py), changed
  only by `_transition`, which refuses a move the state table does not list.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sortedcontainers import SortedDict

from managed_ledger.cache import SharedEntryCache
from managed_ledger.config import ManagedLedgerConfig
from managed_ledger.cursor import (
    NO_VERSION,
    CursorVersion,
    ManagedCursor,
    is_tombstone,
    state_version,
    tombstone,
)
from managed_ledger.entry import Entry, EntryHeader, stamp_base_offset, with_base_offset_slot
from managed_ledger.errors import (
    EntryTooLargeError,
    LedgerClosedError,
    ManagedLedgerError,
    TooManyOpenFilesError,
    storage_error,
)
from managed_ledger.framing import FRAME_SIZE, encode_frame
from managed_ledger.ledger_files import LedgerFiles, max_open_files
from managed_ledger.local_store import LocalStore
from managed_ledger.memory import entry_cache_budget, pending_write_budget
from managed_ledger.offsets import LogOffsets
from managed_ledger.position import EARLIEST, Position
from managed_ledger.replication import Replication, ReplicationError
from managed_ledger.segment import Segment, delete_files
from managed_ledger.snapshot_copy import SnapshotCopy, whole_copy
from managed_ledger.state import LedgerState, check_transition
from managed_ledger.write_budget import PendingWriteBudget

log = logging.getLogger(__name__)

LEDGERS_DB = b"ledgers"
CURSORS_DB = b"cursors"
# What a cached entry counts for besides its payload in a byte-bounded read (its
# header and frame, as on disk, roughly).
CACHED_ENTRY_OVERHEAD_BYTES = 64
# Bytes of entries past those asked for that a read from the files brings into the
# cache (bounded by half the cache's read-back region) [BookKeeper: readahead].
READ_AHEAD_BYTES = 4 * 1024 * 1024
# What a queued append holds besides its payload and encoded header, charged to the
# pending bounds: its _PendingAppend, future and EntryHeader (about 250 B and 150 B
# by tracemalloc on CPython 3.11).
PENDING_ENTRY_OVERHEAD_BYTES = 400


def _pending_charge(payload: bytes, frame_header: bytes) -> int:
    """What one queued append counts for in the pending bounds: its bytes as they
    will be written (frame, header, payload) and its objects."""
    return len(payload) + len(frame_header) + FRAME_SIZE + PENDING_ENTRY_OVERHEAD_BYTES


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    created_ms: int
    closed: bool
    # Entry ids whose bytes fail their checks (sorted): skipped by every read.
    damaged: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        data = {
            "id": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "created_ms": self.created_ms,
            "closed": self.closed,
        }
        if self.damaged:
            data["damaged"] = list(self.damaged)
        return data

    @classmethod
    def from_json(cls, data: dict) -> LedgerInfo:
        return cls(
            data["id"],
            data["entries"],
            data["size"],
            data["created_ms"],
            data["closed"],
            list(data.get("damaged", ())),
        )


@dataclass(slots=True)
class _PendingAppend:
    header: EntryHeader
    frame: bytes
    payload: bytes
    future: asyncio.Future


class ManagedLedger:
    """Use `await ManagedLedger.open(...)`; one instance per topic per process."""

    def __init__(
        self,
        name: str,
        directory: Path,
        store: LocalStore,
        config: ManagedLedgerConfig,
        files: LedgerFiles | None = None,
        entry_cache: SharedEntryCache | None = None,
        write_budget: PendingWriteBudget | None = None,
        replication: Replication | None = None,
    ):
        self.name = name
        # The other copies of this log (replication.py); None: this is the only one.
        self.replication = replication
        # Shared by every ledger of a broker; a ledger opened alone gets its own.
        self.files = files if files is not None else LedgerFiles(max_open_files(config))
        if entry_cache is None:
            entry_cache = SharedEntryCache(entry_cache_budget(config))
        if write_budget is None:
            write_budget = PendingWriteBudget(pending_write_budget(config))
        self.write_budget = write_budget
        # This ledger's shares of the broker's budgets, never more than them.
        self.max_pending_bytes = min(config.max_pending_bytes, write_budget.max_bytes)
        self.directory = directory
        self.store = store
        self.config = config
        self._ledgers: SortedDict[int, LedgerInfo] = SortedDict()
        self._segments: dict[int, Segment] = {}
        self._current: Segment | None = None
        self._next_ledger_id = 0
        self.last_confirmed = EARLIEST
        self.cache = entry_cache.view(config.cache_size_bytes)
        self.cursors: dict[str, ManagedCursor] = {}
        self._pending: deque[_PendingAppend] = deque()
        self._pending_bytes = 0
        self._space_available = asyncio.Event()
        self._writer: asyncio.Task | None = None
        self._listeners: list[Callable[[], None]] = []
        self._entry_listeners: list[Callable[[list[Entry]], None]] = []
        self._trim_floor: Callable[[], Position] | None = None
        self._ledger_deleted_listeners: list[Callable[[int], None]] = []
        self._dirty_cursors: set[str] = set()
        self._cursor_flush: asyncio.TimerHandle | None = None
        # The version the last cursor write was stamped with (ManagedCursor.version).
        self._cursor_version: CursorVersion = NO_VERSION
        # No one holds the ledger before open() has recovered it and adopted the
        # current ledger, so it starts as it will be seen.
        self._state = LedgerState.LEDGER_OPENED
        self.entries_added = 0
        # Damaged entries known since open (those listed with retained ledgers,
        # and those reads find later); retention never lowers it.
        self._corrupt_entries = 0
        # Log offsets: stamped on each entry as it is written (managed_ledger/offsets.py).
        self.offsets = LogOffsets(self)
        self._ledger_deleted_listeners.append(self.offsets.forget_ledger)

    # ------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        name: str,
        directory: Path,
        store: LocalStore,
        config: ManagedLedgerConfig | None = None,
        files: LedgerFiles | None = None,
        entry_cache: SharedEntryCache | None = None,
        write_budget: PendingWriteBudget | None = None,
        replication: Replication | None = None,
    ) -> ManagedLedger:
        """`files`, `entry_cache`, `write_budget`: the broker's, shared by its ledgers;
        a ledger opened without them gets its own, sized by `config`. `replication`:
        where its writes are copied to (replication.py); None for a single copy."""
        ledger = cls(
            name,
            directory,
            store,
            config or ManagedLedgerConfig(),
            files,
            entry_cache,
            write_budget,
            replication,
        )
        await asyncio.get_running_loop().run_in_executor(None, ledger._recover)
        if replication is not None:
            if ledger._current is None and not ledger._ledgers:
                ledger.last_confirmed = Position(
                    max(ledger._next_ledger_id, replication.next_ledger_id), -1
                )
            ledger._next_ledger_id = max(ledger._next_ledger_id, replication.next_ledger_id)
            replication.attach(
                ledger.frames,
                lambda: ledger.last_confirmed,
                ledger.ledger_ids,
                ledger.cursor_states,
                lambda: whole_copy(ledger.store, ledger.name),
            )
        return ledger

    def _recover(self) -> None:
        meta = self.store.get_json(LEDGERS_DB, self.name) or {"next_ledger_id": 0, "ledgers": []}
        self._next_ledger_id = meta["next_ledger_id"]
        # Kept beside the list so that offsets go on from there once retention has
        # deleted every entry that showed them (absent in lists older than it).
        self.offsets.floor = meta.get("next_offset", 0)
        damaged_recorded = False
        for data in meta["ledgers"]:
            info = LedgerInfo.from_json(data)
            if not info.closed:
                # The ledger that was open when the process stopped: scan it and
                # cut what a crash may have torn.
                segment = Segment.recover(info.ledger_id, self._path(info.ledger_id), self.files)
                info.entries, info.size, info.closed = segment.entry_count, segment.size, True
                info.damaged = sorted(segment.damaged)
                if info.damaged:
                    # Recorded now: the index written by recovery holds offsets only.
                    damaged_recorded = True
            if info.entries == 0:
                delete_files(self._path(info.ledger_id))
                continue
            self._ledgers[info.ledger_id] = info
            self._corrupt_entries += len(info.damaged)
        if self._ledgers:
            # Never at or below an id the list shows: a message id is never reused.
            self._next_ledger_id = max(self._next_ledger_id, self._ledgers.peekitem(-1)[0] + 1)
        if damaged_recorded:
            self._persist_ledger_list()
        # A file the ledger list does not name was never acknowledged into: either a
        # deleted ledger whose removal was interrupted, or one created just before
        # a crash, ahead of the metadata write that would have adopted it (its id
        # is then >= next_ledger_id, and left alone it would block that id forever).
        known = {self._path(ledger_id).name for ledger_id in self._ledgers}
        for path in self.directory.glob("*.log"):
            if path.name not in known:
                log.warning("%s: removing orphan ledger file %s", self.name, path.name)
                delete_files(path)
        if self._ledgers:
            last = self._ledgers.peekitem(-1)[1]
            self.last_confirmed = Position(last.ledger_id, last.entries - 1)
        else:
            # Nothing yet: the first entry will be entry 0 of the next ledger.
            self.last_confirmed = Position(self._next_ledger_id, -1)
        for key, value in self.store.scan_prefix(CURSORS_DB, self._cursor_prefix()):
            if is_tombstone(value):
                # A copy of a cursor deleted by an earlier writer: kept to outvote older
                # copies of it, never opened.
                self._cursor_version = max(self._cursor_version, state_version(value))
                continue
            cursor = ManagedCursor.from_json(self, key[len(self._cursor_prefix()) :], value)
            self.cursors[cursor.name] = cursor
            self._cursor_version = max(self._cursor_version, cursor.version)

    def _path(self, ledger_id: int) -> Path:
        return self.directory / f"{ledger_id:016x}.log"

    async def _adopt_new_ledger(self, segment: Segment) -> None:
        """Make a freshly created segment the current ledger, durably listed first.

        Runs on the event loop: the ledger list and the current segment are loop
        state. The list's fsync is shared with other ledgers adopting at once.
        """
        ledger_id = segment.ledger_id
        assert ledger_id == self._next_ledger_id, (ledger_id, self._next_ledger_id)
        self._next_ledger_id = ledger_id + 1
        self._ledgers[ledger_id] = LedgerInfo(ledger_id, 0, 0, int(time.time() * 1000), False)
        try:
            self._put_ledger_list()
            await self.store.sync_async()
        except BaseException:
            # Not listed, so never written to: forget it and remove its file.
            del self._ledgers[ledger_id]
            self._next_ledger_id = ledger_id
            segment.delete()
            raise
        self._segments[ledger_id] = segment
        self._current = segment

    def _persist_ledger_list(self) -> None:
        self._put_ledger_list()
        self.store.sync()

    def _put_ledger_list(self) -> None:
        """One LMDB write: the ledgers, the next ledger id and the next offset, so a
        list that retention shortened never lands without what it must not forget."""
        self.store.put_json(
            LEDGERS_DB,
            self.name,
            {
                "next_ledger_id": self._next_ledger_id,
                "next_offset": self.offsets.known_end(),
                "ledgers": [info.to_json() for info in self._ledgers.values()],
            },
        )

    # ------------------------------------------------------------ state

    @property
    def state(self) -> LedgerState:
        return self._state

    def _transition(self, new: LedgerState) -> None:
        """The one place the state changes; an illegal move raises."""
        check_transition(self.name, self._state, new)
        self._state = new

    def _writer_reached(self, new: LedgerState) -> None:
        """What the writer found out about the current ledger. A close under way
        keeps its state: the queue it drains still rolls over a fenced or full
        ledger, which Segment.fenced and the ledger's size tell."""
        if self._state is not new and self._state.is_open:
            self._transition(new)

    async def close(self) -> None:
        """Finish pending appends, close the current ledger, persist cursors."""
        if not self._state.is_open:
            return
        self._transition(LedgerState.CLOSING)
        if self._writer is not None:
            await asyncio.shield(self._writer)
        if self.replication is not None:
            self.replication.close()
        self._flush_cursors()
        if self._cursor_flush is not None:
            self._cursor_flush.cancel()
        current = self._current
        if current is not None:
            # Only the fsyncs run in a worker thread; file descriptors are closed
            # and the ledger list changed here, on the loop, where readers run.
            try:
                await asyncio.get_running_loop().run_in_executor(None, current.seal)
            except OSError as error:
                # Left listed as open: the next start scans it and cuts its tail,
                # as after a crash. Its acknowledged entries were fsynced already.
                log.error(
                    "%s: cannot seal ledger %d on close: %s", self.name, current.ledger_id, error
                )
            else:
                info = self._ledgers[current.ledger_id]
                info.entries, info.size, info.closed = current.entry_count, current.size, True
                # Shared with other ledgers closing at once (a broker unloading topics).
                self._put_ledger_list()
                await self.store.sync_async()
        for segment in self._segments.values():
            segment.release()
        # Its entries give their room in the broker's cache back at once.
        self.cache.close()
        self._transition(LedgerState.CLOSED)

    async def delete(self) -> None:
        """Close and remove every ledger file, cursor and piece of metadata."""
        await self.close()
        # Metadata first, as in trim(): files left by a crash are orphans.
        self.store.delete(LEDGERS_DB, self.name)
        self.store.delete_prefix(CURSORS_DB, self._cursor_prefix())
        self.store.sync()
        for ledger_id in list(self._ledgers):
            delete_files(self._path(ledger_id))
        self.cache.clear()

    # ------------------------------------------------------------ append

    async def append(self, header: EntryHeader, payload: bytes) -> Position:
        """Append one entry; returns its position once it is durable."""
        state = self._state  # not is_open: no property call on the hot path
        if state is LedgerState.CLOSING or state is LedgerState.CLOSED:
            raise LedgerClosedError(f"{self.name} is closed")
        if len(payload) > self.config.max_entry_size_bytes:
            raise EntryTooLargeError(
                f"entry of {len(payload)} bytes exceeds the limit of "
                f"{self.config.max_entry_size_bytes} bytes"
            )
        while self._pending_bytes > self.max_pending_bytes:
            self._space_available.clear()
            await self._space_available.wait()
            if not self._state.is_open:
                raise LedgerClosedError(f"{self.name} is closed")
        # Encoded with room for the base offset, which the writer stamps in place.
        header_bytes = with_base_offset_slot(header.encode())
        charge = _pending_charge(payload, header_bytes)
        # Reserved here first, so a topic never waits in the broker's line for more
        # than its own bound: the line stays fair to the others.
        self._pending_bytes += charge
        if not self.write_budget.try_take(charge):
            await self._wait_for_budget(charge)
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_PendingAppend(header, header_bytes, payload, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop(), name=f"writer:{self.name}")
        return await future

    def _should_roll_over(self) -> bool:
        current = self._current
        if current is None:
            return True  # no ledger file yet: the first append creates one
        if current.fenced:
            # The disk failed it: never written again (Segment.write asserts it).
            # The segment's own fence, not the state: a close keeps CLOSING.
            return True
        info = self._ledgers[current.ledger_id]
        return current.entry_count > 0 and (
            current.entry_count >= self.config.max_entries_per_ledger
            or current.size >= self.config.max_ledger_size_bytes
            or time.time() * 1000 - info.created_ms >= self.config.max_ledger_age_s * 1000
        )

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            if self._should_roll_over():
                old = self._current
                if old is not None:
                    self._writer_reached(LedgerState.CLOSING_LEDGER)
                try:
                    await self._roll_over()
                except ReplicationError as error:
                    # Another broker took the topic, or the ensemble cannot be reached:
                    # nothing was written; the next append tries again.
                    log.warning("%s: cannot open a new ledger: %s", self.name, error)
                    self._writer_reached(LedgerState.WRITE_FAILED)
                    self._fail_pending(error)
                    return
                except TooManyOpenFilesError as error:
                    # A limit, not a disk fault (never FENCED for it): the next
                    # append retries the rollover once descriptors are free again.
                    log.error("%s: rollover failed: %s", self.name, error)
                    if old is not None:
                        self._writer_reached(LedgerState.WRITE_FAILED)
                    self._fail_pending(error)
                    return
                except Exception as error:
                    # Nothing was written to the new ledger; the next append retries
                    # the rollover. Fail what is queued rather than leave it waiting.
                    log.error("%s: rollover failed: %s", self.name, error)
                    self._writer_reached(
                        LedgerState.FENCED
                        if old is not None and old.fenced
                        else LedgerState.WRITE_FAILED
                    )
                    what = f"rollover of {self.name} failed"
                    self._fail_pending(
                        storage_error(what, error)
                        if isinstance(error, OSError)
                        else ManagedLedgerError(f"{what}: {error}")
                    )
                    return
                self._writer_reached(LedgerState.LEDGER_OPENED)
            batch: list[_PendingAppend] = []
            frames: list[bytes] = []
            batch_bytes = 0
            room = self.config.max_entries_per_ledger - self._current.entry_count
            # Offsets are numbered here, in log order, so a failed write leaves no gap.
            offsets = self.offsets
            while (
                self._pending
                and len(batch) < room
                and (not batch or batch_bytes < self.config.max_group_commit_bytes)
            ):
                pending = self._pending.popleft()
                base = offsets.stamp(pending.header.offset_count)
                pending.header = pending.header.stamped(base)
                frame = encode_frame(stamp_base_offset(pending.frame, base), pending.payload)
                batch.append(pending)
                frames.append(frame)
                batch_bytes += len(frame)
            batch_charge = batch_bytes + len(batch) * PENDING_ENTRY_OVERHEAD_BYTES
            segment = self._current
            first_entry_id = segment.entry_count
            try:
                if self.replication is None:
                    await loop.run_in_executor(None, segment.write, frames, self.config.fsync)
                else:
                    await self._write_replicated(segment, first_entry_id, frames)
            except ReplicationError as error:
                # Not confirmed by the quorum: as if never written (the writer's own
                # bytes of it are cut). Some replicas may hold it, so its entry ids are
                # never given to another entry: the ledger closes below it (where every
                # broker sees it, replication.open_ledger) and the next append rolls over.
                log.warning("%s: append not confirmed: %s", self.name, error)
                if error.may_be_held:
                    segment.fenced = True
                offsets.unstamp()
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                self._release_pending(batch_charge)
                continue
            except TooManyOpenFilesError as error:
                # No descriptor, so nothing was written: the batch fails, the ledger
                # is as it was.
                log.error("%s: append failed: %s", self.name, error)
                offsets.unstamp()
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(error)
                self._release_pending(batch_charge)
                continue
            except OSError as error:
                # Offsets were not published, so the next write lands on the same
                # offset and overwrites whatever part of this one reached the disk.
                log.error(
                    "%s: append failed: %s%s",
                    self.name,
                    error,
                    "; ledger fenced, the next append rolls over" if segment.fenced else "",
                )
                self._writer_reached(
                    LedgerState.FENCED if segment.fenced else LedgerState.WRITE_FAILED
                )
                offsets.unstamp()
                failure = storage_error(f"append to {self.name} failed", error)
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(failure)
                self._release_pending(batch_charge)
                continue
            segment.commit_offsets([len(frame) for frame in frames])
            if self._state is LedgerState.WRITE_FAILED:
                self._transition(LedgerState.LEDGER_OPENED)  # the disk takes writes again
            ledger_id = segment.ledger_id
            entries = [
                Entry(Position(ledger_id, first_entry_id + index), pending.header, pending.payload)
                for index, pending in enumerate(batch)
            ]
            for entry in entries:
                self.cache.put(entry)
            new_lac = entries[-1].position
            assert new_lac > self.last_confirmed, (new_lac, self.last_confirmed)
            # Entry listeners see the batch in order before anyone learns the new
            # LAC, so state derived from the log never lags what readers can see.
            for listener in self._entry_listeners:
                listener(entries)
            # The offsets become visible with the entries that hold them, not before.
            offsets.confirm(offsets.base_of(entries[-1]) + entries[-1].header.offset_count)
            self.last_confirmed = new_lac
            for entry, pending in zip(entries, batch, strict=True):
                if not pending.future.done():
                    pending.future.set_result(entry.position)
            self.entries_added += len(batch)
            self._release_pending(batch_charge)
            self._notify()

    async def _write_replicated(
        self, segment: Segment, first_entry_id: int, frames: list[bytes]
    ) -> None:
        """Write the batch here and to the other copies at once; return once both are
        done. Raises the local write's error first (an OSError), else the replication's
        (ReplicationError), having cut this copy's bytes of the batch."""
        assert self.replication is not None
        loop = asyncio.get_running_loop()
        local, remote = await asyncio.gather(
            loop.run_in_executor(None, segment.write, frames, self.config.fsync),
            self.replication.replicate(
                segment.ledger_id, first_entry_id, frames, self.last_confirmed
            ),
            return_exceptions=True,
        )
        if isinstance(local, BaseException):
            raise local
        if isinstance(remote, BaseException):
            if not isinstance(remote, ReplicationError):
                remote = ReplicationError(f"replication of {self.name} failed: {remote!r}")
            try:
                await loop.run_in_executor(None, segment.discard_uncommitted)
            except OSError as error:
                raise storage_error(f"append to {self.name} failed", error) from remote
            raise remote

    def frames(self, ledger_id: int, first_entry_id: int, last_entry_id: int) -> list[bytes]:
        """The frames of entries first..last of a ledger as they are on disk (damaged
        ones left out), for a replica that missed them. Written entries only: it may
        run ahead of the LAC by the batch being confirmed."""
        if ledger_id not in self._ledgers:
            return []  # retention deleted it, or it never held an entry here
        segment = self._current
        if segment is None or segment.ledger_id != ledger_id:
            segment = self._segment(ledger_id)
        last_entry_id = min(last_entry_id, segment.entry_count - 1)
        if first_entry_id > last_entry_id:
            return []
        return [
            encode_frame(header, payload)
            for _, header, payload in segment.read(first_entry_id, last_entry_id)
        ]

    async def _wait_for_budget(self, charge: int) -> None:
        """The broker's pending-write budget is spent: wait in line for `charge`."""
        try:
            await self.write_budget.take(charge)
        except BaseException:
            self._unreserve(charge)
            raise
        if not self._state.is_open:
            self._release_pending(charge)
            raise LedgerClosedError(f"{self.name} is closed")

    def _unreserve(self, charge: int) -> None:
        self._pending_bytes -= charge
        if self._pending_bytes <= self.max_pending_bytes:
            self._space_available.set()

    def _release_pending(self, charge: int) -> None:
        """Written or failed: back to this ledger's bound and the broker's budget."""
        self.write_budget.give_back(charge)
        self._unreserve(charge)

    def _fail_pending(self, failure: ManagedLedgerError) -> None:
        failed = 0
        while self._pending:
            pending = self._pending.popleft()
            failed += _pending_charge(pending.payload, pending.frame)
            if not pending.future.done():
                pending.future.set_exception(failure)
        self._release_pending(failed)

    async def _roll_over(self) -> None:
        """Seal the current ledger (if any) and start the next one."""
        old = self._current
        ledger_id = self._next_ledger_id
        path = self._path(ledger_id)
        if self.replication is not None:
            # Listed where every broker sees it before anything is written to it, with
            # where the one before it ends: no copy of it counts past that.
            await self.replication.open_ledger(
                ledger_id, None if old is None else (old.ledger_id, old.entry_count)
            )

        def seal_and_create() -> Segment:
            # Blocking I/O only. Readers on the loop may be reading the old
            # segment right now: the file cache keeps its descriptor while they do.
            if old is not None:
                old.seal()
            return Segment.create(ledger_id, path, self.files)

        segment = await asyncio.get_running_loop().run_in_executor(None, seal_and_create)
        if old is not None:
            info = self._ledgers[old.ledger_id]
            info.entries, info.size, info.closed = old.entry_count, old.size, True
        await self._adopt_new_ledger(segment)
        if old is not None:
            log.info(
                "%s: rolled over from ledger %d to %d",
                self.name,
                old.ledger_id,
                self._current.ledger_id,
            )

    # ------------------------------------------------------------ listeners

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call `callback()` every time the LAC moves."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def add_entry_listener(self, callback: Callable[[list[Entry]], None]) -> None:
        """Call `callback(entries)` with every batch of durable entries, in log order,
        synchronously in the writer, before the LAC moves over them."""
        self._entry_listeners.append(callback)

    def remove_entry_listener(self, callback: Callable[[list[Entry]], None]) -> None:
        if callback in self._entry_listeners:
            self._entry_listeners.remove(callback)

    def set_trim_floor(self, floor: Callable[[], Position]) -> None:
        """Retention never deletes a ledger holding entries after `floor()`."""
        self._trim_floor = floor

    def add_ledger_deleted_listener(self, callback: Callable[[int], None]) -> None:
        """Call `callback(ledger_id)` when retention deletes a ledger."""
        self._ledger_deleted_listeners.append(callback)

    def _notify(self) -> None:
        for callback in list(self._listeners):
            callback()

    # ------------------------------------------------------------ reads

    def _entry_count(self, ledger_id: int) -> int:
        if self._current is not None and ledger_id == self._current.ledger_id:
            return self._current.entry_count
        info = self._ledgers.get(ledger_id)
        return info.entries if info is not None else 0

    def _segment(self, ledger_id: int) -> Segment:
        segment = self._segments.get(ledger_id)
        if segment is None:
            info = self._ledgers.get(ledger_id)
            damaged = frozenset(info.damaged) if info is not None else frozenset()
            segment = Segment.open_closed(ledger_id, self._path(ledger_id), self.files, damaged)
            self._segments[ledger_id] = segment
        return segment

    def read(
        self,
        start: Position,
        max_entries: int,
        bound: Position | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        """Up to max_entries entries at positions >= start and <= bound (default LAC).

        With max_bytes, entries stop before their payloads and headers would pass it
        (the first entry is always returned, so a reader makes progress); entries past
        it are not read from disk."""
        bound = self.last_confirmed if bound is None else min(bound, self.last_confirmed)
        result: list[Entry] = []
        if max_entries <= 0 or start > bound:
            return result
        budget = [max_bytes if max_bytes is not None else -1]
        for ledger_id in self._ledgers.irange(minimum=max(start.ledger_id, 0)):
            if ledger_id > bound.ledger_id:
                break
            count = self._entry_count(ledger_id)
            first = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
            ledger_last = count - 1
            if ledger_id == bound.ledger_id:
                ledger_last = min(ledger_last, bound.entry_id)
            # More than one round only when damaged entries were skipped: a read
            # never comes back short while readable entries remain in range.
            within_budget = True
            while within_budget and first <= ledger_last and len(result) < max_entries:
                last = min(ledger_last, first + (max_entries - len(result)) - 1)
                within_budget = self._read_ledger(ledger_id, first, last, result, budget)
                first = last + 1
            if not within_budget:
                break
            if len(result) >= max_entries:
                break
        return result

    def _read_ledger(
        self, ledger_id: int, first: int, last: int, into: list[Entry], budget: list[int]
    ) -> bool:
        """Appends entries first..last to `into`; with a byte budget (budget[0] >= 0)
        stops once it is spent. False when the budget stopped it."""
        cache = self.cache
        bounded = budget[0] >= 0
        entry_id = first
        while entry_id <= last:
            cached = cache.get(ledger_id, entry_id)
            if cached is None:
                break
            if bounded:
                size = len(cached.payload) + CACHED_ENTRY_OVERHEAD_BYTES
                if into and size > budget[0]:
                    return False
                budget[0] = max(budget[0] - size, 0)
            into.append(cached)
            entry_id += 1
        if entry_id <= last:
            segment = self._segment(ledger_id)
            cut = last
            if bounded:
                cut = segment.last_within(entry_id, last, budget[0])
                if cut < entry_id:
                    if into:
                        return False
                    cut = entry_id  # the first entry goes out whatever its size
            # Read ahead: the entries after these, up to READ_AHEAD_BYTES, come in
            # the same pread and wait in the cache, so a reader going through the
            # files asks the disk once per read-ahead span, not once per pass.
            ahead = cut
            readable_last = self._entry_count(ledger_id) - 1
            room = min(READ_AHEAD_BYTES, cache.read_back_max_bytes // 2)
            if cut < readable_last and room > segment.span(entry_id, cut):
                ahead = max(cut, segment.last_within(entry_id, readable_last, room))
            damaged_before = len(segment.damaged)
            for read_id, header, payload in segment.read(entry_id, ahead):
                entry = Entry(Position(ledger_id, read_id), EntryHeader.decode(header), payload)
                if read_id <= cut:
                    into.append(entry)
                # What the reader takes now stays too: it often takes only part of a
                # read (its consumer's permits), and its next pass finds the rest here.
                cache.put_read(entry)
            if len(segment.damaged) != damaged_before:
                self._record_damage(ledger_id, segment)
            if bounded:
                budget[0] = max(budget[0] - segment.span(entry_id, cut), 0)
                if cut < last:
                    return False
        return True

    def _record_damage(self, ledger_id: int, segment: Segment) -> None:
        """A read found an entry gone bad: listed with the ledger, so it stays skipped
        (and counted) after a restart. Made durable with the next metadata sync."""
        info = self._ledgers.get(ledger_id)
        if info is not None:
            self._corrupt_entries += len(segment.damaged) - len(info.damaged)
            info.damaged = sorted(segment.damaged)
            self._put_ledger_list()

    def _damaged(self, ledger_id: int) -> list[int]:
        info = self._ledgers.get(ledger_id)
        return info.damaged if info is not None else []

    @property
    def corrupt_entries(self) -> int:
        """Entries found damaged since open: those listed with the ledgers retained
        at open, plus those reads found since. Never lowered (a counter)."""
        return self._corrupt_entries

    def first_position_after(self, position: Position) -> Position | None:
        """The first existing entry after `position`, or None when there is none yet."""
        following = position.next_in_ledger()
        if 0 <= following.entry_id < self._entry_count(following.ledger_id):
            damaged = self._damaged(following.ledger_id)
            if not damaged or following.entry_id not in damaged:
                return following  # the usual case, asked per ack: no walk over the ledgers
        for ledger_id in self._ledgers.irange(minimum=max(position.ledger_id, 0)):
            first = position.entry_id + 1 if ledger_id == position.ledger_id else 0
            damaged = self._damaged(ledger_id)
            while first in damaged:
                first += 1
            if first < self._entry_count(ledger_id):
                return Position(ledger_id, first)
        return None

    def ledger_ids(self) -> list[int]:
        return list(self._ledgers)

    def holds_through(self, position: Position) -> bool:
        """Every entry up to `position` is confirmed here (or was, before retention
        deleted its ledger): `position` is at most the LAC, and within the entries its
        ledger holds when that ledger is listed."""
        if position > self.last_confirmed:
            return False
        if position.ledger_id in self._ledgers:
            return position.entry_id < self._entry_count(position.ledger_id)
        first = self._ledgers.peekitem(0)[0] if self._ledgers else self._next_ledger_id
        return position.entry_id < 0 or position.ledger_id < first

    def first_position(self) -> Position:
        """The position just before the oldest retained entry (an 'earliest' start)."""
        if not self._ledgers:
            return Position(self._next_ledger_id, -1)  # nothing written yet
        first_ledger = self._ledgers.peekitem(0)[0]
        return Position(first_ledger, -1)

    def count_entries(self, after: Position, upto: Position) -> int:
        """How many entries lie in (after, upto]."""
        if upto <= after:
            return 0
        total = 0
        for ledger_id in self._ledgers.irange(max(after.ledger_id, 0), upto.ledger_id):
            count = self._entry_count(ledger_id)
            low = after.entry_id + 1 if ledger_id == after.ledger_id else 0
            high = min(count - 1, upto.entry_id) if ledger_id == upto.ledger_id else count - 1
            if high >= low:
                total += high - low + 1
                total -= sum(1 for entry_id in self._damaged(ledger_id) if low <= entry_id <= high)
        return total

    def find_position_by_time(self, timestamp_ms: int) -> Position:
        """The position just before the first entry published at or after timestamp_ms."""
        previous = self.first_position()
        for ledger_id in self._ledgers:
            count = self._entry_count(ledger_id)
            if count == 0:
                continue
            low, high = 0, count
            while low < high:
                middle = (low + high) // 2
                found = self.read(Position(ledger_id, middle), 1)
                # A damaged entry reads as the next one (or none at a ledger's end).
                if not found or found[0].header.publish_time_ms < timestamp_ms:
                    low = middle + 1
                else:
                    high = middle
            if low < count:
                return Position(ledger_id, low - 1) if low > 0 else previous
            previous = Position(ledger_id, count - 1)
        return previous

    # ------------------------------------------------------------ cursors

    def _cursor_prefix(self) -> str:
        return f"{self.name}\x00"

    def open_cursor(
        self, name: str, start_at_earliest: bool, properties: dict[str, str] | None = None
    ) -> tuple[ManagedCursor, bool]:
        """Open (or create) a durable cursor; returns (cursor, created)."""
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor, False
        mark_delete = self.first_position() if start_at_earliest else self.last_confirmed
        cursor = ManagedCursor(self, name, mark_delete, dict(properties or {}))
        self.cursors[name] = cursor
        self._write_cursors([name])
        return cursor, True

    def delete_cursor(self, name: str) -> None:
        self.cursors.pop(name, None)
        self._dirty_cursors.discard(name)
        self.store.delete(CURSORS_DB, self._cursor_prefix() + name)
        if self.replication is not None:
            self._replicate_cursors({name: tombstone(self._next_cursor_version())}, [])
        self.trim()

    def cursor_changed(self, name: str) -> None:
        self._dirty_cursors.add(name)
        if self._cursor_flush is None and self._state.is_open:
            loop = asyncio.get_running_loop()
            self._cursor_flush = loop.call_later(
                self.config.cursor_flush_interval_s, self._flush_cursors
            )

    def _flush_cursors(self) -> None:
        self._cursor_flush = None
        names, self._dirty_cursors = list(self._dirty_cursors), set()
        self._write_cursors(names)
        self.trim()

    def _write_cursors(self, names: list[str]) -> asyncio.Future | None:
        """Write the cursors here; with replication, send them to the other copies too
        (the future is done once the ack quorum holds them)."""
        prefix = self._cursor_prefix()
        limit = self.config.max_persisted_acked_positions
        states = {}
        for name in names:
            cursor = self.cursors.get(name)
            if cursor is not None:
                cursor.version = self._next_cursor_version()
                states[name] = cursor.to_json(limit)
        if not states:
            return None
        self.store.write_many(CURSORS_DB, {prefix + n: v for n, v in states.items()})
        if self.replication is None:
            return None
        return self._replicate_cursors(states, [])

    def _next_cursor_version(self) -> CursorVersion:
        """A version above every cursor state written before, by this writer or an
        earlier one: a new writer's epoch is above its predecessors', so its first
        write already is."""
        epoch = self.replication.epoch if self.replication is not None else 0
        last_epoch, last_sequence = self._cursor_version
        self._cursor_version = max((epoch, 1), (last_epoch, last_sequence + 1))
        return self._cursor_version

    def _replicate_cursors(self, states: dict[str, bytes], deleted: list[str]) -> asyncio.Future:
        """Cursor states travel beside the log, so a broker taking the topic opens its
        subscriptions where they were; a write that cannot reach the quorum is logged
        (the cursor is written again with its next change) unless someone waits."""
        assert self.replication is not None
        future = asyncio.ensure_future(self.replication.replicate_cursors(states, deleted))
        future.add_done_callback(self._cursor_replication_done)
        return future

    def _cursor_replication_done(self, future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("%s: cursors not replicated: %s", self.name, future.exception())

    def replicate_snapshot(self, copy: SnapshotCopy) -> None:
        """A transaction-buffer snapshot of this log was written to the store: it
        travels beside the log to the other copies (nothing to do without them)."""
        if self.replication is not None:
            self.replication.replicate_snapshot(copy)

    def cursor_states(self) -> dict[str, bytes]:
        """Every cursor's persisted form, by name."""
        limit = self.config.max_persisted_acked_positions
        return {name: cursor.to_json(limit) for name, cursor in self.cursors.items()}

    async def write_cursor(self, name: str) -> None:
        """Write one cursor now and return once it is durable (ManagedCursor.persist):
        on the ack quorum of its copies when the ledger is replicated."""
        replicated = self._write_cursors([name])
        await self.store.sync_async()
        if replicated is not None:
            await replicated

    async def write_all_cursors(self) -> None:
        """Write every cursor now and return once they are durable here and, when the
        ledger is replicated, on its ack quorum: before the log's writer hands it to
        another, so the next writer opens each subscription where it was."""
        replicated = self._write_cursors(list(self.cursors))
        await self.store.sync_async()
        if replicated is not None:
            await replicated

    # ------------------------------------------------------------ retention

    def trim(self) -> list[int]:
        """Delete closed ledgers consumed by every cursor; returns the deleted ids."""
        if not self.cursors or not self._state.is_open:
            return []
        slowest = min(cursor.mark_delete for cursor in self.cursors.values())
        if self._trim_floor is not None:
            slowest = min(slowest, self._trim_floor())
        now_ms = time.time() * 1000
        deleted = []
        for ledger_id, info in list(self._ledgers.items()):
            if self._current is not None and ledger_id == self._current.ledger_id:
                break
            if slowest < Position(ledger_id, info.entries - 1):
                break
            if now_ms - info.created_ms < self.config.retention_time_s * 1000:
                break
            deleted.append(ledger_id)
        if not deleted:
            return deleted
        # The log end is read while the entries that show it are still listed: the
        # shorter list carries it (offsets.floor), so the next offset never goes
        # back, even when the whole log is deleted.
        self.offsets.floor = self.offsets.end_offset
        # The shorter list is durable before any file goes: a crash in between
        # leaves orphan files, which recovery removes, never a listed ledger
        # without its file.
        for ledger_id in deleted:
            del self._ledgers[ledger_id]
        self._persist_ledger_list()
        for ledger_id in deleted:
            segment = self._segments.pop(ledger_id, None)
            if segment is not None:
                segment.release()
            delete_files(self._path(ledger_id))
            self.cache.drop_ledger(ledger_id)
        if deleted:
            log.info("%s: retention deleted ledgers %s", self.name, deleted)
            for ledger_id in deleted:
                for callback in self._ledger_deleted_listeners:
                    callback(ledger_id)
            if self.replication is not None:
                # The other copies delete theirs too (they would keep them for ever).
                self.replication.trimmed(max(deleted) + 1)
        return deleted

    # ------------------------------------------------------------ stats

    @property
    def idle(self) -> bool:
        """Nothing queued or being written (nor waiting for the broker's pending-write
        budget) and no cursor waiting to be written."""
        return (
            not self._pending
            and self._pending_bytes == 0
            and (self._writer is None or self._writer.done())
            and not self._dirty_cursors
        )

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def ledger_infos(self) -> list[LedgerInfo]:
        infos = []
        for info in self._ledgers.values():
            if self._current is not None and info.ledger_id == self._current.ledger_id:
                info = LedgerInfo(
                    info.ledger_id,
                    self._current.entry_count,
                    self._current.size,
                    info.created_ms,
                    False,
                    info.damaged,
                )
            infos.append(info)
        return infos

    @property
    def current_ledger_id(self) -> int:
        """The ledger appends go to: the next one while no ledger file is open."""
        return self._current.ledger_id if self._current is not None else self._next_ledger_id

    @property
    def total_size(self) -> int:
        return sum(info.size for info in self.ledger_infos())

    @property
    def total_entries(self) -> int:
        return sum(info.entries for info in self.ledger_infos())
