"""The coordinator's transaction state table: every legal move is accepted, every
other raises, and the coordinator's moves go through it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time

import pytest

from managed_ledger import TxnId
from txnbuffer import IllegalTxnTransition, TransactionEndedError, TxnMetadata, TxnState
from txnbuffer.coordinator import TransactionCoordinator
from txnbuffer.txn_state import check_txn_transition

# Written out again on purpose: the table must say exactly this.
LEGAL = {
    (TxnState.OPEN, TxnState.COMMITTING),
    (TxnState.OPEN, TxnState.ABORTING),
    (TxnState.OPEN, TxnState.TIMEOUT),
    (TxnState.COMMITTING, TxnState.COMMITTED),
    (TxnState.ABORTING, TxnState.ABORTED),
    (TxnState.TIMEOUT, TxnState.ABORTED),
}
ALL_MOVES = list(itertools.product(TxnState, TxnState))


def _ids(move: tuple[TxnState, TxnState]) -> str:
    return f"{move[0].value}->{move[1].value}"


@pytest.mark.parametrize("move", sorted(LEGAL, key=_ids), ids=_ids)
def test_every_legal_move_is_accepted(move):
    old, new = move
    assert old.can_transition_to(new)
    check_txn_transition("t", old, new)


@pytest.mark.parametrize("move", [m for m in ALL_MOVES if m not in LEGAL], ids=_ids)
def test_every_other_move_is_refused(move):
    old, new = move
    assert not old.can_transition_to(new)
    with pytest.raises(IllegalTxnTransition, match=f"from {old.value} to {new.value}"):
        check_txn_transition("t", old, new)


def test_a_decided_transaction_never_changes_its_mind():
    for decided in (TxnState.COMMITTING, TxnState.ABORTING, TxnState.TIMEOUT):
        successors = [new for new in TxnState if decided.can_transition_to(new)]
        assert len(successors) == 1
        assert successors[0].terminal
        assert successors[0].commits is decided.commits


def test_ended_transactions_are_final():
    for state in TxnState:
        has_a_way_out = any(state.can_transition_to(new) for new in TxnState)
        assert has_a_way_out is not state.terminal, state


def test_the_coordinator_moves_only_through_the_table():
    meta = TxnMetadata(TxnId(1, 7), TxnState.COMMITTED, timeout_ms=1000, opened_ms=0)
    with pytest.raises(IllegalTxnTransition, match="from COMMITTED to ABORTED"):
        TransactionCoordinator._transition(meta, TxnState.ABORTED)
    assert meta.state is TxnState.COMMITTED  # unchanged by a refused move
    meta.state = TxnState.OPEN
    TransactionCoordinator._transition(meta, TxnState.TIMEOUT)
    assert meta.state is TxnState.TIMEOUT


# ------------------------------------------------------------ a random walk


class _FlakyParticipant:
    """Ends transactions on topics after a random pause, failing some attempts."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    async def end_on_topic(self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int):
        await asyncio.sleep(self.rng.uniform(0, 0.01))
        if self.rng.random() < 0.2:
            raise RuntimeError(f"{topic} is unavailable")

    async def end_acks(self, ack, txn_id: TxnId, commit: bool) -> None:
        await asyncio.sleep(0)


async def _end(coordinator: TransactionCoordinator, txn_id: TxnId, commit: bool) -> None:
    with contextlib.suppress(TransactionEndedError):
        await coordinator.end(txn_id, commit)


@pytest.mark.parametrize("seed", range(3))
async def test_random_ends_timeouts_failures_and_a_restart_move_only_legally(
    store, monkeypatch, seed
):
    moves: dict[TxnId, list[TxnState]] = {}
    transition = TransactionCoordinator._transition

    def recorded(meta: TxnMetadata, new: TxnState) -> None:
        moves.setdefault(meta.txn_id, [meta.state]).append(new)
        transition(meta, new)

    monkeypatch.setattr(TransactionCoordinator, "_transition", staticmethod(recorded))
    rng = random.Random(seed)
    participant = _FlakyParticipant(rng)
    coordinator = TransactionCoordinator(3, store, participant)
    await coordinator.recover()
    ids, ends = [], []
    for _ in range(40):
        if not ids or rng.random() < 0.4:
            txn_id = coordinator.new_transaction(rng.choice((20, 50, 60_000)))
            coordinator.add_topic(txn_id, f"t{rng.randrange(3)}")
            ids.append(txn_id)
        else:
            commit = rng.random() < 0.5
            ends.append(asyncio.create_task(_end(coordinator, rng.choice(ids), commit)))
        await asyncio.sleep(rng.uniform(0, 0.01))
    await asyncio.sleep(0.02)
    # A crash: decided transactions are driven to their end again by the next run.
    await coordinator.close()
    await asyncio.gather(*ends, return_exceptions=True)
    again = TransactionCoordinator(3, store, participant)
    await again.recover()
    for txn_id in ids:
        if again.get(txn_id).state is TxnState.OPEN:
            await _end(again, txn_id, commit=False)
    deadline = time.monotonic() + 10
    while not all(again.get(txn_id).state.terminal for txn_id in ids):
        assert time.monotonic() < deadline, "transactions never ended"
        await asyncio.sleep(0.01)
    await again.close()
    # Each transaction's moves, over both runs: from OPEN to its end by the table.
    assert set(moves) == set(ids)
    for path in moves.values():
        assert path[0] is TxnState.OPEN and path[-1].terminal, path
        assert all(old.can_transition_to(new) for old, new in itertools.pairwise(path)), path
