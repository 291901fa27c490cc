"""The lifecycle of a producer or consumer stream: one state, and the moves the table
allows (as managed_ledger's LedgerState). The owner moves through move_to(), which
checks the table, so a producer never sends after close and never comes back from
giving up."""

from __future__ import annotations

import enum


class StreamState(enum.Enum):
    """Where a producer's or consumer's stream to its broker stands."""

    CONNECTING = "Connecting"
    """Made; its first stream is being opened. Nothing is sent or received yet."""

    READY = "Ready"
    """A stream is open, or being replaced after a transient break: sends queue and
    are sent (again) on the new stream, acks wait for it."""

    FAILED = "Failed"
    """Gave up on the broker (a lasting error, or the broker away for longer than the
    operation timeout): every call raises the reason, kept beside the state. Only a
    close leaves it."""

    CLOSED = "Closed"
    """Closed by the application. Final."""


_MOVES: dict[StreamState, frozenset[StreamState]] = {
    StreamState.CONNECTING: frozenset({StreamState.READY, StreamState.FAILED, StreamState.CLOSED}),
    StreamState.READY: frozenset({StreamState.FAILED, StreamState.CLOSED}),
    StreamState.FAILED: frozenset({StreamState.CLOSED}),
    StreamState.CLOSED: frozenset(),
}


class IllegalStateTransition(AssertionError):
    """A move the table does not allow: a bug in the client, never a broker fault."""


def check_transition(what: str, old: StreamState, new: StreamState) -> None:
    """Raise IllegalStateTransition unless `old -> new` is a legal move."""
    if new not in _MOVES[old]:
        raise IllegalStateTransition(f"{what}: cannot move from {old.value} to {new.value}")
