"""The broker-wide memory budgets of the ledgers, from the config or the machine.

Every ledger of a broker shares one entry cache and one budget of bytes queued
for writers (Pulsar: managedLedgerCacheSizeMB, maxMessagePublishBufferSizeInMB),
so a broker's memory is bounded by the broker, not multiplied by its topics. Left
at 0 in the config, each is a fraction of the memory the process may use (the
machine's, or its cgroup's limit when lower), capped:

- entry cache: 1/8 of it, at most 256 MiB;
- pending writes: 1/32 of it, at most 32 MiB: a few group commits' worth
  (max_group_commit_bytes, 8 MiB) keeps a writer busy; more only holds memory
  (10 topics x 70 MB written with 32 against 128 MiB: the same rate, 30-45 MB
  less RSS).

A ledger's own bounds (`cache_size_bytes`, `max_pending_bytes`) are its share:
never more than the budget.
"""

from __future__ import annotations

import os
from pathlib import Path

from managed_ledger.config import MIB, ManagedLedgerConfig

ENTRY_CACHE_SHARE = 8
ENTRY_CACHE_CAP = 256 * MIB
PENDING_WRITES_SHARE = 32
PENDING_WRITES_CAP = 32 * MIB
# Where a cgroup v2 limit of this process's memory is read from.
_CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")


def usable_memory_bytes() -> int:
    """The physical memory (os.sysconf), or the cgroup's memory.max when lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = _CGROUP_MEMORY_MAX.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def entry_cache_budget(config: ManagedLedgerConfig) -> int:
    """Bytes of cached entries across all ledgers sharing a cache."""
    if config.entry_cache_size_bytes > 0:
        return config.entry_cache_size_bytes
    return min(usable_memory_bytes() // ENTRY_CACHE_SHARE, ENTRY_CACHE_CAP)


def pending_write_budget(config: ManagedLedgerConfig) -> int:
    """Bytes queued for the writers of all ledgers sharing a budget."""
    if config.max_pending_write_bytes > 0:
        return config.max_pending_write_bytes
    return min(usable_memory_bytes() // PENDING_WRITES_SHARE, PENDING_WRITES_CAP)
