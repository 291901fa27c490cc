"""How a ledger's writes reach its other copies: the writer's half of replication.

A ManagedLedger given a `Replication` is the writer of a replicated log (BookKeeper's
client, in Pulsar's terms). It writes each batch to its own files and, at the same
time, hands the batch's frames (the exact bytes of its files) to the replication,
which sends them to the other members of the ensemble. The batch is confirmed (its
appends answered, the LAC moved over it, its entries shown to readers and listeners)
only once both are done: the writer's own copy plus `ack_quorum - 1` others.

A batch the replication cannot confirm (fewer than the ack quorum reachable) fails
like a batch the disk refused: its appends get the replication's retryable error,
the writer's own bytes of it are cut, and the ledger is closed below it: the next
append rolls over to a new ledger, whose opening records where the old one ends. An
entry id is never given twice, so copies never disagree on what an id holds: a
replica that kept part of the failed batch holds entries past the recorded end, which
no broker ever serves.

An ack quorum that includes the writer's own copy means that every confirmed entry
is on the writer's disk: a writer that restarts on its own disk lost nothing that
was confirmed. Any broker that starts serving a replicated topic still recovers it
first (fences the ensemble and closes the last ledger at what the replicas hold),
because its disk may be empty, or behind.

The engine knows nothing of brokers or networks: the broker implements this Protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from managed_ledger.errors import ManagedLedgerError
from managed_ledger.position import Position
from managed_ledger.snapshot_copy import SnapshotCopy


class ReplicationError(ManagedLedgerError):
    """The batch could not be confirmed by the ack quorum; nothing of it was kept."""

    # False when the batch was refused before it was sent anywhere: no copy can hold
    # it, so its entry ids may still be given (the ledger need not close below it).
    may_be_held: bool = True


class Replication(Protocol):
    # The lowest id the ledger's next new ledger may take: above every ledger any copy
    # may know of, including those this copy never held an entry of.
    next_ledger_id: int
    # The writer's epoch: the first part of every cursor version it stamps, so that
    # its cursor states are newer than any an earlier writer left (cursor.py).
    epoch: int

    async def open_ledger(self, ledger_id: int, closing: tuple[int, int] | None) -> None:
        """Before the first write to ledger `ledger_id`: make it the topic's current
        ledger where every broker can see it (a compare-and-set that fails once another
        broker has taken the topic), and record `closing` (the ledger before it, and
        how many entries it ends with: no copy of it counts past that). Raises a
        ReplicationError to refuse."""
        ...

    async def replicate(
        self,
        ledger_id: int,
        first_entry_id: int,
        frames: list[bytes],
        last_add_confirmed: Position,
    ) -> None:
        """Return once `ack_quorum - 1` other members have made entries
        `first_entry_id .. first_entry_id + len(frames) - 1` of `ledger_id` durable
        (with every entry before them). Raises a ReplicationError when they cannot."""
        ...

    async def replicate_cursors(self, states: dict[str, bytes], deleted: list[str]) -> None:
        """Send cursor states (name -> persisted form, as ManagedCursor.to_json makes it)
        and deleted cursor names to the other copies; return once the ack quorum holds
        them. Raises a ReplicationError when it cannot."""
        ...

    def replicate_snapshot(self, copy: SnapshotCopy) -> None:
        """A transaction-buffer snapshot was written here: send it to the other copies
        in the background, best effort (snapshot_copy.py). Never waits, never fails:
        a copy not sent is made good by a later one, or by the whole snapshot."""
        ...

    def attach(
        self,
        read_frames: Callable[[int, int, int], list[bytes]],
        confirmed: Callable[[], Position],
        ledger_ids: Callable[[], list[int]],
        cursor_states: Callable[[], dict[str, bytes]],
        whole_snapshot: Callable[[], SnapshotCopy | None],
    ) -> None:
        """Called once the ledger is open: `read_frames(ledger_id, first, last)` reads
        written entries back as frames (for a replica that missed them),
        `confirmed()` is the LAC, `ledger_ids()` the ledgers it holds,
        `cursor_states()` every cursor's persisted form and `whole_snapshot()` the
        transaction-buffer snapshot held here, whole (for a replica back from away,
        or one holding another)."""
        ...

    def trimmed(self, below_ledger_id: int) -> None:
        """Retention deleted every ledger below `below_ledger_id` here: the other copies
        are to delete theirs (in the background; a member away is told on its return)."""
        ...

    def describe(self) -> dict:
        """What the topic's stats show of its copies (JSON-ready): at least
        `membersUp` (this copy included) and `underReplicated`."""
        ...

    def close(self) -> None:
        """The ledger is closing: stop sending, fail what waits."""
        ...
