"""The states of a transaction at its coordinator and the moves between them.

Owns the one table of legal moves (Pulsar's TxnStatus.canTransitionTo):

    OPEN -> COMMITTING -> COMMITTED
    OPEN -> ABORTING   -> ABORTED
    OPEN -> TIMEOUT    -> ABORTED

`TransactionCoordinator._transition` is the only place a transaction's state
changes, and a move the table does not list raises IllegalTxnTransition: a
decided transaction never changes its mind, and an ended one never moves again.
"""

from __future__ import annotations

import enum


class TxnState(enum.Enum):
    """Where a transaction is on its way to its end."""

    OPEN = "OPEN"
    """Takes writes and acks; ends by a commit, an abort, or its timeout."""

    COMMITTING = "COMMITTING"
    """Decided to commit (durable before any marker): its commit markers and acks
    are being written on every topic it touched, retried until they are."""

    COMMITTED = "COMMITTED"
    """Every topic and subscription has its commit. Final."""

    ABORTING = "ABORTING"
    """Decided to abort, at its client's request: its abort markers are being
    written, retried until they are."""

    TIMEOUT = "TIMEOUT"
    """Decided to abort because its timeout passed while it was open; ends as
    ABORTED, counted among the timed out."""

    ABORTED = "ABORTED"
    """Every topic and subscription has its abort. Final."""

    @property
    def decided(self) -> bool:
        return self is not TxnState.OPEN

    @property
    def terminal(self) -> bool:
        return self in (TxnState.COMMITTED, TxnState.ABORTED)

    @property
    def commits(self) -> bool:
        return self in (TxnState.COMMITTING, TxnState.COMMITTED)

    def can_transition_to(self, new: TxnState) -> bool:
        """Whether `self -> new` is a legal move."""
        return new in _MOVES[self]


_MOVES: dict[TxnState, frozenset[TxnState]] = {
    TxnState.OPEN: frozenset({TxnState.COMMITTING, TxnState.ABORTING, TxnState.TIMEOUT}),
    TxnState.COMMITTING: frozenset({TxnState.COMMITTED}),
    TxnState.ABORTING: frozenset({TxnState.ABORTED}),
    TxnState.TIMEOUT: frozenset({TxnState.ABORTED}),
    TxnState.COMMITTED: frozenset(),
    TxnState.ABORTED: frozenset(),
}


class IllegalTxnTransition(AssertionError):
    """A move the table does not allow: a bug in the coordinator, never a client's
    mistake (a client ending an ended transaction gets TransactionEndedError)."""


def check_txn_transition(txn: object, old: TxnState, new: TxnState) -> None:
    """Raise IllegalTxnTransition unless `old -> new` is a legal move of `txn`."""
    if not old.can_transition_to(new):
        raise IllegalTxnTransition(f"transaction {txn} cannot move from {old.value} to {new.value}")
