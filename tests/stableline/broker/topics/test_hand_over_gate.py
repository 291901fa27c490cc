"""A topic handed over (Topic.stop_writes, write_gate.HandOverGate): no new write is
admitted, with TopicMovingError (a BrokerFencedError: the producer's stream ends and
its client sends again after a fresh lookup); every write admitted before is
answered, and writes_done waits for it; resume_writes undoes it."""

from __future__ import annotations

import asyncio

import pytest

from managed_ledger import EntryHeader, LocalStore
from stableline.broker.config import load_config
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.write_gate import BrokerFencedError, TopicMovingError, WriteGate
from stableline.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/handed-over")


@pytest.fixture
async def topic(tmp_path):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    registry = TopicRegistry(config, store, write_gate=WriteGate())
    made = await registry.get(NAME)
    await made.wait_recovered()
    yield made
    await registry.close()
    store.close()


async def test_a_write_admitted_before_is_answered_and_a_new_one_refused(topic):
    accepted = asyncio.ensure_future(topic.publish(EntryHeader(num_messages=1), b"accepted"))
    await asyncio.sleep(0)  # admitted, and appending
    topic.stop_writes("topic moving to broker B")
    with pytest.raises(TopicMovingError, match="moving to broker B") as refused:
        await topic.publish(EntryHeader(num_messages=1), b"refused")
    assert isinstance(refused.value, BrokerFencedError)
    assert refused.value.code == "TopicFenced"
    await asyncio.wait_for(topic.writes_done(), 5)
    position, duplicate = accepted.result()
    assert position is not None and not duplicate
    ledger = topic.ledger
    assert [e.payload for e in ledger.read(ledger.first_position(), 10)] == [b"accepted"]


async def test_the_broker_s_own_waits_for_the_gate_end_at_once(topic):
    topic.stop_writes("topic moving")
    with pytest.raises(TopicMovingError):
        await asyncio.wait_for(topic.write_gate.wait_open(), 1)


async def test_resume_writes_admits_again(topic):
    topic.stop_writes("topic moving")
    topic.resume_writes()
    position, _ = await topic.publish(EntryHeader(num_messages=1), b"again")
    assert position is not None
    await topic.writes_done()


async def test_a_wait_for_the_hand_over_ends_when_writes_resume(topic):
    await asyncio.wait_for(topic.hand_over_done(), 1)  # none under way: at once
    topic.stop_writes("topic moving")
    waiting = asyncio.ensure_future(topic.hand_over_done())
    await asyncio.sleep(0)
    assert not waiting.done()
    topic.resume_writes()
    await asyncio.wait_for(waiting, 1)


async def test_a_wait_for_the_hand_over_ends_when_the_topic_closes(topic):
    topic.stop_writes("topic moving")
    waiting = asyncio.ensure_future(topic.hand_over_done())
    await topic.close()
    await asyncio.wait_for(waiting, 1)
