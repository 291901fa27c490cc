"""A topic's transaction buffer: ongoing and aborted transactions, and the stable position.

It sees every durable entry of its topic once, in log order, through the ledger's
entry listener (the same code path at run time and in recovery replay), so the
stable position (maxReadPosition) is always consistent with the log:
- a plain entry moves it only when nothing is ongoing (rule 1);
- a transactional entry records its transaction's first position (rule 2);
- a marker ends its transaction, records an abort, and recomputes it (rule 3);
- a marker's low watermark aborts zombies and makes late appends refused (rule 4);
- aborts are forgotten when retention deletes the ledger of their marker (rule 5).
Memory is O(open transactions + retained aborts), never O(messages).

Snapshots (rule 6) record the whole state after the last applied entry, every
`every_changes` changes (or as many as there are open transactions, when more)
or `interval_s` seconds and on close; recovery loads the
last one and replays only the log after it. A damaged or unusable snapshot
falls back to a full replay with a warning.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sortedcontainers import SortedSet

from managed_ledger import Entry, EntryHeader, EntryType, ManagedLedger, Position, TxnId
from txnbuffer.abort_index import AbortedTxn, AbortIndex
from txnbuffer.errors import TransactionBufferNotReadyError, TransactionEndedError
from txnbuffer.failpoint import BUFFER_RECOVERY, Failpoint, reach
from txnbuffer.producer_state import ProducerSequences, tracked
from txnbuffer.snapshot import (
    Snapshot,
    SnapshotCorruptError,
    SnapshotStore,
    decode_abort,
    txn_id_of,
)

log = logging.getLogger(__name__)

# Entries read per batch while replaying the log on recovery.
REPLAY_BATCH_ENTRIES = 2000


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to snapshot: after this many changes (transactions begun or ended
    here), or this long after the first change since the last snapshot.

    A snapshot holds every open transaction, so with more open than every_changes
    it waits for as many changes as there are open: each change then pays for at
    most one open transaction's record, however many are open (otherwise the cost
    per commit grows with the open count: see scripts/bench/bench_open_txns.py). The
    interval still bounds the log a recovery replays."""

    every_changes: int = 1000
    interval_s: float = 5.0

    def __post_init__(self) -> None:
        assert self.every_changes >= 1 and self.interval_s > 0, self


class BufferState(enum.Enum):
    INITIALIZING = "Initializing"
    READY = "Ready"
    CLOSED = "Closed"


def _before(position: Position) -> Position:
    return Position(position.ledger_id, position.entry_id - 1)


class TransactionBuffer:
    def __init__(self, ledger: ManagedLedger, snapshot_policy: SnapshotPolicy | None = None):
        self.ledger = ledger
        self.state = BufferState.INITIALIZING
        # Insertion order is first-position order: the head pins the stable position.
        self.ongoing: dict[TxnId, Position] = {}
        # Aborted here -> the ledger of its marker (retention forgets it with that
        # ledger); the aborts themselves are in the abort index.
        self.aborted: dict[TxnId, int] = {}
        # Committed here and above their coordinator's low watermark (so still
        # needed to refuse late appends) -> their marker; trimmed as watermarks rise
        # and with the ledger of their marker.
        self.committed: dict[TxnId, Position] = {}
        # The ids of ongoing and committed in order, so a rising low watermark finds
        # what it passed without a scan of every open transaction.
        self._ongoing_ids: SortedSet = SortedSet()
        self._committed_ids: SortedSet = SortedSet()
        self.low_watermarks: dict[int, int] = {}
        self.producers = ProducerSequences()
        self.abort_index = AbortIndex()
        # Entries of an already-ended transaction that reached the log anyway:
        # never visible to READ_COMMITTED.
        self.late_positions: SortedSet = SortedSet()
        self.max_read_position = ledger.first_position()
        self._ready = asyncio.Event()
        self._in_flight: dict[TxnId, int] = {}
        self._drained = asyncio.Event()
        self._ending: dict[TxnId, asyncio.Future] = {}
        self._zombie_aborter: Callable[[TxnId, int], None] | None = None
        self.replayed_entries = 0
        self.recovery_time_ms = 0.0
        self.recovery_started = time.monotonic()
        # Snapshots: the last entry applied, and what changed since the last snapshot.
        self.applied_position = ledger.first_position()
        self.snapshots = SnapshotStore(ledger.store, ledger.name)
        self.snapshot_policy = snapshot_policy or SnapshotPolicy()
        self.recovered_from_snapshot = False
        self._snapshot_loaded = False
        self.last_snapshot_ms = 0
        self.last_snapshot_bytes = 0
        self.last_snapshot_write_ms = 0.0
        self.snapshots_taken = 0
        self._changes = 0
        self._new_aborts: list[AbortedTxn] = []
        self._dropped_ledgers: list[int] = []
        self._snapshot_timer: asyncio.TimerHandle | None = None
        self.failpoint: Failpoint | None = None
        ledger.add_entry_listener(self._on_entries)
        ledger.add_ledger_deleted_listener(self._on_ledger_deleted)
        # An ongoing transaction's entries must outlive retention: READ_COMMITTED
        # readers have not seen them yet, whatever READ_UNCOMMITTED cursors acked.
        ledger.set_trim_floor(lambda: self.max_read_position)

    # ------------------------------------------------------------ recovery

    def load_snapshot(self) -> None:
        """Take the last usable snapshot's state, at once (no log is read): from here
        READ_COMMITTED reads up to the stable position it recorded, so a topic
        loaded on first use never shows an earlier one. recover() does it if no one
        did; a second call does nothing."""
        if self._snapshot_loaded:
            return
        self._snapshot_loaded = True
        snapshot = self._usable_snapshot()
        if snapshot is not None:
            self._load(snapshot)

    async def recover(self) -> None:
        """Load the last snapshot and replay the log after it (all of it when there is
        no usable snapshot) to rebuild ongoing, aborted and the stable position; READY."""
        started = time.monotonic()
        log.debug("%s: transaction buffer recovery started", self.ledger.name)
        self.load_snapshot()
        await reach(self.failpoint, BUFFER_RECOVERY, self.ledger.name)
        position = self.applied_position.next_in_ledger()
        # Read until caught up with the LAC, appends made meanwhile included (the
        # listener leaves them to us); no await between the last read and READY.
        while True:
            entries = self.ledger.read(position, REPLAY_BATCH_ENTRIES)
            if not entries:
                break
            for entry in entries:
                self._apply(entry)
            self.replayed_entries += len(entries)
            position = entries[-1].position.next_in_ledger()
            await asyncio.sleep(0)  # let other topics and clients in between batches
        self.recovery_time_ms = (time.monotonic() - started) * 1000
        self.state = BufferState.READY
        self._ready.set()
        if self._changes:
            self._arm_snapshot_timer()
        log.log(
            logging.INFO if self.replayed_entries or self.ongoing else logging.DEBUG,
            "%s: transaction buffer ready after replaying %d entries (%s) in %.1f ms "
            "(%d ongoing, %d aborted, maxReadPosition %s)",
            self.ledger.name,
            self.replayed_entries,
            "after a snapshot" if self.recovered_from_snapshot else "the whole log",
            self.recovery_time_ms,
            len(self.ongoing),
            len(self.aborted),
            self.max_read_position,
        )
        for txn_id in list(self.ongoing):
            self._abort_if_zombie(txn_id)

    def set_zombie_aborter(self, aborter: Callable[[TxnId, int], None]) -> None:
        """Who writes the abort marker of a zombie (txn, low watermark): the broker."""
        self._zombie_aborter = aborter

    def _usable_snapshot(self) -> Snapshot | None:
        try:
            snapshot = self.snapshots.read()
        except SnapshotCorruptError as error:
            log.warning("%s: %s; replaying the whole log instead", self.ledger.name, error)
            return None
        # A snapshot is only ever taken of confirmed entries, so the log (a recovered
        # copy included) holds its position; one past what it holds would describe
        # entries this log does not have.
        if snapshot is not None and not self.ledger.holds_through(snapshot.position):
            log.warning(
                "%s: snapshot at %s is past what the log holds (%s); replaying the whole log",
                self.ledger.name,
                snapshot.position,
                self.ledger.last_confirmed,
            )
            return None
        return snapshot

    def _load(self, snapshot: Snapshot) -> None:
        """Take the state a snapshot recorded, less what retention deleted since."""
        retained = set(self.ledger.ledger_ids())
        self.applied_position = snapshot.position
        # Retention deletes only ledgers below the stable position (its trim floor),
        # so what it deleted since the snapshot was stable: a snapshot older than
        # the deletion must not take the stable position back behind it.
        self.max_read_position = max(snapshot.max_read_position, self.ledger.first_position())
        self.ongoing = dict(snapshot.ongoing)
        self.low_watermarks = dict(snapshot.low_watermarks)
        self.committed = {t: m for t, m in snapshot.committed if m.ledger_id in retained}
        self._ongoing_ids = SortedSet(self.ongoing)
        self._committed_ids = SortedSet(self.committed)
        self.producers.load(
            {
                n: (seq, ledger)
                for n, (seq, ledger) in snapshot.producers.items()
                if ledger in retained
            }
        )
        self.late_positions = SortedSet(
            p for p in snapshot.late_positions if p.ledger_id in retained
        )
        for ledger_id, records in snapshot.aborted_records.items():
            if ledger_id not in retained:
                self._dropped_ledgers.append(ledger_id)
                continue
            self.abort_index.add_stored(ledger_id, records, decode_abort)
            for record in records:
                self.aborted[txn_id_of(record)] = ledger_id
        self.recovered_from_snapshot = True

    def take_snapshot(self) -> int:
        """Write the state after the last applied entry; returns the bytes written."""
        assert self.state is BufferState.READY, self.state
        assert len(self._ongoing_ids) == len(self.ongoing), "ongoing index out of step"
        assert len(self._committed_ids) == len(self.committed), "committed index out of step"
        started = time.monotonic()
        snapshot = Snapshot(
            position=self.applied_position,
            max_read_position=self.max_read_position,
            ongoing=list(self.ongoing.items()),
            low_watermarks=dict(self.low_watermarks),
            committed=list(self.committed.items()),
            late_positions=list(self.late_positions),
            producers=dict(self.producers.persisted),
            taken_at_ms=int(time.time() * 1000),
        )
        written = self.snapshots.write(
            snapshot,
            self._new_aborts,
            self._dropped_ledgers,
            # Of a replicated log only: a single copy pays nothing for it.
            self.ledger.replicate_snapshot if self.ledger.replication is not None else None,
        )
        self._new_aborts, self._dropped_ledgers, self._changes = [], [], 0
        self.last_snapshot_ms = snapshot.taken_at_ms
        self.last_snapshot_bytes = written
        self.last_snapshot_write_ms = (time.monotonic() - started) * 1000
        self.snapshots_taken += 1
        log.debug(
            "%s: snapshot at %s, %d bytes in %.2f ms",
            self.ledger.name,
            snapshot.position,
            written,
            self.last_snapshot_write_ms,
        )
        return written

    def _changed(self) -> None:
        self._changes += 1
        if self.state is not BufferState.READY:
            return
        if self._changes >= max(self.snapshot_policy.every_changes, len(self.ongoing)):
            self.take_snapshot()
            self._cancel_snapshot_timer()
        elif self._snapshot_timer is None:
            self._arm_snapshot_timer()

    def _arm_snapshot_timer(self) -> None:
        self._snapshot_timer = asyncio.get_running_loop().call_later(
            self.snapshot_policy.interval_s, self._on_snapshot_timer
        )

    def _cancel_snapshot_timer(self) -> None:
        if self._snapshot_timer is not None:
            self._snapshot_timer.cancel()
            self._snapshot_timer = None

    def _on_snapshot_timer(self) -> None:
        self._snapshot_timer = None
        if self.state is BufferState.READY and self._changes:
            self.take_snapshot()

    def delete_snapshots(self) -> None:
        """Forget this topic's snapshots (the topic is being deleted)."""
        self.snapshots.delete()

    def close(self, snapshot: bool = True) -> None:
        """Stop applying entries; a READY buffer snapshots what changed first unless
        told not to (its topic is being deleted)."""
        self._cancel_snapshot_timer()
        if (
            snapshot
            and self.state is BufferState.READY
            and (self._changes or not self.snapshots_taken)
        ):
            self.take_snapshot()
        self.state = BufferState.CLOSED
        self.ledger.remove_entry_listener(self._on_entries)

    # ------------------------------------------------------------ the rules

    def _on_entries(self, entries: list[Entry]) -> None:
        if self.state is BufferState.INITIALIZING:
            return  # recover() replays them, in log order, after what precedes them
        for entry in entries:
            self._apply(entry)

    def _advance(self, position: Position) -> None:
        assert position >= self.max_read_position, (position, self.max_read_position)
        self.max_read_position = position

    def _apply(self, entry: Entry) -> None:
        header = entry.header
        position = entry.position
        assert position > self.applied_position, (position, self.applied_position)
        self.applied_position = position
        txn_id = header.txn_id
        if header.type is EntryType.DATA:
            if tracked(header.producer_name):
                self.producers.persist(header.producer_name, header.sequence_id, position.ledger_id)
            if txn_id is None:
                if not self.ongoing:
                    self._advance(position)
            elif txn_id in self.ongoing:
                pass
            elif self.is_ended(txn_id):
                log.warning(
                    "%s: entry %s of ended transaction %s is never visible",
                    self.ledger.name,
                    position,
                    txn_id,
                )
                self.late_positions.add(position)
                if not self.ongoing:
                    self._advance(position)
            else:
                self.ongoing[txn_id] = position
                self._ongoing_ids.add(txn_id)
                self._changed()
            return
        assert txn_id is not None, f"marker at {position} without a transaction"
        first = self.ongoing.pop(txn_id, None)
        self._ongoing_ids.discard(txn_id)
        if self.ongoing:
            self._advance(max(self.max_read_position, _before(next(iter(self.ongoing.values())))))
        else:
            self._advance(position)
        if header.type is EntryType.TXN_ABORT:
            aborted = AbortedTxn(txn_id, first or position, position, self.max_read_position)
            self.aborted[txn_id] = position.ledger_id
            self.abort_index.add(aborted)
            self._new_aborts.append(aborted)
        else:
            self.committed[txn_id] = position
            self._committed_ids.add(txn_id)
        self._raise_watermark(txn_id.most_bits, header.low_watermark)
        self._changed()

    def _raise_watermark(self, coordinator: int, low_watermark: int) -> None:
        if low_watermark <= self.low_watermarks.get(coordinator, 0):
            return
        self.low_watermarks[coordinator] = low_watermark
        passed = (TxnId(coordinator, 0), TxnId(coordinator, low_watermark))
        for txn_id in list(self._committed_ids.irange(*passed)):
            del self.committed[txn_id]
            self._committed_ids.discard(txn_id)
        for txn_id in list(self._ongoing_ids.irange(*passed)):
            self._abort_if_zombie(txn_id)

    def _abort_if_zombie(self, txn_id: TxnId) -> None:
        """An ongoing transaction at or below its coordinator's watermark has ended elsewhere."""
        watermark = self.low_watermarks.get(txn_id.most_bits, 0)
        if (
            txn_id.least_bits <= watermark
            and self._zombie_aborter is not None
            and txn_id not in self._ending
        ):
            log.warning(
                "%s: aborting zombie transaction %s (low watermark %d)",
                self.ledger.name,
                txn_id,
                watermark,
            )
            self._zombie_aborter(txn_id, watermark)

    def _on_ledger_deleted(self, ledger_id: int) -> None:
        # Ends are remembered while the ledger of their marker lives, commits as aborts:
        # a replay of the retained log after a restart knows exactly the same.
        for aborted in self.abort_index.drop_ledger(ledger_id):
            self.aborted.pop(aborted.txn_id, None)
        for txn_id in [t for t, marker in self.committed.items() if marker.ledger_id == ledger_id]:
            del self.committed[txn_id]
            self._committed_ids.discard(txn_id)
        self.producers.forget_ledger(ledger_id)
        self._new_aborts = [a for a in self._new_aborts if a.marker_position.ledger_id != ledger_id]
        self._dropped_ledgers.append(ledger_id)
        while self.late_positions and self.late_positions[0].ledger_id <= ledger_id:
            self.late_positions.pop(0)

    # ------------------------------------------------------------ queries

    def is_ended(self, txn_id: TxnId) -> bool:
        return (
            txn_id in self.aborted
            or txn_id in self.committed
            or txn_id.least_bits <= self.low_watermarks.get(txn_id.most_bits, 0)
        )

    def aborted_txn(self, txn_id: TxnId) -> AbortedTxn | None:
        """The abort of txn_id recorded here (positions included), or None."""
        ledger_id = self.aborted.get(txn_id)
        if ledger_id is None:
            return None
        return next(a for a in self.abort_index.in_ledger(ledger_id) if a.txn_id == txn_id)

    def is_aborted_entry(self, entry: Entry) -> bool:
        txn_id = entry.header.txn_id
        if txn_id is None:
            return False
        return txn_id in self.aborted or (
            bool(self.late_positions) and entry.position in self.late_positions
        )

    def aborted_overlapping(self, start: Position, end: Position) -> list[AbortedTxn]:
        return self.abort_index.overlapping(start, end, self.ledger.ledger_ids())

    @property
    def stable_position(self) -> Position:
        """What READ_COMMITTED may read now: nothing new until READY."""
        return min(self.max_read_position, self.ledger.last_confirmed)

    def stable_lag(self) -> tuple[int, int]:
        """What READ_COMMITTED cannot read yet: the entries after the stable position,
        and how many ms ago the first of them was published; (0, 0) when none."""
        stable = self.stable_position
        entries = self.ledger.count_entries(stable, self.ledger.last_confirmed)
        first = self.ledger.first_position_after(stable) if entries else None
        if first is None:
            return 0, 0
        read = self.ledger.read(first, 1, first)
        if not read:
            return entries, 0  # trimmed meanwhile: nothing to date it by
        return entries, max(int(time.time() * 1000) - read[0].header.publish_time_ms, 0)

    # ------------------------------------------------------------ appends and ends

    @property
    def idle(self) -> bool:
        """READY with no transaction open, appending or ending here: closing the
        buffer now (with its snapshot) loses nothing a reload would not rebuild."""
        return (
            self.state is BufferState.READY
            and not self.ongoing
            and not self._in_flight
            and not self._ending
        )

    async def wait_ready(self) -> None:
        """Until recovery has rebuilt the state (producers' sequences included)."""
        await self._ready.wait()

    async def before_append(self, txn_id: TxnId) -> None:
        """Admit a transactional append, or refuse it when its transaction has ended here."""
        if self.state is BufferState.CLOSED:
            raise TransactionBufferNotReadyError(
                f"{self.ledger.name}: transaction buffer is closed"
            )
        await self._ready.wait()
        if self.is_ended(txn_id) or txn_id in self._ending:
            raise TransactionEndedError(
                f"transaction {txn_id} has ended; it cannot write to {self.ledger.name}"
            )
        self._in_flight[txn_id] = self._in_flight.get(txn_id, 0) + 1

    def after_append(self, txn_id: TxnId) -> None:
        remaining = self._in_flight[txn_id] - 1
        if remaining:
            self._in_flight[txn_id] = remaining
        else:
            del self._in_flight[txn_id]
            self._drained.set()

    async def end(self, txn_id: TxnId, commit: bool, low_watermark: int) -> None:
        """Write the marker (after the transaction's in-flight appends); a no-op if ended."""
        await self._ready.wait()
        # A zombie is still ongoing here although is_ended() (its sequence is at or
        # below the watermark): it needs its abort marker.
        if txn_id not in self.ongoing and self.is_ended(txn_id):
            return
        pending = self._ending.get(txn_id)
        if pending is not None:
            await asyncio.shield(pending)
            return
        future = asyncio.get_running_loop().create_future()
        self._ending[txn_id] = future
        try:
            while self._in_flight.get(txn_id):
                self._drained.clear()
                await self._drained.wait()
            marker = EntryHeader(
                type=EntryType.TXN_COMMIT if commit else EntryType.TXN_ABORT,
                num_messages=0,
                publish_time_ms=int(time.time() * 1000),
                txn_id=txn_id,
                low_watermark=low_watermark,
            )
            await self.ledger.append(marker, b"")
            assert self.is_ended(txn_id), f"marker of {txn_id} appended but not applied"
            future.set_result(None)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as error:
            future.set_exception(error)
            future.exception()  # retrieved: concurrent callers re-raise it themselves
            raise
        finally:
            del self._ending[txn_id]

    # ------------------------------------------------------------ stats

    def stats(self) -> dict:
        lag_entries, lag_ms = self.stable_lag()
        return {
            "state": self.state.value,
            "maxReadPosition": str(self.max_read_position),
            "lastConfirmedEntry": str(self.ledger.last_confirmed),
            "stableLagEntries": lag_entries,
            "stableLagMs": lag_ms,
            "ongoingTxnSize": len(self.ongoing),
            "abortedTxnSize": len(self.aborted),
            "lowWaterMarks": {str(k): v for k, v in sorted(self.low_watermarks.items())},
            "oldestOngoingTxn": self._oldest_ongoing(),
            "recoveryTimeMs": round(self.recovery_time_ms, 3),
            "replayedEntries": self.replayed_entries,
            "recoveredFromSnapshot": self.recovered_from_snapshot,
            "lastSnapshotTimestamps": self.last_snapshot_ms,
            "lastSnapshotBytes": self.last_snapshot_bytes,
            "lastSnapshotWriteMs": round(self.last_snapshot_write_ms, 3),
            "snapshotsTaken": self.snapshots_taken,
            "abortIndexLookups": self.abort_index.index_lookups,
            "emptyAbortIndexesSkipped": self.abort_index.empty_ledgers_skipped,
        }

    def _oldest_ongoing(self) -> dict | None:
        for txn_id, first in self.ongoing.items():
            return {"txnId": str(txn_id), "firstPosition": str(first)}
        return None
