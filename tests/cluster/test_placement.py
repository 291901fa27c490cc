"""TopicOwnership over one store (the embedded one, in process): placement by
compare-and-set, least-loaded first, the answers of check(), and what is served and
refused while the store's session is suspended or the store unreachable."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from stableline.broker.cluster.ownership import (
    NotOwnerError,
    OwnershipUnavailableError,
    TopicOwnership,
    TopicUnavailableError,
    ownership_path,
)
from stableline.broker.topics.persistence import NotEnoughBrokersError, PersistencePolicy
from stableline.metadata import (
    BrokerInfo,
    BrokerRegistration,
    MetadataStoreUnavailable,
    SessionEvent,
    open_metadata_store,
)
from stableline.topic_name import TopicName

CLUSTER = "placement"


def _info(broker_id: str) -> BrokerInfo:
    return BrokerInfo(
        broker_id=broker_id,
        grpc_address=broker_id,
        http_url=f"http://{broker_id}",
        version="test",
        started_ms=int(time.time() * 1000),
        hostname=socket.gethostname(),
        pid=os.getpid(),
        instance=broker_id,
    )


@pytest.fixture
async def store(tmp_path):
    store = await open_metadata_store("", embedded_dir=tmp_path / "metadata")
    yield store
    await store.close()


REGISTRATIONS: dict[str, BrokerRegistration] = {}


async def _brokers(store, ids: list[str]) -> list[TopicOwnership]:
    views = []
    for broker_id in ids:
        REGISTRATIONS[broker_id] = BrokerRegistration(store, CLUSTER, _info(broker_id))
        await REGISTRATIONS[broker_id].register()
    for broker_id in ids:
        view = TopicOwnership(store, CLUSTER)
        await view.start(broker_id)
        views.append(view)
    return views


async def test_brokers_placing_one_topic_at_once_agree_on_one_record(store):
    views = await _brokers(store, ["h:1", "h:2", "h:3"])
    name = TopicName.parse("race")
    records = await asyncio.gather(*(view.place(name) for view in views))
    assert len(set(records)) == 1
    for view in views:
        await view.close()


async def test_placement_spreads_topics_over_the_least_loaded_brokers(store):
    views = await _brokers(store, ["h:1", "h:2", "h:3"])
    leaders = [(await views[0].place(TopicName.parse(f"t{i}"))).leader for i in range(6)]
    assert sorted(leaders) == ["h:1", "h:1", "h:2", "h:2", "h:3", "h:3"]
    for view in views:
        await view.close()


async def test_check_refuses_a_topic_another_broker_owns_or_whose_owner_is_gone(store):
    views = await _brokers(store, ["h:1", "h:2"])
    name = TopicName.parse("owned")
    leader = (await views[0].place(name)).leader
    owner, other = (views[0], views[1]) if leader == "h:1" else (views[1], views[0])
    assert await owner.check(name, create=False, on_disk=False)
    with pytest.raises(NotOwnerError, match=leader):
        await other.check(name, create=False, on_disk=False)
    await REGISTRATIONS[leader].unregister()  # as when its session lapses
    async with asyncio.timeout(5):
        while other.live_broker(leader) is not None:
            await asyncio.sleep(0.01)  # the broker watch's delivery, polled with a deadline
    with pytest.raises(TopicUnavailableError, match=leader):
        await other.check(name, create=False, on_disk=False)
    assert not await other.check(TopicName.parse("unknown"), create=False, on_disk=False)
    for view in views:
        await view.close()


async def test_a_suspended_session_places_nothing_and_serves_what_is_placed(store):
    (view,) = await _brokers(store, ["h:1"])
    placed = TopicName.parse("placed")
    await view.place(placed)
    store._session_event(SessionEvent.CONNECTION_LOST)  # as the etcd store's keeper does
    with pytest.raises(OwnershipUnavailableError, match="places none while its session"):
        await view.place(TopicName.parse("new"))
    assert await store.get(ownership_path(CLUSTER, TopicName.parse("new"))) is None
    assert await view.check(placed, create=True, on_disk=True)
    await view.close()


async def test_an_unreachable_store_refuses_at_once_what_needs_it_and_serves_what_is_here(
    store, monkeypatch
):
    (view,) = await _brokers(store, ["h:1"])
    cached, on_disk = TopicName.parse("cached"), TopicName.parse("on-disk")
    await view.place(cached)
    await view.place(on_disk)

    async def unreachable(*args, **kwargs):
        raise MetadataStoreUnavailable("etcd at etcd://e:2379 is unreachable")

    monkeypatch.setattr(store, "get", unreachable)
    monkeypatch.setattr(store, "put", unreachable)
    view._records.pop(str(on_disk))  # as after a watch that fell behind
    assert await view.check(cached, create=True, on_disk=True)
    assert await view.check(on_disk, create=False, on_disk=True)
    for create in (True, False):
        with pytest.raises(TopicUnavailableError, match="etcd at etcd://e:2379 is unreachable"):
            await view.check(TopicName.parse("elsewhere"), create=create, on_disk=False)
    await view.close()


async def test_every_broker_counts_a_placed_topic_once_under_its_full_name(store):
    views = await _brokers(store, ["h:1", "h:2"])
    name = TopicName.parse("counted")
    leader = (await views[0].place(name)).leader
    # Both views see the record's creation through their watch; the placing one
    # counted it when it placed it, and must not count it again.
    async with asyncio.timeout(5):
        while views[1].led_by(leader) == 0:
            await asyncio.sleep(0.01)  # the watch's delivery, polled with a deadline
    await views[0].place(TopicName.parse("after"))  # its notification follows the first's
    async with asyncio.timeout(5):
        while len(views[0].leaders()) < 2 or len(views[1].leaders()) < 2:
            await asyncio.sleep(0.01)
    for view in views:
        assert view.leaders()[str(name)] == leader
        assert set(view.leaders()) == {str(name), "persistent://public/default/after"}
        assert sum(view.led_by(b) for b in ("h:1", "h:2")) == 2
    for view in views:
        await view.close()


async def _views_with(store, ids: list[str], policy: PersistencePolicy) -> list[TopicOwnership]:
    for broker_id in ids:
        REGISTRATIONS[broker_id] = BrokerRegistration(store, CLUSTER, _info(broker_id))
        await REGISTRATIONS[broker_id].register()
    views = []
    for broker_id in ids:
        view = TopicOwnership(store, CLUSTER, lambda namespace: policy)
        await view.start(broker_id)
        views.append(view)
    return views


async def test_a_new_topic_gets_an_ensemble_of_the_policys_size_leader_first(store):
    views = await _views_with(store, ["h:1", "h:2", "h:3"], PersistencePolicy(3, 3, 2))
    records = [await views[0].place(TopicName.parse(f"e{i}")) for i in range(3)]
    for record in records:
        assert len(set(record.ensemble)) == 3 and record.ensemble[0] == record.leader
        assert (record.write_quorum, record.ack_quorum) == (3, 2)
    assert sorted(record.leader for record in records) == ["h:1", "h:2", "h:3"]
    # Another broker reads the same record back, quorums and all.
    assert await views[1].record(TopicName.parse("e0")) == records[0]
    placement = await views[2].placement_of(TopicName.parse("e0"), place=False)
    assert placement.ensemble == records[0].ensemble
    assert placement.persistence == PersistencePolicy(3, 3, 2)
    for view in views:
        await view.close()


async def test_fewer_live_brokers_than_the_ensemble_places_nothing(store):
    views = await _views_with(store, ["h:1", "h:2"], PersistencePolicy(3, 3, 2))
    name = TopicName.parse("persistent://t/ns/too-few")
    with pytest.raises(NotEnoughBrokersError, match=r"2 live brokers.*ensemble of 3") as refused:
        await views[0].place(name)
    assert "set-persistence t/ns" in str(refused.value)
    assert await store.get(ownership_path(CLUSTER, name)) is None
    # A policy asked for by the caller (Kafka's replication factor) wins over the namespace's.
    assert (await views[0].claim(name, PersistencePolicy(2, 2, 1))).new
    record = await views[1].record(name)
    assert record is not None and len(record.ensemble) == 2 and record.ack_quorum == 1
    for view in views:
        await view.close()
