"""The balancer at work over one metadata store (the embedded one, in process): it
runs on one broker at a time, reads the load reports in the registrations, and moves
the hot broker's busiest topics to members of their ensembles (the mover is a fake at
this test's edge: topic moves are tested where they are made)."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from stableline.broker.cluster.balancer import BalancerSettings
from stableline.broker.cluster.load_balancing import (
    ForwardingMover,
    LoadBalancing,
    balancer_path,
)
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.topics.persistence import PersistencePolicy
from stableline.broker.topics.registry import TopicNotFoundError
from stableline.metadata import BrokerInfo, BrokerRegistration, open_metadata_store
from stableline.topic_name import TopicName

CLUSTER = "balancing"
BROKERS = ["h:1", "h:2", "h:3"]
SETTINGS = BalancerSettings(
    threshold=0.25, min_excess=10.0, consecutive_reports=1, max_moves_per_minute=10
)


class RecordingMover:
    def __init__(self):
        self.transfers: list[tuple[str, str | None]] = []

    async def transfer(self, name: TopicName, to: str | None = None) -> str:
        self.transfers.append((str(name), to))
        return to or ""


@pytest.fixture
async def store(tmp_path):
    store = await open_metadata_store("", embedded_dir=tmp_path / "metadata")
    yield store
    await store.close()


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


async def _cluster(store):
    registrations = {}
    for broker_id in BROKERS:
        registrations[broker_id] = BrokerRegistration(store, CLUSTER, _info(broker_id))
        await registrations[broker_id].register()
    views = {}
    for broker_id in BROKERS:
        view = TopicOwnership(store, CLUSTER, lambda namespace: PersistencePolicy(3, 3, 2))
        await view.start(broker_id)
        views[broker_id] = view
    return registrations, views


async def _until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)  # polled with a deadline


async def test_one_broker_runs_the_balancer_and_moves_the_hot_brokers_busiest_topics(store):
    registrations, views = await _cluster(store)
    topics = [f"persistent://public/default/busy-{i}" for i in range(6)]
    for topic in topics:
        await views["h:1"].place_new(TopicName.parse(topic), here=True)
    await registrations["h:1"].update_load(
        {"loadScore": 600.0, "reportedAtMs": 1}, dict.fromkeys(topics, 100.0)
    )
    for broker_id in ("h:2", "h:3"):
        await registrations[broker_id].update_load({"loadScore": 0.0, "reportedAtMs": 1}, {})
    await _until(
        lambda: all(
            view.live_broker("h:1").load.get("loadScore") == 600.0 for view in views.values()
        )
    )
    movers = {broker_id: RecordingMover() for broker_id in BROKERS}
    runs = {
        broker_id: LoadBalancing(
            store, CLUSTER, views[broker_id], movers[broker_id], SETTINGS, 0.02
        )
        for broker_id in BROKERS
    }
    for balancing in runs.values():
        balancing.start()
    try:
        await _until(lambda: sum(len(mover.transfers) for mover in movers.values()) >= 4)
        running = [broker_id for broker_id, balancing in runs.items() if balancing.running_here]
        assert len(running) == 1
        transfers = movers[running[0]].transfers
        # Drained to the mean: four of six, two to each other member; none twice.
        assert len(transfers) == 4 and len({topic for topic, _ in transfers}) == 4
        assert sorted(target for _, target in transfers) == ["h:2", "h:2", "h:3", "h:3"]
        assert {topic for topic, _ in transfers} <= set(topics)
        # No new report shows the moves (the fake moved nothing): nothing more moves.
        holder = runs[running[0]]
        rounds = holder.rounds
        await _until(lambda: holder.rounds >= rounds + 5)
        assert len(transfers) == 4
        # Its holder stops: another broker takes the balancer over.
        await runs[running[0]].close()
        await _until(lambda: any(b.running_here for b in runs.values()))
        assert (await store.get(balancer_path(CLUSTER))) is not None
    finally:
        for balancing in runs.values():
            await balancing.close()
        for view in views.values():
            await view.close()


async def test_the_forwarding_mover_moves_a_topic_where_it_is_served(store):
    _registrations, views = await _cluster(store)
    name = TopicName.parse("persistent://public/default/served-by-h1")
    await views["h:1"].place_new(name, here=True)
    asked: list[tuple[str, str, str | None]] = []

    async def remote(owner: BrokerInfo, topic: TopicName, to: str | None) -> str:
        asked.append((owner.broker_id, str(topic), to))
        return to or owner.broker_id

    try:
        here = RecordingMover()
        assert await ForwardingMover(views["h:1"], here, remote).transfer(name, "h:3") == "h:3"
        assert here.transfers == [(str(name), "h:3")] and asked == []
        elsewhere = RecordingMover()
        assert await ForwardingMover(views["h:2"], elsewhere, remote).transfer(name, "h:3") == "h:3"
        assert elsewhere.transfers == [] and asked == [("h:1", str(name), "h:3")]
        with pytest.raises(TopicNotFoundError):
            await ForwardingMover(views["h:2"], elsewhere, remote).transfer(TopicName.parse("nope"))
    finally:
        for view in views.values():
            await view.close()
