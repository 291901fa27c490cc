"""The states of a managed ledger and the moves between them.

Owns the one table of legal moves; `ManagedLedger._transition` is the only place
a ledger's state changes, and a move the table does not list raises.
"""

from __future__ import annotations

import enum


class LedgerState(enum.Enum):
    """What a managed ledger does with the next append (Pulsar's ManagedLedgerImpl
    states, less the ones a single-process ledger has no use for)."""

    LEDGER_OPENED = "LedgerOpened"
    """The current ledger takes appends: the writer batches them into it."""

    WRITE_FAILED = "WriteFailed"
    """The disk refused the last batch, or the rollover before it, without putting
    the current ledger in doubt (ENOSPC, EDQUOT): its appends failed and none of
    their bytes were kept. The next batch tries again (rolling over first if the
    ledger is full); the first batch that lands makes the ledger LEDGER_OPENED."""

    FENCED = "Fenced"
    """The disk failed a write or an fsync of the current ledger: that file is
    written no more (its pages cannot be trusted), and the next batch first rolls
    over to a new ledger. Earlier entries stay readable."""

    CLOSING_LEDGER = "ClosingLedger"
    """Rolling over: the current ledger is being sealed and the next one created.
    Appends queue meanwhile; a rollover that fails leaves the ledger FENCED (the old
    file was fenced) or WRITE_FAILED (it was only full) with its queue failed."""

    CLOSING = "Closing"
    """close() has begun: appends are refused, the ones queued before still finish
    (rolling over if they must), cursors are flushed, the current ledger sealed.
    What the writer meets meanwhile leaves the state as it is."""

    CLOSED = "Closed"
    """Closed for good: appends and retention refused. Final."""

    @property
    def is_open(self) -> bool:
        """Not closing nor closed: takes appends, runs retention, flushes cursors."""
        return self is not LedgerState.CLOSING and self is not LedgerState.CLOSED


_MOVES: dict[LedgerState, frozenset[LedgerState]] = {
    LedgerState.LEDGER_OPENED: frozenset(
        {
            LedgerState.WRITE_FAILED,
            LedgerState.FENCED,
            LedgerState.CLOSING_LEDGER,
            LedgerState.CLOSING,
        }
    ),
    LedgerState.WRITE_FAILED: frozenset(
        {
            LedgerState.LEDGER_OPENED,
            LedgerState.FENCED,
            LedgerState.CLOSING_LEDGER,
            LedgerState.CLOSING,
        }
    ),
    # A fenced ledger is never written again: only a rollover or a close leave it.
    LedgerState.FENCED: frozenset({LedgerState.CLOSING_LEDGER, LedgerState.CLOSING}),
    LedgerState.CLOSING_LEDGER: frozenset(
        {
            LedgerState.LEDGER_OPENED,
            LedgerState.WRITE_FAILED,
            LedgerState.FENCED,
            LedgerState.CLOSING,
        }
    ),
    LedgerState.CLOSING: frozenset({LedgerState.CLOSED}),
    LedgerState.CLOSED: frozenset(),
}


class IllegalStateTransition(AssertionError):
    """A move the table does not allow: a bug in the ledger, never a disk fault."""


def check_transition(name: str, old: LedgerState, new: LedgerState) -> None:
    """Raise IllegalStateTransition unless `old -> new` is a legal move."""
    if new not in _MOVES[old]:
        raise IllegalStateTransition(
            f"{name}: managed ledger cannot move from {old.value} to {new.value}"
        )
