"""Fixtures for transaction buffer tests: a real managed ledger and local store in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from managed_ledger import LocalStore, ManagedLedger, ManagedLedgerConfig
from txnbuffer import TransactionBuffer

TOPIC = "persistent://public/default/txn-test"


@pytest.fixture
def ledger_config() -> ManagedLedgerConfig:
    # fsync off: durability is the ledger's own tests' business, speed is ours.
    return ManagedLedgerConfig(fsync=False)


OpenLedger = Callable[..., Awaitable[ManagedLedger]]


@pytest.fixture
async def open_ledger(
    tmp_path: Path, store: LocalStore, ledger_config: ManagedLedgerConfig
) -> AsyncIterator[OpenLedger]:
    """`await open_ledger()` opens (or reopens) the topic's ledger on the same store."""
    opened: list[ManagedLedger] = []

    async def open_(config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        ledger = await ManagedLedger.open(TOPIC, tmp_path / "topic", store, config or ledger_config)
        opened.append(ledger)
        return ledger

    yield open_
    for ledger in opened:
        await ledger.close()


@pytest.fixture
async def ledger(open_ledger: OpenLedger) -> ManagedLedger:
    return await open_ledger()


@pytest.fixture
async def buffer(ledger: ManagedLedger) -> TransactionBuffer:
    """A READY transaction buffer over a fresh ledger."""
    tb = TransactionBuffer(ledger)
    await tb.recover()
    return tb
