"""Fixtures for dispatcher unit tests: a real managed ledger in a temp directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher import DispatchLimits, IsolationLevel, LogReadView, Subscription, SubscriptionType
from managed_ledger import LocalStore, ManagedLedger, ManagedLedgerConfig


@pytest.fixture
def ledger_config() -> ManagedLedgerConfig:
    return ManagedLedgerConfig()


@pytest.fixture
async def ledger(
    tmp_path: Path, store: LocalStore, ledger_config: ManagedLedgerConfig
) -> AsyncIterator[ManagedLedger]:
    opened = await ManagedLedger.open(
        "persistent://public/default/t", tmp_path / "t", store, ledger_config
    )
    yield opened
    await opened.close()


@pytest.fixture
async def subscriptions(ledger: ManagedLedger):
    """`open(type, level, view=None, name="sub", limits=None)`: a Subscription woken by
    appends, as Topic does."""
    opened: list[Subscription] = []

    def open_(
        type_: SubscriptionType = SubscriptionType.EXCLUSIVE,
        level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        view=None,
        name: str = "sub",
        limits: DispatchLimits | None = None,
    ) -> Subscription:
        cursor, _ = ledger.open_cursor(name, True, Subscription.properties_for(type_, level))
        chosen = view or LogReadView(ledger)
        subscription = Subscription(ledger.name, cursor, lambda _level: chosen, limits)
        ledger.add_listener(subscription.wake)
        opened.append(subscription)
        return subscription

    yield open_
    for subscription in opened:
        ledger.remove_listener(subscription.wake)
        await subscription.close()
