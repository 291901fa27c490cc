"""A coordinator shard's log in the metadata store (stableline/broker/txn/shard_log.py),
on the embedded store: what a flush writes, in what order, and what fences it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from managed_ledger import LocalStore
from stableline.broker.txn import shard_log
from stableline.metadata import MetadataStoreUnavailable, open_metadata_store
from stableline.metadata.store import MAX_GUARDED_OPS
from txnbuffer import CoordinatorFencedError
from txnbuffer.coordinator import COORDINATOR_DB

CLUSTER = "c"
GUARD = "/stableline/ownership/c/coordinators/2"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator:
    store = await open_metadata_store("", embedded_dir=tmp_path / "cluster")
    await store.put(GUARD, b"leader h:1", -1)
    yield store
    await store.close()


def _log(store, fenced: list[int] | None = None) -> shard_log.ShardLog:
    return shard_log.ShardLog(
        store,
        CLUSTER,
        2,
        shard_log.shard_key_prefix(2),
        GUARD,
        0,
        (fenced if fenced is not None else []).append,
    )


async def _remote(store) -> dict[str, bytes]:
    directory = shard_log.shard_log_dir(CLUSTER, 2)
    return {
        path.removeprefix(directory + "/"): result.value
        for path, result in await store.scan(directory)
    }


async def test_a_flush_writes_the_last_value_of_each_key_and_its_deletions(store):
    log = _log(store)
    log.written({"shard-2/txn:1": b"open", "sequence:2": b"1000"}, [])
    log.written({"shard-2/txn:1": b"committing", "shard-2/ack:1:0": b"ack"}, [])
    await log.flushed()
    assert await _remote(store) == {
        "txn:1": b"committing",
        "sequence:2": b"1000",
        "ack:1:0": b"ack",
    }
    log.written({}, ["shard-2/txn:1", "shard-2/ack:1:0"])
    await log.flushed()
    assert await _remote(store) == {"sequence:2": b"1000"}
    await log.close()


async def test_more_changes_than_one_guarded_write_takes_go_in_chunks_in_order(store):
    log = _log(store)
    count = 2 * MAX_GUARDED_OPS + 7
    log.written({f"shard-2/txn:{n}": str(n).encode() for n in range(count)}, [])
    await log.flushed()
    assert len(await _remote(store)) == count
    assert log.flushes == 3
    await log.close()


async def test_a_taken_shard_fences_its_log_for_good(store):
    fenced: list[int] = []
    log = _log(store, fenced)
    log.written({"shard-2/txn:1": b"open"}, [])
    await log.flushed()
    await store.put(GUARD, b"leader h:2", 0)  # another broker took the shard
    log.written({"shard-2/txn:1": b"committing"}, [])
    with pytest.raises(CoordinatorFencedError, match="taken by another broker"):
        await log.flushed()
    assert fenced == [2]
    assert await _remote(store) == {"txn:1": b"open"}
    log.written({"shard-2/txn:2": b"open"}, [])
    with pytest.raises(CoordinatorFencedError):
        await log.flushed()
    await log.close()


class Unavailable:
    """The store, refusing its first `failures` guarded writes as etcd away would."""

    def __init__(self, store, failures: int):
        self.store = store
        self.failures = failures

    async def write_guarded(self, *args) -> None:
        if self.failures:
            self.failures -= 1
            raise MetadataStoreUnavailable("etcd is unreachable")
        await self.store.write_guarded(*args)


async def test_a_store_away_is_waited_out_and_the_waiters_answered_after(store):
    log = _log(Unavailable(store, 2))
    log.written({"shard-2/txn:1": b"open"}, [])
    await asyncio.wait_for(log.flushed(), 5.0)
    assert await _remote(store) == {"txn:1": b"open"}
    await log.close()


async def test_load_puts_the_clusters_log_in_place_of_the_local_records(store, tmp_path):
    local = LocalStore(tmp_path / "local")
    local.write_many(
        COORDINATOR_DB,
        {"shard-2/txn:9": b"never flushed", "shard-3/txn:1": b"another shard's"},
    )
    prefix = shard_log.shard_key_prefix(2)
    assert await shard_log.load(store, CLUSTER, 2, prefix, local) == 0  # none there yet
    assert local.get(COORDINATOR_DB, "shard-2/txn:9") == b"never flushed"
    log = _log(store)
    log.written({"shard-2/txn:1": b"open", "sequence:2": b"1000"}, [])
    await log.flushed()
    assert await shard_log.load(store, CLUSTER, 2, prefix, local) == 2
    assert dict(local.scan_prefix(COORDINATOR_DB, "shard-2/")) == {"shard-2/txn:1": b"open"}
    assert local.get(COORDINATOR_DB, "sequence:2") == b"1000"
    assert local.get(COORDINATOR_DB, "shard-3/txn:1") == b"another shard's"
    await log.close()
    local.close()
