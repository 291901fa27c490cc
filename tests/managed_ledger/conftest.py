"""Fixtures for managed-ledger unit tests: real files and LMDB in a temp directory.

`harness` opens ledgers on one directory and metadata store, reopens them after a
clean close, and simulates what a crash leaves behind (`crash`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from managed_ledger import LocalStore, ManagedLedger, ManagedLedgerConfig
from managed_ledger.state import LedgerState

# Appends in unit tests skip fdatasync unless a test is about durability.
FAST = ManagedLedgerConfig(fsync=False)


@dataclass
class LedgerHarness:
    root: Path
    config: ManagedLedgerConfig = FAST
    name: str = "persistent://public/default/t"
    store: LocalStore | None = None
    opened: list[ManagedLedger] = field(default_factory=list)

    @property
    def directory(self) -> Path:
        return self.root / "ledger"

    @property
    def metadata_path(self) -> Path:
        return self.root / "metadata"

    def open_store(self) -> LocalStore:
        if self.store is None:
            self.store = LocalStore(self.metadata_path)
        return self.store

    async def open(self, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        ledger = await ManagedLedger.open(
            self.name, self.directory, self.open_store(), config or self.config
        )
        self.opened.append(ledger)
        return ledger

    async def reopen(
        self, ledger: ManagedLedger, config: ManagedLedgerConfig | None = None
    ) -> ManagedLedger:
        """Clean shutdown and open again."""
        await ledger.close()
        return await self.open(config)

    def crash(self, ledger: ManagedLedger) -> None:
        """Leave behind what a SIGKILL would: no seal, no index, no last cursor flush.

        File descriptors die with the process; LMDB transactions already committed
        survive (they are in the page cache), so the store is closed, not discarded.
        """
        if ledger._cursor_flush is not None:
            ledger._cursor_flush.cancel()
            ledger._cursor_flush = None
        # Not a transition: a killed process has no state left to move from.
        ledger._state = LedgerState.CLOSED
        for segment in ledger._segments.values():
            segment.release()
        self.opened.remove(ledger)
        self.close_store()

    async def crash_and_reopen(
        self, ledger: ManagedLedger, config: ManagedLedgerConfig | None = None
    ) -> ManagedLedger:
        self.crash(ledger)
        return await self.open(config)

    def close_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    async def close_all(self) -> None:
        for ledger in self.opened:
            await ledger.close()
        self.opened.clear()
        self.close_store()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[LedgerHarness]:
    opened = LedgerHarness(tmp_path)
    yield opened
    await opened.close_all()


async def eventually(
    condition: Callable[[], bool], timeout_s: float = 5.0, message: str = "condition"
) -> None:
    """Yield to the loop until condition() holds, or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        await asyncio.sleep(0.001)


@pytest.fixture
def wait_for() -> Callable:
    """`await wait_for(condition, timeout_s, message)`: deadline-bounded polling."""
    return eventually


@pytest.fixture
def faulty_disk():
    """A FaultyDisk under every segment for the test's duration (the disk seam)."""
    from managed_ledger import disk

    faulty = disk.FaultyDisk()
    previous = disk.install(faulty)
    yield faulty
    disk.install(previous)
