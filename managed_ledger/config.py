"""Limits and policies of a managed ledger. Every buffer has a named bound here."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    # Rollover: a ledger is closed and a new one opened past any of these.
    max_entries_per_ledger: int = 50_000
    max_ledger_size_bytes: int = 256 * MIB
    max_ledger_age_s: float = 4 * 3600.0
    # Durability: an append is acknowledged only after fdatasync when True.
    fsync: bool = True
    # One entry (a client batch) may not exceed this many payload bytes.
    max_entry_size_bytes: int = 5 * MIB + 64 * 1024
    # Group commit: at most this many bytes share one write + fsync.
    max_group_commit_bytes: int = 8 * MIB
    # Back-pressure: appends wait while this many bytes are queued for the writer
    # (one ledger's share of max_pending_write_bytes, never more than it).
    max_pending_bytes: int = 64 * MIB
    # Recently appended entries kept in memory for tailing readers (one ledger's
    # share of entry_cache_size_bytes, never more than it).
    cache_size_bytes: int = 64 * MIB
    # Broker-wide budgets, shared by every ledger of a broker (a ledger opened
    # alone has its own): bytes of cached entries, each charged its payload plus
    # what its Python objects cost (managed_ledger/cache.py), the oldest of any
    # topic evicted first [Pulsar: managedLedgerCacheSizeMB]; and bytes queued for
    # the writers of all topics, past which appends wait, first come first served
    # [maxMessagePublishBufferSizeInMB]. 0: a share of the memory the process may
    # use, 1/8 at most 256 MiB and 1/32 at most 32 MiB (managed_ledger/memory.py).
    entry_cache_size_bytes: int = 0
    max_pending_write_bytes: int = 0
    # Cursor positions are written to the local store at most this often.
    cursor_flush_interval_s: float = 0.05
    # Individually acknowledged positions above mark-delete that are persisted;
    # beyond this a crash redelivers the rest (at-least-once still holds).
    max_persisted_acked_positions: int = 100_000
    # Ledger files held open at once by all the ledgers sharing one LedgerFiles cache
    # (a broker's topics); the least recently used are closed past it. 0: half the
    # process's open-files soft limit (see ledger_files.max_open_files).
    max_open_ledger_files: int = 0
    # Ledgers consumed by every cursor are kept at least this long.
    retention_time_s: float = 0.0
