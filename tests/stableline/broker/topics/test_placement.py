"""TopicPlacement: the registry asks one object where topics are served. Standalone
answers "here" without records; a cluster's placement (a fake here, TopicOwnership in
tests/cluster) decides which broker makes a topic's files."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore
from stableline.broker.config import load_config
from stableline.broker.topics.persistence import PersistencePolicy
from stableline.broker.topics.placement import (
    Claim,
    Placement,
    StandalonePlacement,
    TopicPlacement,
)
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/placed")
ELSEWHERE = "10.0.0.2:6650"


class RecordedPlacement:
    """A cluster's placement in miniature: records by topic, each naming a leader."""

    def __init__(self, broker_id: str, leader_for_new: str):
        self.broker_id = broker_id
        self.leader_for_new = leader_for_new
        self.records: dict[str, str] = {}
        self.forgotten: list[TopicName] = []

    async def is_placed(self, name: TopicName) -> bool:
        return str(name) in self.records

    async def needs_placing(self, name: TopicName) -> bool:
        return str(name) not in self.records

    async def claim(self, name: TopicName, persistence: PersistencePolicy | None = None) -> Claim:
        new = str(name) not in self.records
        leader = self.records.setdefault(str(name), self.leader_for_new)
        return Claim(here=leader == self.broker_id, new=new)

    async def check(self, name: TopicName, create: bool, on_disk: bool) -> bool:
        leader = self.records.get(str(name))
        if leader is None and create:
            leader = self.records[str(name)] = self.leader_for_new
        if leader is None:
            return False
        if leader != self.broker_id:
            raise LookupError(f"{name} is served by {leader}")
        return True

    async def forget(self, name: TopicName) -> None:
        self.records.pop(str(name), None)
        self.forgotten.append(name)

    def placed_names(self, prefix: str = "") -> set[str]:
        return {name for name in self.records if name.startswith(prefix)}

    async def placement_of(self, name: TopicName, place: bool) -> Placement | None:
        leader = self.records.get(str(name))
        return None if leader is None else Placement(leader, 0, leader == self.broker_id)

    async def serving_broker(self, name: TopicName) -> BrokerInfo | None:
        return None

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return None

    def live_brokers(self) -> list[BrokerInfo]:
        return []

    async def recover(self, name: TopicName) -> None:
        return None  # one copy: nothing to recover from others


@pytest.fixture
def config(tmp_path):
    return load_config(None, {"data_dir": tmp_path / "data", "fsync": False})


@pytest.fixture
async def store(config):
    opened = LocalStore(config.metadata_dir)
    yield opened
    opened.close()


@pytest.fixture
async def make_registry(config, store):
    made: list[TopicRegistry] = []

    def make(placement: TopicPlacement | None = None) -> TopicRegistry:
        registry = TopicRegistry(config, store, placement=placement)
        made.append(registry)
        return registry

    yield make
    for registry in made:
        await registry.close()


async def test_standalone_placement_serves_every_topic_here_without_records():
    placement = StandalonePlacement()
    assert await placement.claim(NAME) == Claim(here=True, new=False)
    assert not await placement.is_placed(NAME)
    assert not await placement.needs_placing(NAME)  # the registry checks as it creates
    assert not await placement.check(NAME, create=True, on_disk=False)
    assert await placement.placement_of(NAME, place=True) is None
    assert await placement.serving_broker(NAME) is None
    assert placement.placed_names() == set() and placement.live_brokers() == []
    await placement.forget(NAME)  # nothing to forget


async def test_a_registry_given_no_placement_serves_every_topic_itself(make_registry):
    registry = make_registry()
    assert isinstance(registry.placement, StandalonePlacement)
    assert await registry.create(NAME)
    assert not await registry.taken_in_cluster(TopicName.parse("persistent://public/default/x"))
    assert registry.cluster_names("public/default") == [str(NAME)]


async def test_a_topic_placed_on_another_broker_makes_no_files_here(make_registry):
    placement = RecordedPlacement("me:6650", leader_for_new=ELSEWHERE)
    registry = make_registry(placement)
    assert await registry.create(NAME)  # placed now, by this call
    assert not registry.exists(NAME) and registry.names() == []
    assert placement.records == {str(NAME): ELSEWHERE}
    assert not await registry.create(NAME)  # placed before: not new
    # Listed through this broker as the cluster's, and taken for a new creation.
    assert registry.cluster_names("public/default") == [str(NAME)]
    assert await registry.taken_in_cluster(NAME)
    with pytest.raises(LookupError, match=ELSEWHERE):
        await registry.get(NAME)


async def test_a_topic_placed_here_is_made_here_and_forgotten_when_deleted(make_registry):
    placement = RecordedPlacement("me:6650", leader_for_new="me:6650")
    registry = make_registry(placement)
    topic = await registry.get(NAME)
    await topic.wait_recovered()
    assert registry.exists(NAME) and placement.records == {str(NAME): "me:6650"}
    await registry.delete(NAME)
    assert placement.forgotten == [NAME] and placement.records == {}
    with pytest.raises(TopicNotFoundError):
        await registry.get(NAME, create=False)


async def test_a_use_that_may_not_create_an_unplaced_topic_places_nothing(make_registry):
    placement = RecordedPlacement("me:6650", leader_for_new="me:6650")
    registry = make_registry(placement)
    with pytest.raises(TopicNotFoundError):
        await registry.get(NAME, create=False)
    assert placement.records == {}
