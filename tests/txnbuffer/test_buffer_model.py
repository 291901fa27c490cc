"""A randomised simulation of one topic: a real ManagedLedger (tiny ledgers, so rollovers are
frequent) and TransactionBuffer, driven by hypothesis with plain appends, interleaved
transactional appends, commits, aborts, transactions ended elsewhere (zombies here) that a
later marker's low watermark aborts, retried ends, retention deleting consumed ledgers,
snapshots, and restarts (clean, or crashes after the last snapshot or with none); checked
after every step against a list-of-entries model.

After each step:
- READ_COMMITTED (`CommittedReadView.bound()` over `ledger.read`, minus `should_skip`) holds
  exactly the plain and committed entries up to the bound, in log order: never a marker, an
  aborted entry, or an entry of a transaction still open here;
- the bound covers exactly the log before the first entry of the oldest open transaction
  (all of it when none is open) and never moves back, across restarts too;
- READ_UNCOMMITTED (`LogReadView`) holds every data entry, in log order.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dispatcher.read_view import CommittedReadView, LogReadView
from managed_ledger import (
    Entry,
    EntryHeader,
    EntryType,
    LocalStore,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
    TxnId,
)
from txnbuffer import SnapshotPolicy, TransactionBuffer, TransactionEndedError

TOPIC = "persistent://public/default/model"
COORDINATORS = (1, 2)
MAX_OPEN_TXNS = 4
STEP_TIMEOUT_S = 10.0
choices = st.integers(min_value=0, max_value=1_000)


@dataclass
class ModelEntry:
    position: Position
    kind: str  # "plain", "txn" or "marker"
    txn_id: TxnId | None
    payload: bytes


class TransactionBufferMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = Path(tempfile.mkdtemp(prefix="txnbuffer-model-"))
        self.store = LocalStore(self.directory / "metadata")
        self.config = ManagedLedgerConfig(fsync=False, max_entries_per_ledger=3, retention_time_s=0)
        self.ledger: ManagedLedger | None = None
        self.buffer: TransactionBuffer | None = None
        self.zombie_aborts: list[asyncio.Task] = []

        self.log: list[ModelEntry] = []
        self.next_sequence = dict.fromkeys(COORDINATORS, 1)
        self.open_at_coordinator: dict[int, set[int]] = {c: set() for c in COORDINATORS}
        self.watermark_here = dict.fromkeys(COORDINATORS, 0)  # highest carried by a marker
        self.outcome: dict[TxnId, str] = {}  # txn -> "committed" / "aborted", by marker here
        self.known_txns: list[TxnId] = []
        self.last_bound: Position | None = None
        self.payloads = 0
        self.forgotten: set[TxnId] = set()  # aborts whose marker's ledger retention deleted
        self.run(self._open())

    # ------------------------------------------------------------ plumbing

    def run(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, STEP_TIMEOUT_S))

    async def _open(self) -> None:
        self.ledger = await ManagedLedger.open(
            TOPIC, self.directory / "topic", self.store, self.config
        )
        # Snapshots only when a rule or a clean close takes one.
        self.ledger.add_ledger_deleted_listener(self._on_ledger_deleted)
        self.buffer = TransactionBuffer(self.ledger, SnapshotPolicy(10**9, 3600))
        self.buffer.set_zombie_aborter(self._abort_zombie)
        await self.buffer.recover()

    def _abort_zombie(self, txn_id: TxnId, low_watermark: int) -> None:
        self.zombie_aborts.append(
            asyncio.get_running_loop().create_task(self.buffer.end(txn_id, False, low_watermark))
        )

    async def _settle(self) -> None:
        while self.zombie_aborts:
            tasks, self.zombie_aborts = self.zombie_aborts, []
            await asyncio.gather(*tasks)

    def teardown(self) -> None:
        async def close() -> None:
            await self._settle()
            self.buffer.close()
            await self.ledger.close()

        try:
            self.run(close())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()
            self.store.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _payload(self) -> bytes:
        self.payloads += 1
        return f"e{self.payloads}".encode()

    def _new_entries(self) -> list[Entry]:
        start = self.log[-1].position.next_in_ledger() if self.log else Position(0, 0)
        return self.ledger.read(start, 1_000)

    # ------------------------------------------------------------ model queries

    def _open_here(self) -> dict[TxnId, Position]:
        """Txns with data here and no marker here yet, by first position."""
        first: dict[TxnId, Position] = {}
        for entry in self.log:
            if entry.kind == "txn" and entry.txn_id not in self.outcome:
                first.setdefault(entry.txn_id, entry.position)
        return first

    def _ended_at_coordinator(self) -> list[TxnId]:
        return [
            t
            for t in self.known_txns
            if t not in self.outcome and t.least_bits not in self.open_at_coordinator[t.most_bits]
        ]

    def _refused_here(self, txn_id: TxnId) -> bool:
        return txn_id in self.outcome or txn_id.least_bits <= self.watermark_here[txn_id.most_bits]

    def _coordinator_watermark(self, coordinator: int) -> int:
        still_open = self.open_at_coordinator[coordinator]
        if still_open:
            return min(still_open) - 1
        return self.next_sequence[coordinator] - 1

    def _expect_markers(self, expected: list[tuple[EntryType, TxnId]], any_order_after: int):
        """The entries just appended are these markers (those after index any_order_after
        are zombie aborts, whose order among themselves is the scheduler's)."""
        entries = self._new_entries()
        got = [(e.header.type, e.header.txn_id) for e in entries]
        assert got[:any_order_after] == expected[:any_order_after], (got, expected)
        assert sorted(got[any_order_after:]) == sorted(expected[any_order_after:]), (got, expected)
        for entry in entries:
            assert entry.header.is_marker
            kind = "committed" if entry.header.type is EntryType.TXN_COMMIT else "aborted"
            self.outcome[entry.header.txn_id] = kind
            self.log.append(ModelEntry(entry.position, "marker", entry.header.txn_id, b""))

    def _zombies(self, coordinator: int) -> list[TxnId]:
        watermark = self.watermark_here[coordinator]
        return [
            t for t in self._open_here() if t.most_bits == coordinator and t.least_bits <= watermark
        ]

    # ------------------------------------------------------------ rules

    @rule()
    def plain_append(self) -> None:
        payload = self._payload()
        position = self.run(self.ledger.append(EntryHeader(), payload))
        self.log.append(ModelEntry(position, "plain", None, payload))

    @precondition(
        lambda self: sum(len(s) for s in self.open_at_coordinator.values()) < MAX_OPEN_TXNS
    )
    @rule(coordinator=st.sampled_from(COORDINATORS))
    def begin(self, coordinator: int) -> None:
        sequence = self.next_sequence[coordinator]
        self.next_sequence[coordinator] += 1
        self.open_at_coordinator[coordinator].add(sequence)
        self.known_txns.append(TxnId(coordinator, sequence))

    @precondition(lambda self: self.known_txns)
    @rule(choice=choices)
    def txn_append(self, choice: int) -> None:
        """Any known txn: open ones are admitted, ended ones refused with nothing written,
        and ones ended only at the coordinator are admitted until a watermark says otherwise
        (that is how a zombie gets data here)."""
        txn_id = self.known_txns[choice % len(self.known_txns)]
        payload = self._payload()
        lac = self.ledger.last_confirmed

        async def publish() -> Position | None:
            try:
                await self.buffer.before_append(txn_id)
            except TransactionEndedError:
                return None
            try:
                return await self.ledger.append(EntryHeader(txn_id=txn_id), payload)
            finally:
                self.buffer.after_append(txn_id)

        position = self.run(publish())
        if self._refused_here(txn_id):
            assert position is None, f"append of ended {txn_id} was admitted"
            assert self.ledger.last_confirmed == lac
        else:
            assert position is not None, f"append of {txn_id} was refused"
            self.log.append(ModelEntry(position, "txn", txn_id, payload))

    @precondition(lambda self: any(self.open_at_coordinator.values()))
    @rule(choice=choices, commit=st.booleans())
    def end(self, choice: int, commit: bool) -> None:
        """The coordinator ends a txn that touched this topic: marker, with its watermark."""
        candidates = [
            TxnId(c, s) for c in COORDINATORS for s in sorted(self.open_at_coordinator[c])
        ]
        txn_id = candidates[choice % len(candidates)]
        coordinator = txn_id.most_bits
        watermark = self._coordinator_watermark(coordinator)
        assert watermark < txn_id.least_bits

        async def end_and_settle() -> None:
            await self.buffer.end(txn_id, commit, watermark)
            await self._settle()

        self.run(end_and_settle())
        self.open_at_coordinator[coordinator].discard(txn_id.least_bits)
        self.watermark_here[coordinator] = max(self.watermark_here[coordinator], watermark)
        marker = EntryType.TXN_COMMIT if commit else EntryType.TXN_ABORT
        zombies = [z for z in self._zombies(coordinator) if z != txn_id]
        self._expect_markers(
            [(marker, txn_id)] + [(EntryType.TXN_ABORT, z) for z in zombies], any_order_after=1
        )

    @precondition(lambda self: any(self.open_at_coordinator.values()))
    @rule(choice=choices)
    def end_elsewhere(self, choice: int) -> None:
        """The coordinator ends a txn on other topics only: any data it has (or gets) here
        belongs to a zombie, until a marker's watermark covers it."""
        candidates = [
            TxnId(c, s) for c in COORDINATORS for s in sorted(self.open_at_coordinator[c])
        ]
        txn_id = candidates[choice % len(candidates)]
        self.open_at_coordinator[txn_id.most_bits].discard(txn_id.least_bits)

    @precondition(lambda self: self.outcome)
    @rule(choice=choices, commit=st.booleans())
    def end_again(self, choice: int, commit: bool) -> None:
        """A retried end (right or wrong outcome) of a txn ended here writes nothing."""
        ended = sorted(self.outcome)
        txn_id = ended[choice % len(ended)]
        lac = self.ledger.last_confirmed
        outcome = self.outcome[txn_id]
        self.run(self.buffer.end(txn_id, commit, 0))
        assert self.ledger.last_confirmed == lac
        assert self.outcome[txn_id] == outcome

    @rule()
    def retention(self) -> None:
        """A subscription has consumed the log up to the first marker of a txn above its
        coordinator's watermark (forgetting that end with its ledger would let a late
        append in: rule 5), and no further than the stable position; retention deletes
        the whole ledgers behind it, and the buffer forgets the ends they held."""
        bound = self.buffer.stable_position
        consumed = None
        for entry in self.log:
            if entry.position > bound:
                break
            txn_id = entry.txn_id
            if entry.kind == "marker" and txn_id.least_bits > self.watermark_here[txn_id.most_bits]:
                break
            consumed = entry.position
        if consumed is None:
            return

        async def consume_and_trim() -> None:  # the cursor's flush timer needs the loop
            cursor, _ = self.ledger.open_cursor("retention", start_at_earliest=True)
            cursor.ack_cumulative(consumed)
            self.ledger.trim()  # the ledger trims again whenever it flushes cursors

        self.run(consume_and_trim())

    def _on_ledger_deleted(self, ledger_id: int) -> None:
        self.forgotten |= {
            e.txn_id
            for e in self.log
            if e.kind == "marker" and e.position.ledger_id == ledger_id
            and self.outcome[e.txn_id] == "aborted"
        }  # fmt: skip
        self.log = [e for e in self.log if e.position.ledger_id != ledger_id]

    @rule()
    def snapshot(self) -> None:
        self.buffer.take_snapshot()

    @rule(how=st.sampled_from(["close", "crash", "crash without snapshots"]))
    def restart(self, how: str) -> None:
        """Reopen the ledger; a new buffer recovers the same state: from the snapshot
        a clean close writes, from the last one taken plus the log after it (a crash),
        or from the whole log."""
        before = self._state()

        async def restart() -> None:
            await self._settle()
            self.buffer.close(snapshot=how == "close")  # otherwise a crash
            await self.ledger.close()
            if how == "crash without snapshots":
                self.buffer.delete_snapshots()
            await self._open()
            await self._settle()

        self.run(restart())
        assert self._new_entries() == []  # no zombie was left to abort
        assert self._state() == before

    def _state(self) -> dict:
        b = self.buffer
        return {
            "ongoing": list(b.ongoing.items()),
            "aborted": dict(b.aborted),
            "committed": dict(b.committed),
            "low_watermarks": dict(b.low_watermarks),
            "late_positions": list(b.late_positions),
            # The last entry the stable position covers: an empty topic's position
            # names its current ledger, which a restart replaces with a new one.
            "max_read_position": max(
                (e.position for e in self.log if e.position <= b.max_read_position),
                default=None,
            ),
        }

    # ------------------------------------------------------------ invariants

    @invariant()
    def read_committed_is_exactly_the_committed_prefix(self) -> None:
        view = CommittedReadView(self.buffer)
        bound = view.bound()
        if self.last_bound is not None:
            assert bound >= self.last_bound, (bound, self.last_bound)
        self.last_bound = bound

        open_here = self._open_here()
        assert dict(self.buffer.ongoing) == open_here
        horizon = min(open_here.values()) if open_here else None
        covered = [e for e in self.log if e.position <= bound]
        expected_covered = [e for e in self.log if horizon is None or e.position < horizon]
        assert covered == expected_covered, (bound, horizon)

        first = self.ledger.first_position().next_in_ledger()
        delivered = [e for e in self.ledger.read(first, 100_000, bound) if not view.should_skip(e)]
        for entry in delivered:
            assert not entry.header.is_marker
            txn_id = entry.header.txn_id
            assert txn_id is None or self.outcome.get(txn_id) == "committed", txn_id
        expected = [
            e.payload
            for e in covered
            if e.kind == "plain" or (e.kind == "txn" and self.outcome.get(e.txn_id) == "committed")
        ]
        assert [e.payload for e in delivered] == expected

    @invariant()
    def read_uncommitted_is_every_data_entry(self) -> None:
        view = LogReadView(self.ledger)
        assert view.bound() == self.ledger.last_confirmed
        first = self.ledger.first_position().next_in_ledger()
        delivered = [
            e.payload
            for e in self.ledger.read(first, 100_000, view.bound())
            if not view.should_skip(e)
        ]
        assert delivered == [e.payload for e in self.log if e.kind != "marker"]

    @invariant()
    def aborted_txns_are_exactly_those_aborted_here(self) -> None:
        aborted_here = {t for t, outcome in self.outcome.items() if outcome == "aborted"}
        assert set(self.buffer.aborted) == aborted_here - self.forgotten


TransactionBufferMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    database=None,
)
test_transaction_buffer_against_a_list_model = TransactionBufferMachine.TestCase
