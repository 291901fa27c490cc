"""Errors raised by the storage engine."""

from __future__ import annotations

import errno


class ManagedLedgerError(Exception):
    """Base class for storage errors."""


class LedgerClosedError(ManagedLedgerError):
    """The managed ledger is closed (broker shutting down or topic deleted)."""


class EntryTooLargeError(ManagedLedgerError):
    """An entry is larger than the configured maximum."""


class CorruptEntryError(ManagedLedgerError):
    """An entry failed its CRC or length check when read back."""


class CursorNotFoundError(ManagedLedgerError):
    """No cursor of that name exists on this ledger."""


class TooManyOpenFilesError(ManagedLedgerError):
    """The process ran out of file descriptors (EMFILE, ENFILE): a limit the
    operator can raise, not a fault of the data. Nothing was written."""


class StorageError(ManagedLedgerError):
    """The disk refused a write or an fsync. The append was not acknowledged and
    none of its bytes are kept; earlier entries are untouched and readable."""


class StorageFullError(StorageError):
    """No space left on the device (ENOSPC, EDQUOT): free space, then retry."""


_FULL = {errno.ENOSPC, errno.EDQUOT}


def storage_error(what: str, error: OSError) -> StorageError:
    """A typed error, with what to do about it, for a failed write or sync."""
    if error.errno in _FULL:
        return StorageFullError(
            f"{what}: the broker's disk is full ({error.strerror}). Nothing of this "
            "append was kept; the topic stays readable. Free disk space (or let "
            "retention delete consumed ledgers), then retry."
        )
    return StorageError(
        f"{what}: the disk failed ({error}). Nothing of this append was kept; the "
        "topic stays readable and the next append goes to a fresh ledger."
    )


class ReplicaError(ManagedLedgerError):
    """A replica refused a call from a topic's writer (replica.py); the subclasses say
    which rule. The base itself: a write that would cut confirmed entries."""


class ReplicaFencedError(ReplicaError):
    """The call carries an epoch lower than one the replica has seen for the topic:
    a newer owner has taken it, and the caller may write no more."""


class ReplicaGapError(ReplicaError):
    """The write starts past the entries the replica holds of that ledger (or a close
    names more entries than it holds): `held` is how many it holds, from which the
    writer resends."""

    def __init__(self, message: str, held: int):
        super().__init__(message)
        self.held = held


class ReplicaLedgerClosedError(ReplicaError):
    """The write is to a ledger the replica holds as closed, or older than its newest."""


class ReplicaCorruptEntryError(ReplicaError):
    """A frame failed its checks (CRC or lengths): sent damaged, or read back damaged.
    Nothing of the call was written."""


class ReplicaSnapshotMismatchError(ReplicaError):
    """A snapshot change names a state other than the one the replica holds (it missed
    one, or holds another writer's): nothing was written; send the whole snapshot."""
