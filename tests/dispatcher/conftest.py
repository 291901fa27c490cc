"""Fixtures for dispatcher unit tests: a real managed ledger in a temp directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import ManagedLedger, ManagedLedgerConfig, MetadataStore


@pytest.fixture
def ledger_config() -> ManagedLedgerConfig:
    return ManagedLedgerConfig()


@pytest.fixture
async def ledger(
    tmp_path: Path, store: MetadataStore, ledger_config: ManagedLedgerConfig
) -> AsyncIterator[ManagedLedger]:
    opened = await ManagedLedger.open(
        "persistent://public/default/t", tmp_path / "t", store, ledger_config
    )
    yield opened
    await opened.close()
