"""Where each coordinator shard lives: the cluster's shard count and shard records.

The transaction coordinator is split into K shards (Pulsar's coordinator
partitions); a transaction id's high half is its shard. With the embedded store the
broker leads every shard itself and nothing here runs. In a cluster K is the
cluster's (`/stableline/clusters/{cluster}`, key `transaction_coordinator_shards`,
written by the first broker that needs it from its own config and read by every
other), and shard s has a record `/stableline/ownership/{cluster}/coordinators/{s}`
of the same shape as a topic's (leader, epoch, ensemble, since).

Promises:
- A shard record is created once, by compare-and-set, and changes only by a take
  (ShardRecords.take): only the broker a record names runs that shard's
  coordinator, and its log's writes hold only while the record is at the version it
  took it at (txn/shard_log.py), so a broker that lost the shard writes nothing more.
- A broker takes a shard only for itself (`place_on_self`): when a client asks it for
  a transaction and it leads none, or for a named transaction whose shard nobody
  leads yet. Shards so spread over the brokers clients ask.
- A leader that stops gives its shard away (`hand_over`): one CAS, from the version
  its log's writes are guarded by, names the next leader, which takes it at once
  (the records' watch tells it); the old leader's log is fenced by that same write.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from managed_ledger import LocalStore
from stableline.broker.cluster.ownership import OwnershipRecord
from stableline.broker.errors import BrokerError
from stableline.broker.topics.database import BROKER_DB
from stableline.metadata import AlreadyExists, BadVersion, ClusterMetadataStore, MetadataStoreError
from stableline.metadata.layout import ROOT, check_cluster_name, cluster_path

log = logging.getLogger(__name__)

SHARD_COUNT_KEY = "transaction_coordinator_shards"
# Pulsar's coordinator partitions are 16 by default; a cluster of a few brokers
# spreads 4 over them with less to watch.
DEFAULT_CLUSTER_SHARDS = 4
# A TxnId's most bits name the shard; Kafka producer ids keep 22 bits of it.
MAX_SHARDS = 1024


def shards_dir(cluster: str) -> str:
    return f"{ROOT}/ownership/{check_cluster_name(cluster)}/coordinators"


def shard_path(cluster: str, shard: int) -> str:
    return f"{shards_dir(cluster)}/{shard}"


async def cluster_shard_count(store: ClusterMetadataStore, cluster: str, wanted: int) -> int:
    """The cluster's shard count: the record's, or `wanted` written there if it has
    none yet (the first broker to ask decides; a later config cannot change it).
    ShardCountError when the record holds no count a broker could have written."""
    assert 1 <= wanted <= MAX_SHARDS, wanted
    path = cluster_path(cluster)
    while True:
        result = await store.get(path)
        if result is None:
            try:
                await store.put(path, json.dumps({SHARD_COUNT_KEY: wanted}).encode(), -1)
                return wanted
            except AlreadyExists:
                continue
        try:
            settings = json.loads(result.value or b"{}")
            if not isinstance(settings, dict):
                raise ValueError("not a JSON object")
        except ValueError as error:
            raise ShardCountError(
                f"cluster {cluster}'s record {path} is not readable ({error}); it holds "
                f"the transaction coordinator shard count and was not written by a broker"
            ) from None
        count = settings.get(SHARD_COUNT_KEY)
        if count is not None:
            if type(count) is not int or not 1 <= count <= MAX_SHARDS:
                raise ShardCountError(
                    f"cluster {cluster}'s record {path} says {count!r} transaction "
                    f"coordinator shards, which no broker writes (1..{MAX_SHARDS})"
                )
            return count
        settings[SHARD_COUNT_KEY] = wanted
        try:
            await store.put(path, json.dumps(settings).encode(), result.stat.version)
            return wanted
        except BadVersion:
            continue


class ShardCountError(BrokerError, MetadataStoreError):
    """The cluster's shard count is unreadable, or not the one this broker runs with."""

    code = "Internal"


# In the broker's own store (BROKER_DB): the count this broker first ran with in a
# cluster, so a count changed in the shared store is caught rather than adopted.
_LOCAL_PREFIX = "coordinator-shards:"


def recorded_shard_count(local: LocalStore, cluster: str) -> int | None:
    """The count this broker first ran with in `cluster` (None: it never ran there):
    what it asks for when its config leaves the count to the cluster, so a broker
    that finds the cluster's record gone writes back the count it ran with."""
    raw = local.get(BROKER_DB, _LOCAL_PREFIX + cluster)
    return None if raw is None else int(raw)


def check_shard_count(local: LocalStore, cluster: str, count: int, configured: int) -> None:
    """Refuse (ShardCountError) a cluster count other than the one this broker ran with
    before (recorded in its data dir the first time), or than its config names
    (`configured`, 0: whatever the cluster's is). Why: a TxnId's high half names its
    shard, and each shard's log is kept by the broker that leads it; a count changed
    under running brokers would send transactions to shards that do not hold them."""
    key = _LOCAL_PREFIX + cluster
    raw = local.get(BROKER_DB, key)
    if raw is not None and int(raw) != count:
        raise ShardCountError(
            f"cluster {cluster} now says {count} transaction coordinator shards, but this "
            f"broker ran with {int(raw)} (recorded in its data dir): the count is fixed "
            f"when a cluster starts and a changed one is not adopted. Put back "
            f"{int(raw)} in {cluster_path(cluster)} (key {SHARD_COUNT_KEY}) if it was "
            f"changed by mistake or by someone else"
        )
    if configured and configured != count:
        raise ShardCountError(
            f"this broker's config asks for {configured} transaction coordinator shards "
            f"but cluster {cluster} runs {count}: the count is fixed when a cluster "
            f"starts; set transaction_coordinator_shards to {count} or to 0 (the "
            f"cluster's), or start a new cluster"
        )
    if raw is None:
        local.put(BROKER_DB, key, str(count).encode())
        local.sync()


class ShardRecords:
    """The cluster's shard records, as this broker reads and writes them.

    A record changes only by compare-and-set: placed once (`place_on_self`), then
    taken by another broker when its leader is gone (`take_over`), taken again by its
    own leader as it starts (`renew`), or given by a stopping leader to another broker
    (`hand_over`); each change bumps the epoch, and the record's
    version is what the leader's log writes are guarded by (txn/shard_log.py). The
    cache follows the records' changes (`follow`)."""

    def __init__(self, store: ClusterMetadataStore, cluster: str, count: int):
        assert 1 <= count <= MAX_SHARDS, count
        self.store = store
        self.cluster = cluster
        self.count = count
        self._records: dict[int, tuple[OwnershipRecord, int]] = {}
        # Shard -> the version this broker just wrote its record at (placed or taken),
        # until its coordinator starts with it (taken_here).
        self._taken: dict[int, int] = {}

    def check_shard(self, shard: int) -> None:
        assert 0 <= shard < self.count, (shard, self.count)

    def path(self, shard: int) -> str:
        return shard_path(self.cluster, shard)

    async def record(self, shard: int) -> OwnershipRecord | None:
        """The shard's record, None if no broker leads it yet."""
        found = await self.versioned(shard)
        return None if found is None else found[0]

    async def versioned(
        self, shard: int, fresh: bool = False
    ) -> tuple[OwnershipRecord, int] | None:
        """(the shard's record, its version); read from the store when `fresh`."""
        self.check_shard(shard)
        found = None if fresh else self._records.get(shard)
        if found is None:
            result = await self.store.get(shard_path(self.cluster, shard))
            if result is None:
                return None
            found = self._records[shard] = (
                OwnershipRecord.from_json(result.value),
                result.stat.version,
            )
        return found

    def forget(self, shard: int) -> None:
        """Drop the cached record (it changed): the next read asks the store."""
        self._records.pop(shard, None)

    def seen(self, shard: int, record: OwnershipRecord, version: int) -> None:
        """The record as the store's watch reported it: cached unless a newer version
        is (a watch reports changes in order, but this broker's own write may have
        been cached before the watch reports an older one)."""
        cached = self._records.get(shard)
        if cached is None or cached[1] < version:
            self._records[shard] = (record, version)

    async def all(self, fresh: bool = False) -> dict[int, OwnershipRecord]:
        """Every placed shard's record (read from the store when `fresh`)."""
        records = {}
        for shard in range(self.count):
            found = await self.versioned(shard, fresh)
            if found is not None:
                records[shard] = found[0]
        return records

    async def place_on_self(self, shard: int, broker_id: str) -> OwnershipRecord:
        """The shard's record: `broker_id` leads it unless another broker's came first."""
        record = await self.record(shard)
        if record is not None:
            return record
        mine = OwnershipRecord(broker_id, 0, (broker_id,), int(time.time() * 1000))
        try:
            await self.store.put(shard_path(self.cluster, shard), mine.to_json(), -1)
        except AlreadyExists:
            record = await self.record(shard)
            assert record is not None
            return record
        log.info("coordinator shard %d placed on this broker (%s)", shard, broker_id)
        self._records[shard] = (mine, 0)  # a created key is at version 0
        self._taken[shard] = 0
        return mine

    async def take(
        self, shard: int, broker_id: str, allowed: Callable[[OwnershipRecord], bool]
    ) -> tuple[OwnershipRecord, int]:
        """Make `broker_id` the shard's leader at the next epoch, if the record as read
        now passes `allowed` (its leader is gone, or is `broker_id` itself); the
        record and version that hold then (another broker's when it came first)."""
        while True:
            found = await self.versioned(shard, fresh=True)
            assert found is not None, f"shard {shard} was never placed"
            record, version = found
            if not allowed(record):
                return found
            mine = replace(
                record,
                leader=broker_id,
                epoch=record.epoch + 1,
                ensemble=(broker_id,),
                since_ms=int(time.time() * 1000),
            )
            try:
                await self.store.put(shard_path(self.cluster, shard), mine.to_json(), version)
            except BadVersion:
                continue
            self._records[shard] = (mine, version + 1)
            self._taken[shard] = version + 1
            return mine, version + 1

    async def hand_over(self, shard: int, leader: str, successor: str) -> OwnershipRecord:
        """Name `successor` the shard's leader at the next epoch if `leader` still
        leads it; the record that holds then (another broker's when one took it)."""
        assert successor != leader, (shard, leader)
        while True:
            found = await self.versioned(shard, fresh=True)
            assert found is not None, f"shard {shard} was never placed"
            record, version = found
            if record.leader != leader:
                return record
            theirs = replace(
                record,
                leader=successor,
                epoch=record.epoch + 1,
                ensemble=(successor,),
                since_ms=int(time.time() * 1000),
            )
            try:
                await self.store.put(shard_path(self.cluster, shard), theirs.to_json(), version)
            except BadVersion:
                continue
            self._records[shard] = (theirs, version + 1)
            self._taken.pop(shard, None)
            return theirs

    def taken_here(self, shard: int) -> tuple[OwnershipRecord, int] | None:
        """The record and version this broker last placed or took `shard` at, once
        (its coordinator starts on it without taking the shard again)."""
        version = self._taken.pop(shard, None)
        found = self._records.get(shard)
        if version is None or found is None or found[1] != version:
            return None
        return found
