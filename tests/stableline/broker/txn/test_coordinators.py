"""The broker's coordinators over shard records (stableline/broker/txn/coordinators.py),
on the embedded metadata store: which shard a broker takes, and what it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import LocalStore
from stableline.broker.txn.coordinator_errors import (
    ShardLogConflictError,
)
from stableline.broker.txn.coordinator_shards import ShardRecords, cluster_shard_count
from stableline.broker.txn.coordinators import Coordinators, named_shard
from stableline.broker.txn.shard_leaders import RecordedShardLeaders
from stableline.metadata import BrokerInfo, open_metadata_store
from txnbuffer import CoordinatorFencedError, TransactionLimits, TransactionNotFoundError, TxnState

SHARDS = 4


class NothingToEnd:
    async def end_on_topic(self, *args) -> None:
        return None

    async def end_acks(self, *args) -> None:
        return None


class NoPeers:
    """Liveness as TopicOwnership answers it: no other broker is live."""

    def live_broker(self, broker_id: str):
        return None

    def live_brokers(self) -> list:
        return []


@pytest.fixture
async def cluster_store(tmp_path: Path) -> AsyncIterator:
    store = await open_metadata_store("", embedded_dir=tmp_path / "cluster")
    yield store
    await store.close()


async def _broker(tmp_path: Path, cluster_store, broker_id: str) -> Coordinators:
    local = LocalStore(tmp_path / broker_id)
    count = await cluster_shard_count(cluster_store, "c", SHARDS)
    leaders = RecordedShardLeaders(ShardRecords(cluster_store, "c", count), NoPeers(), local, None)
    coordinators = Coordinators(local, NothingToEnd(), TransactionLimits(), leaders)
    await coordinators.start(broker_id)
    return coordinators


async def test_concurrent_first_transactions_through_a_broker_take_one_shard(
    tmp_path, cluster_store
):
    coordinators = await _broker(tmp_path, cluster_store, "h:1")
    opened = await asyncio.gather(*(coordinators.open(60_000, "", "", "") for _ in range(16)))
    assert len({o.txn_id.most_bits for o in opened}) == 1
    assert sorted(coordinators.local) == [opened[0].txn_id.most_bits]
    assert all(o.coordinator_address == "" for o in opened)
    await coordinators.close()


class TakenMeanwhile:
    """Shard records whose listing is read just before another broker takes every shard:
    two brokers' first transactions racing for the same unled shards."""

    def __init__(self, records: ShardRecords, other: str):
        self.records = records
        self.other = other

    async def all(self, fresh: bool = False):
        placed = await self.records.all(fresh)
        for shard in range(self.records.count):
            await self.records.place_on_self(shard, self.other)
        return placed

    def __getattr__(self, name: str):
        return getattr(self.records, name)


async def test_a_broker_that_loses_the_race_for_every_unled_shard_uses_one_the_winner_took(
    tmp_path, cluster_store
):
    loser = await _broker(tmp_path, cluster_store, "h:2")
    loser.leaders.records = TakenMeanwhile(loser.leaders.records, "h:1")
    shard = await loser._shard_for_new()
    assert 0 <= shard < SHARDS and not loser.local
    assert (await loser.leaders.records.record(shard)).leader == "h:1"
    await loser.close()


async def test_a_restarted_broker_leads_again_the_shards_it_took_and_no_others(
    tmp_path, cluster_store
):
    first = await _broker(tmp_path, cluster_store, "h:1")
    txn = (await first.open(60_000, "", "", "")).txn_id
    await first.close()
    first.store.close()
    again = await _broker(tmp_path, cluster_store, "h:1")
    assert sorted(again.local) == [txn.most_bits]
    assert again.get(txn).txn_id == txn  # its log, recovered from its own data dir
    with pytest.raises(TransactionNotFoundError, match="not led here"):
        again.get(type(txn)((txn.most_bits + 1) % SHARDS, 1))
    await again.close()


def test_a_named_transaction_has_one_shard_whoever_asks():
    shards = {named_shard("role", "payments-writer", SHARDS) for _ in range(3)}
    assert len(shards) == 1
    assert {named_shard("role", f"writer-{i}", SHARDS) for i in range(64)} == set(range(SHARDS))


async def _standalone_run(path: Path) -> None:
    """A broker's data dir after it coordinated a transaction alone (shard 0)."""
    store = LocalStore(path)
    alone = Coordinators(store, NothingToEnd(), TransactionLimits())
    await alone.start()
    assert (await alone.open(60_000, "", "", "")).txn_id.most_bits == 0
    await alone.close()
    store.close()


async def test_a_data_dir_with_a_shards_log_takes_that_shard_when_it_joins(tmp_path, cluster_store):
    await _standalone_run(tmp_path / "h:1")
    joined = await _broker(tmp_path, cluster_store, "h:1")
    assert sorted(joined.local) == [0]
    assert (await joined.open(60_000, "", "", "")).txn_id.least_bits > 1
    await joined.close()


async def test_a_data_dir_with_a_shards_log_another_broker_leads_is_refused(
    tmp_path, cluster_store
):
    first = await _broker(tmp_path, cluster_store, "h:1")
    assert (await first.open(60_000, "", "", "")).txn_id.most_bits == 0  # shard 0 is h:1's
    await _standalone_run(tmp_path / "h:2")
    with pytest.raises(ShardLogConflictError, match="broker h:1 leads that shard"):
        await _broker(tmp_path, cluster_store, "h:2")
    await first.close()


class Live:
    """Liveness as TopicOwnership answers it, from a table of live registrations."""

    def __init__(self, live: dict[str, BrokerInfo]):
        self.live = live

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self.live.get(broker_id)

    def live_brokers(self) -> list[BrokerInfo]:
        return list(self.live.values())


def _registration(broker_id: str) -> BrokerInfo:
    return BrokerInfo(broker_id, broker_id, f"http://{broker_id}", "v", 0, "h", 1, "i", {})


async def test_a_shards_leader_is_the_broker_that_took_it_and_the_first_asked_takes_it(
    tmp_path, cluster_store
):
    first = await _broker(tmp_path, cluster_store, "h:1")
    second = await _broker(tmp_path, cluster_store, "h:2")
    second.leaders.liveness = Live({"h:1": _registration("h:1")})
    shard = named_shard("", "payments", SHARDS)
    assert await first.shard_leader(shard) is None  # nobody led it: h:1 takes it
    assert shard in first.local
    assert (await second.shard_leader(shard)).broker_id == "h:1"
    assert shard not in second.local
    # A transaction of that name opened through the leader lives on that shard.
    opened = await first.open(60_000, "payments", "", "")
    assert opened.txn_id.most_bits == shard and opened.coordinator_address == ""
    stale = first.local[shard]
    second.leaders.liveness = Live({})  # h:1 went down: the first asked takes the shard over
    assert await second.shard_leader(shard) is None
    assert second.get(opened.txn_id).state is TxnState.OPEN  # from the shard's log
    assert (await second.open(60_000, "payments", "", "")).txn_id == opened.txn_id
    # h:1, back, writes nothing more for the shard: its log's next write is refused.
    stale.add_topic(opened.txn_id, "persistent://public/default/late")
    with pytest.raises(CoordinatorFencedError, match="taken by another broker"):
        await stale.log.flushed()
    assert "persistent://public/default/late" not in second.get(opened.txn_id).topics
    await first.close()
    await second.close()
