"""The broker-wide budgets: the config's when set, else a capped share of memory."""

from __future__ import annotations

import pytest

from managed_ledger import ManagedLedgerConfig, memory
from managed_ledger.config import MIB
from stableline.broker.config import load_config


def test_set_budgets_are_taken_as_they_are():
    config = ManagedLedgerConfig(entry_cache_size_bytes=3 * MIB, max_pending_write_bytes=5)
    assert memory.entry_cache_budget(config) == 3 * MIB
    assert memory.pending_write_budget(config) == 5


@pytest.mark.parametrize(
    ("usable", "cache", "pending"),
    [
        (512 * MIB, 64 * MIB, 16 * MIB),  # a small machine: a share of it
        (64 * 1024 * MIB, 256 * MIB, 32 * MIB),  # a big one: the caps
    ],
)
def test_automatic_budgets_are_a_capped_share_of_memory(monkeypatch, usable, cache, pending):
    monkeypatch.setattr(memory, "usable_memory_bytes", lambda: usable)
    config = ManagedLedgerConfig()
    assert memory.entry_cache_budget(config) == cache
    assert memory.pending_write_budget(config) == pending


def test_usable_memory_is_the_machines_or_a_lower_cgroup_limit(monkeypatch, tmp_path):
    import os

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(memory, "_CGROUP_MEMORY_MAX", limit)
    assert memory.usable_memory_bytes() == physical  # no cgroup file
    limit.write_text("max\n")
    assert memory.usable_memory_bytes() == physical
    limit.write_text(f"{100 * MIB}\n")
    assert memory.usable_memory_bytes() == min(physical, 100 * MIB)


def test_the_keys_are_config_keys_and_may_not_be_negative():
    config = load_config(overrides={"entry_cache_size_bytes": "1024"})
    assert config.ledger.entry_cache_size_bytes == 1024
    for key in ("entry_cache_size_bytes", "max_pending_write_bytes"):
        with pytest.raises(ValueError, match=key):
            load_config(overrides={key: "-1"})
