"""ShardLeaders: which broker leads each coordinator shard. Standalone this broker leads
them all and calls nobody; in a cluster the shard records say, a shard is taken once,
and a leader that is not live is told apart from one that is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import LocalStore
from stableline.broker.txn.coordinator_shards import ShardRecords
from stableline.broker.txn.shard_leaders import EveryShardHere, RecordedShardLeaders
from stableline.metadata import BrokerInfo, open_metadata_store
from txnbuffer import TransactionNotFoundError

SHARDS = 3


class Live:
    def __init__(self, *broker_ids: str):
        self.live = {
            b: BrokerInfo(b, b, f"http://{b}", "v", 0, "h", 1, "i", {}) for b in broker_ids
        }

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self.live.get(broker_id)

    def live_brokers(self) -> list[BrokerInfo]:
        return list(self.live.values())


class Peers:
    """Stands in for the peer client: handed over, never called here."""


@pytest.fixture
async def cluster_store(tmp_path: Path) -> AsyncIterator:
    store = await open_metadata_store("", embedded_dir=tmp_path / "cluster")
    yield store
    await store.close()


@pytest.fixture
def local(tmp_path: Path):
    store = LocalStore(tmp_path / "local")
    yield store
    store.close()


async def test_standalone_every_shard_is_led_here_from_the_start():
    leaders = EveryShardHere(SHARDS)
    assert leaders.count == SHARDS
    assert await leaders.led_here("") == [0, 1, 2]
    assert await leaders.take(1, "") == ""
    assert await leaders.placed() == {} and leaders.live_broker("h:1") is None
    with pytest.raises(TransactionNotFoundError, match="shard 7 does not exist"):
        await leaders.leader(7)


def test_standalone_never_calls_another_broker():
    with pytest.raises(AssertionError, match="no other broker is called"):
        EveryShardHere().peers  # noqa: B018


async def test_in_a_cluster_a_shard_is_taken_once_and_its_leader_answered(cluster_store, local):
    peers = Peers()
    first = RecordedShardLeaders(
        ShardRecords(cluster_store, "c", SHARDS), Live("h:1", "h:2"), local, peers
    )
    second = RecordedShardLeaders(
        ShardRecords(cluster_store, "c", SHARDS), Live("h:1", "h:2"), local, peers
    )
    assert first.peers is peers and first.count == SHARDS
    with pytest.raises(TransactionNotFoundError, match="has no transactions"):
        await first.leader(1)  # nobody leads it yet
    assert await first.take(1, "h:1") == "h:1"
    assert await second.take(1, "h:2") == "h:1"  # taken already
    assert await second.leader(1) == "h:1"
    assert await second.placed() == {1: "h:1"}
    assert await second.led_here("h:2") == [] and await first.led_here("h:1") == [1]
    with pytest.raises(TransactionNotFoundError, match="this cluster has 3"):
        await first.leader(SHARDS)
    assert second.live_broker("h:1").broker_id == "h:1"
    assert second.live_broker("h:9") is None


async def test_a_stopping_leader_hands_its_shard_to_the_live_broker_leading_fewest(
    cluster_store, local
):
    leaders = RecordedShardLeaders(
        ShardRecords(cluster_store, "c", SHARDS), Live("h:1", "h:2", "h:3"), local, Peers()
    )
    assert await leaders.take(0, "h:2") == "h:2"
    assert await leaders.take(1, "h:1") == "h:1"
    assert await leaders.hand_over(1, "h:1") == "h:3"  # h:2 leads one shard, h:3 none
    record = await leaders.records.record(1)
    assert (record.leader, record.epoch, record.ensemble) == ("h:3", 1, ("h:3",))


async def test_a_shard_stays_with_its_leader_when_no_other_broker_is_live(cluster_store, local):
    leaders = RecordedShardLeaders(
        ShardRecords(cluster_store, "c", SHARDS), Live("h:1"), local, Peers()
    )
    assert await leaders.take(0, "h:1") == "h:1"
    assert await leaders.hand_over(0, "h:1") == ""
    record = await leaders.records.record(0)
    assert (record.leader, record.epoch) == ("h:1", 0)


async def test_a_hand_over_of_a_shard_another_broker_took_meanwhile_changes_nothing(
    cluster_store,
):
    records = ShardRecords(cluster_store, "c", SHARDS)
    await records.place_on_self(0, "h:1")
    await records.take(0, "h:2", lambda record: True)  # h:2 took it from a stale h:1
    assert (await records.hand_over(0, "h:1", "h:3")).leader == "h:2"
    record = (await records.versioned(0, fresh=True))[0]
    assert (record.leader, record.epoch) == ("h:2", 1)
