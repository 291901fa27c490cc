"""A topic's subscriptions: one owner of the isolation level, and the read view from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import (
    CommittedReadView,
    Consumer,
    IsolationLevel,
    LogReadView,
    SubscriptionType,
)
from managed_ledger import LocalStore, ManagedLedger
from stableline.broker.topics.topic import Topic
from stableline.topic_name import TopicName

NAME = TopicName.parse("views")
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


async def open_topic(tmp_path: Path, store: LocalStore) -> Topic:
    ledger = await ManagedLedger.open(str(NAME), tmp_path / "views", store)
    return Topic(NAME, ledger)


@pytest.mark.parametrize(("level", "view_type"), [(RU, LogReadView), (RC, CommittedReadView)])
async def test_a_subscription_reloaded_from_its_cursor_reads_through_the_view_of_its_level(
    tmp_path, store, level, view_type
):
    topic = await open_topic(tmp_path, store)
    created = topic.subscribe("sub", Consumer("c"), SubscriptionType.SHARED, level, True)
    assert created.isolation_level is level
    assert isinstance(created.view, view_type)
    await topic.close()

    reopened = await open_topic(tmp_path, store)
    try:
        reloaded = reopened.subscriptions["sub"]
        assert reloaded.isolation_level is level
        assert isinstance(reloaded.view, view_type)
        assert reloaded.view is reopened.read_view(level)
    finally:
        await reopened.close()
