"""Storage engine: append-only ledgers with group commit, cursors, retention."""

from managed_ledger.config import ManagedLedgerConfig
from managed_ledger.cursor import ManagedCursor, newest_states
from managed_ledger.entry import Entry, EntryHeader, EntryType, TxnId
from managed_ledger.errors import (
    CorruptEntryError,
    CursorNotFoundError,
    EntryTooLargeError,
    LedgerClosedError,
    ManagedLedgerError,
    ReplicaCorruptEntryError,
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from managed_ledger.ledger import ManagedLedger
from managed_ledger.ledger_files import LedgerFiles
from managed_ledger.local_store import LocalStore
from managed_ledger.position import EARLIEST, LATEST, Position
from managed_ledger.replica import ReplicaLogs, ReplicaState
from managed_ledger.snapshot_copy import SNAPSHOTS_DB, SnapshotCopy
from managed_ledger.state import LedgerState

__all__ = [
    "EARLIEST",
    "LATEST",
    "SNAPSHOTS_DB",
    "CorruptEntryError",
    "CursorNotFoundError",
    "Entry",
    "EntryHeader",
    "EntryTooLargeError",
    "EntryType",
    "LedgerClosedError",
    "LedgerFiles",
    "LedgerState",
    "LocalStore",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "Position",
    "ReplicaCorruptEntryError",
    "ReplicaError",
    "ReplicaFencedError",
    "ReplicaGapError",
    "ReplicaLedgerClosedError",
    "ReplicaLogs",
    "ReplicaSnapshotMismatchError",
    "ReplicaState",
    "SnapshotCopy",
    "StorageError",
    "StorageFullError",
    "TooManyOpenFilesError",
    "TxnId",
    "newest_states",
]
