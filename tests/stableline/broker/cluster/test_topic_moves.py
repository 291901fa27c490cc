"""TopicMoves' decisions (stableline/broker/cluster/topic_moves.py): where a topic goes
when it is unloaded or transferred, what is refused and why; and the standalone
unload, which closes the topic here once its writes in flight are answered."""

from __future__ import annotations

import asyncio

import pytest

from managed_ledger import EntryHeader, LocalStore
from stableline.broker.cluster.ownership import OwnershipRecord
from stableline.broker.cluster.topic_moves import (
    MovePlan,
    TopicNotMovableError,
    move_topic,
    plan_move,
)
from stableline.broker.config import load_config
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topics.topic_state import TopicState
from stableline.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/moving")
ME, B, C = "10.0.0.1:6650", "10.0.0.2:6650", "10.0.0.3:6650"


def _record(*ensemble: str) -> OwnershipRecord:
    replicated = len(ensemble) > 1
    return OwnershipRecord(
        ensemble[0], 3, ensemble, 0, min(len(ensemble), 3), 2 if replicated else 1
    )


def _plan(record, to, live=(ME, B, C), led=None) -> MovePlan:
    led = led or {}
    return plan_move(NAME, record, ME, to, lambda m: m in live, lambda b: led.get(b, 0))


def test_an_unload_of_a_one_copy_topic_reloads_it_here():
    assert _plan(_record(ME), None) == MovePlan(ME, reload=True)


def test_a_transfer_of_a_one_copy_topic_is_refused_saying_its_only_copy_is_here():
    with pytest.raises(TopicNotMovableError, match="one copy"):
        _plan(_record(ME), B)


def test_an_unload_of_a_replicated_topic_goes_to_the_least_loaded_other_member():
    record = _record(ME, B, C)
    assert _plan(record, None, led={B: 5, C: 2}) == MovePlan(C, reload=False)
    # A tie goes to the lowest id, so every broker would choose the same one.
    assert _plan(record, None, led={B: 2, C: 2}) == MovePlan(B, reload=False)


def test_an_unload_skips_members_not_live_on_their_copy_and_reloads_here_without_any():
    record = _record(ME, B, C)
    assert _plan(record, None, live=(ME, C), led={C: 9}) == MovePlan(C, reload=False)
    assert _plan(record, None, live=(ME,)) == MovePlan(ME, reload=True)


def test_a_transfer_goes_to_the_member_named():
    assert _plan(_record(ME, B, C), C, led={C: 100}) == MovePlan(C, reload=False)


def test_a_transfer_to_this_broker_changes_nothing():
    assert _plan(_record(ME, B, C), ME) == MovePlan(ME, reload=False)


def test_a_transfer_outside_the_ensemble_is_refused_naming_the_ensemble():
    with pytest.raises(TopicNotMovableError, match="not a member of the topic's ensemble"):
        _plan(_record(ME, B), C)


def test_a_transfer_to_a_member_not_live_on_its_copy_is_refused():
    with pytest.raises(TopicNotMovableError, match="not live on the data dir"):
        _plan(_record(ME, B, C), B, live=(ME, C))


@pytest.fixture
async def registry(tmp_path):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    made = TopicRegistry(config, store)
    yield made
    await made.close()
    store.close()


async def test_a_standalone_unload_answers_the_write_in_flight_then_closes_the_topic(registry):
    topic = await registry.get(NAME)
    await topic.wait_recovered()
    in_flight = asyncio.ensure_future(topic.publish(EntryHeader(num_messages=1), b"accepted"))
    await asyncio.sleep(0)  # admitted, and appending
    assert not in_flight.done()
    assert await move_topic(registry, None, NAME, None) == ""
    assert in_flight.done() and in_flight.result()[0] is not None  # answered, not failed
    assert registry.state(NAME) is TopicState.UNLOADED
    reloaded = await registry.get(NAME)
    await reloaded.wait_recovered()
    assert [e.payload for e in reloaded.ledger.read(reloaded.ledger.first_position(), 10)] == [
        b"accepted"
    ]


async def test_a_standalone_transfer_is_refused_and_an_unknown_topic_is_not_found(registry):
    await registry.get(NAME)
    with pytest.raises(TopicNotMovableError, match="standalone"):
        await move_topic(registry, None, NAME, B)
    with pytest.raises(TopicNotFoundError):
        await move_topic(registry, None, TopicName.parse("nothing-here"), None)
