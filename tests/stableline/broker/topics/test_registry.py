"""TopicRegistry: topics listed from metadata, loaded on first use, unloaded only
when idle, and loaded again with everything they held."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher import Consumer, IsolationLevel, SubscriptionType
from managed_ledger import EntryHeader, LocalStore, TxnId
from stableline.broker.config import load_config
from stableline.broker.topics.registry import TooManyTopicsError, TopicRegistry
from stableline.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/reg")


async def _ready_topic(registry: TopicRegistry):
    topic = await registry.get(NAME)
    await topic.wait_recovered()
    return topic


async def test_created_topics_are_listed_without_being_loaded(registry):
    assert await registry.create(NAME)
    assert not await registry.create(NAME)
    assert registry.names() == [str(NAME)] and registry.loaded() == []


async def test_an_idle_topic_unloads_and_loads_again_with_its_entries_and_cursors(registry):
    topic = await _ready_topic(registry)
    position, _ = await topic.publish(EntryHeader(num_messages=1), b"kept")
    topic.ledger.open_cursor("sub", start_at_earliest=True)
    assert await registry.unload_idle(0) == 1
    assert registry.loaded() == [] and registry.names() == [str(NAME)]
    assert len(registry.files) == 0  # no file held for it
    again = await registry.get(NAME, create=False)
    assert again is not topic
    assert [e.payload for e in again.ledger.read(again.ledger.first_position(), 10)] == [b"kept"]
    assert "sub" in again.subscriptions
    assert again.ledger.last_confirmed == position


async def test_a_recently_used_topic_is_not_unloaded(registry):
    await _ready_topic(registry)
    assert await registry.unload_idle(3600) == 0
    assert len(registry.loaded()) == 1


async def test_a_topic_with_an_open_transaction_is_not_unloaded(registry):
    topic = await _ready_topic(registry)
    await topic.publish(EntryHeader(num_messages=1, txn_id=TxnId(0, 1)), b"t")
    assert await registry.unload_idle(0) == 0
    await topic.buffer.end(TxnId(0, 1), True, 0)
    assert await registry.unload_idle(0) == 1


async def test_a_topic_with_a_consumer_is_not_unloaded(registry):
    topic = await _ready_topic(registry)
    subscription = topic.subscribe(
        "sub", Consumer("c"), SubscriptionType.SHARED, IsolationLevel.READ_COMMITTED, True
    )
    assert await registry.unload_idle(0) == 0
    subscription.remove_consumer(subscription.consumers[0])
    assert await registry.unload_idle(0) == 1


async def test_a_topic_with_a_producer_is_not_unloaded(registry):
    topic = await _ready_topic(registry)
    topic.producers[1] = object()
    assert await registry.unload_idle(0) == 0
    del topic.producers[1]
    assert await registry.unload_idle(0) == 1


async def test_a_full_namespace_refuses_one_more_topic_even_when_created_concurrently(tmp_path):
    config = load_config(
        None, {"data_dir": tmp_path / "data", "fsync": False, "max_topics_per_namespace": 2}
    )
    store = LocalStore(config.metadata_dir)
    registry = TopicRegistry(config, store)
    names = [TopicName.parse(f"persistent://t/ns/{i}") for i in range(5)]
    results = await asyncio.gather(
        *(registry.create(name) for name in names), return_exceptions=True
    )
    assert sum(result is True for result in results) == 2
    assert all(isinstance(r, TooManyTopicsError) for r in results if r is not True)
    assert "max_topics_per_namespace" in str(next(r for r in results if r is not True))
    with pytest.raises(TooManyTopicsError):
        await registry.get(TopicName.parse("persistent://t/ns/by-use"))
    assert await registry.create(TopicName.parse("persistent://t/other/0"))  # per namespace
    await registry.close()
    # The count is rebuilt from the stored names at start; a deletion makes room.
    reopened = TopicRegistry(config, store)
    assert reopened.topics_in("t/ns") == 2
    with pytest.raises(TooManyTopicsError):
        await reopened.create(TopicName.parse("persistent://t/ns/after-restart"))
    await reopened.delete(TopicName.parse(reopened.names("t/ns")[0]))
    assert await reopened.create(TopicName.parse("persistent://t/ns/after-delete"))
    await reopened.close()
    store.close()
