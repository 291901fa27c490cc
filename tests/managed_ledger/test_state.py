"""The managed ledger's state table: which moves are legal, and that others raise."""

from __future__ import annotations

import pytest

from managed_ledger import LedgerState
from managed_ledger.state import IllegalStateTransition, check_transition

OPEN = [state for state in LedgerState if state.is_open]


def test_only_closing_and_closed_refuse_appends():
    assert set(OPEN) == set(LedgerState) - {LedgerState.CLOSING, LedgerState.CLOSED}


@pytest.mark.parametrize("state", OPEN, ids=lambda state: state.value)
def test_every_open_state_can_begin_a_close(state):
    check_transition("t", state, LedgerState.CLOSING)


@pytest.mark.parametrize("state", list(LedgerState), ids=lambda state: state.value)
def test_closed_is_reached_only_from_closing(state):
    if state is LedgerState.CLOSING:
        check_transition("t", state, LedgerState.CLOSED)
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition("t", state, LedgerState.CLOSED)


@pytest.mark.parametrize("new", list(LedgerState), ids=lambda state: state.value)
def test_closed_is_final(new):
    with pytest.raises(IllegalStateTransition, match="cannot move from Closed"):
        check_transition("t", LedgerState.CLOSED, new)


@pytest.mark.parametrize(
    "new", [LedgerState.LEDGER_OPENED, LedgerState.WRITE_FAILED, LedgerState.FENCED]
)
def test_a_fenced_ledger_is_left_only_by_a_rollover_or_a_close(new):
    with pytest.raises(IllegalStateTransition):
        check_transition("t", LedgerState.FENCED, new)
    check_transition("t", LedgerState.FENCED, LedgerState.CLOSING_LEDGER)


def test_a_closing_ledger_only_finishes_closing():
    for new in LedgerState:
        if new is LedgerState.CLOSED:
            continue
        with pytest.raises(IllegalStateTransition):
            check_transition("t", LedgerState.CLOSING, new)


def test_every_state_but_closed_has_a_way_out():
    for state in LedgerState:
        reachable = [new for new in LedgerState if _legal(state, new)]
        assert bool(reachable) is (state is not LedgerState.CLOSED), state


def _legal(old: LedgerState, new: LedgerState) -> bool:
    try:
        check_transition("t", old, new)
    except IllegalStateTransition:
        return False
    return True
