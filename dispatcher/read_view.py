"""What a subscription may read: an upper bound and which entries to skip.

The dispatcher knows nothing of transactions; a read view tells it how far it may
read (LAC for READ_UNCOMMITTED, the stable position for READ_COMMITTED) and which
entries are never delivered (markers always; aborted transactional entries under
READ_COMMITTED). Skipped entries are acknowledged by the broker itself.
"""

from __future__ import annotations

from typing import Protocol

from managed_ledger import Entry, ManagedLedger, Position
from txnbuffer import TransactionBuffer


class ReadView(Protocol):
    def bound(self) -> Position:
        """The last position that may be delivered now."""
        ...

    def should_skip(self, entry: Entry) -> bool:
        """True when the entry is never delivered (and is acknowledged by the broker)."""
        ...


class LogReadView:
    """READ_UNCOMMITTED (PIP-298): the whole durable log up to the LAC, aborted
    transactions included; only markers are skipped."""

    def __init__(self, ledger: ManagedLedger):
        self._ledger = ledger

    def bound(self) -> Position:
        return self._ledger.last_confirmed

    def should_skip(self, entry: Entry) -> bool:
        return entry.header.is_marker


class CommittedReadView:
    """READ_COMMITTED: up to the stable position; markers and aborted entries are skipped."""

    def __init__(self, buffer: TransactionBuffer):
        self._buffer = buffer

    def bound(self) -> Position:
        return self._buffer.stable_position

    def should_skip(self, entry: Entry) -> bool:
        return entry.header.is_marker or self._buffer.is_aborted_entry(entry)
