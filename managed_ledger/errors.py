"""Errors raised by the storage engine."""


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
