"""A stopping broker hands its coordinator shards over (Coordinators.hand_over), on the
embedded metadata store with two brokers' coordinators: the shard goes to a live
broker, which takes it at once from the records' watch; an end under way finishes
and answers first; a call meanwhile waits and is sent to the new leader; with no
other live broker the shard stays."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import LocalStore, TxnId
from stableline.broker.txn.coordinator_errors import (
    CoordinatorLeavingError,
    CoordinatorNotLeaderError,
)
from stableline.broker.txn.coordinator_shards import ShardRecords, cluster_shard_count
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.shard_leaders import RecordedShardLeaders
from stableline.metadata import BrokerInfo, open_metadata_store
from txnbuffer import TransactionLimits, TxnState

SHARDS = 4
TOPIC = "persistent://public/default/orders"


class HeldEnds:
    """A participant whose ends on topics wait until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.reached = asyncio.Event()

    async def end_on_topic(self, *args) -> None:
        self.reached.set()
        await self.release.wait()

    async def end_acks(self, *args) -> None:
        return None


class Live:
    """Liveness as TopicOwnership answers it: the brokers named are live."""

    def __init__(self, *broker_ids: str):
        self.live = {
            b: BrokerInfo(b, b, f"http://{b}", "v", 0, "h", 1, "i", {}) for b in broker_ids
        }

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self.live.get(broker_id)

    def live_brokers(self) -> list[BrokerInfo]:
        return list(self.live.values())


@pytest.fixture
async def cluster_store(tmp_path: Path) -> AsyncIterator:
    store = await open_metadata_store("", embedded_dir=tmp_path / "cluster")
    yield store
    await store.close()


async def _broker(
    tmp_path: Path, cluster_store, broker_id: str, live: Live, participant=None
) -> Coordinators:
    local = LocalStore(tmp_path / broker_id)
    count = await cluster_shard_count(cluster_store, "c", SHARDS)
    leaders = RecordedShardLeaders(ShardRecords(cluster_store, "c", count), live, local, None)
    coordinators = Coordinators(local, participant or HeldEnds(), TransactionLimits(), leaders)
    await coordinators.start(broker_id)
    return coordinators


async def _until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def _leader(coordinators: Coordinators, shard: int) -> str:
    record = await coordinators.leaders.records.versioned(shard, fresh=True)
    assert record is not None
    return record[0].leader


async def test_a_stopping_leader_hands_its_shard_to_a_live_broker_which_takes_it_at_once(
    tmp_path, cluster_store
):
    live = Live("h:1", "h:2")
    first = await _broker(tmp_path, cluster_store, "h:1", live)
    second = await _broker(tmp_path, cluster_store, "h:2", live)
    txn = (await first.open(60_000, "", "", "")).txn_id
    shard = txn.most_bits
    await first.hand_over(5.0)
    assert await _leader(first, shard) == "h:2"
    assert shard not in first.local
    # Taken from the watch, with no call asking for it.
    await _until(lambda: shard in second.local)
    assert second.get(txn).state is TxnState.OPEN  # from the shard's log
    await first.close()
    await second.close()


async def test_an_end_under_way_finishes_and_answers_before_its_shard_is_handed_over(
    tmp_path, cluster_store
):
    live = Live("h:1", "h:2")
    participant = HeldEnds()
    first = await _broker(tmp_path, cluster_store, "h:1", live, participant)
    second = await _broker(tmp_path, cluster_store, "h:2", live)
    txn = (await first.open(60_000, "", "", "")).txn_id
    await first.add_topic(txn, TOPIC, None)
    coordinator = await first.deciding(txn)
    ending = asyncio.create_task(coordinator.end(txn, commit=True))
    await participant.reached.wait()
    handing = asyncio.create_task(first.hand_over(5.0))
    # A call arriving meanwhile is not taken here: it waits for the hand-over...
    asking = asyncio.create_task(first.leading(TxnId(txn.most_bits, txn.least_bits + 1)))
    # What must not happen cannot be waited for: the loop gets time to do it.
    await asyncio.sleep(0.1)
    assert not handing.done() and not asking.done()
    assert await _leader(first, txn.most_bits) == "h:1"  # held while the end runs
    participant.release.set()
    assert await ending is TxnState.COMMITTED
    await handing
    # ... and is then sent to the new leader.
    with pytest.raises(CoordinatorNotLeaderError) as refused:
        await asking
    assert refused.value.leader_address == "h:2"
    await _until(lambda: txn.most_bits in second.local)
    assert second.get(txn).state is TxnState.COMMITTED
    await first.close()
    await second.close()


async def test_a_new_transaction_asked_of_a_stopping_broker_opens_on_the_new_leader(
    tmp_path, cluster_store
):
    """The stopping broker takes no shard: with its own handed over, a new transaction
    goes to a shard another broker leads (here: through the peer call, recorded)."""
    live = Live("h:1", "h:2")
    first = await _broker(tmp_path, cluster_store, "h:1", live)
    second = await _broker(tmp_path, cluster_store, "h:2", live)
    shard = (await first.open(60_000, "", "", "")).txn_id.most_bits
    opened_on: list[tuple[str, int]] = []

    class Peers:
        async def open_transaction(self, address, shard, timeout_ms, name, owner, client):
            opened_on.append((address, shard))
            return await second.open_on_shard(shard, timeout_ms, name, owner, client)

    first.leaders._peers = Peers()
    await first.hand_over(5.0)
    opened = await first.open(60_000, "", "", "")
    assert opened_on == [("h:2", shard)] and opened.coordinator_address == "h:2"
    assert second.get(opened.txn_id).state is TxnState.OPEN
    assert not first.local  # it took no unled shard on its way out
    await first.close()
    await second.close()


async def test_with_no_other_live_broker_the_shard_stays_with_its_leader(tmp_path, cluster_store):
    first = await _broker(tmp_path, cluster_store, "h:1", Live("h:1"))
    txn = (await first.open(60_000, "", "", "")).txn_id
    await first.hand_over(5.0)
    assert await _leader(first, txn.most_bits) == "h:1"
    assert (await first.leading(txn)).get(txn).state is TxnState.OPEN
    await first.close()


async def test_once_its_store_is_closed_a_stopping_broker_still_names_the_new_leader(
    tmp_path, cluster_store
):
    """A stopping broker closes its metadata store as it leaves the cluster, before
    its last calls are answered: the shard it handed over is named from the record it
    wrote, and a call needing the store is sent to another broker (BrokerUnavailable),
    not failed with the store's own error."""
    live = Live("h:1", "h:2")
    first = await _broker(tmp_path, cluster_store, "h:1", live)
    second = await _broker(tmp_path, cluster_store, "h:2", live)
    txn = (await first.open(60_000, "", "", "")).txn_id
    await first.hand_over(5.0)
    await _until(lambda: txn.most_bits in second.local)
    await second.close()
    await cluster_store.close()
    with pytest.raises(CoordinatorNotLeaderError) as refused:
        await first.leading(txn)
    assert refused.value.leader_address == "h:2"
    unplaced = TxnId((txn.most_bits + 1) % SHARDS, 1)
    with pytest.raises(CoordinatorLeavingError) as leaving:
        await first.leading(unplaced)
    assert leaving.value.code == "BrokerUnavailable"
    await first.close()
