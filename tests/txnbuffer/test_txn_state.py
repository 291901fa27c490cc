"""The coordinator's transaction state table: every legal move is accepted, every
other raises, and the coordinator's moves go through it."""

from __future__ import annotations

import itertools

import pytest

from managed_ledger import TxnId
from txnbuffer import IllegalTxnTransition, TxnMetadata, TxnState
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
