"""Which broker leads each transaction coordinator shard, and how to reach it: the one
object the coordinators ask, standalone or in a cluster.

Standalone (`EveryShardHere`) this broker leads every shard from its start and there
is no other broker to call. In a cluster (`RecordedShardLeaders`) the shard records
(txn/coordinator_shards.py) name each shard's leader, the ownership view says
whether it is live, and the peer client calls it.

Promises of both:
- `led_here(broker_id)` names the shards this broker recovers at start; in a cluster a
  shard whose log is in this data dir is claimed first (ShardLogConflictError when
  another broker leads it: two logs of one shard would give two transactions one id).
- `leader(shard)` is the id of the broker leading an existing shard, else
  TransactionNotFoundError; `take` makes this broker the leader of a shard nobody
  leads and answers whoever leads it.
- `hand_over(shard, broker_id)` gives a shard this broker leads to the live broker
  leading the fewest shards (a stopping broker's last act for it): the broker
  named after, "" when there is no other live broker (standalone: never).
- Standalone nothing calls another broker: `peers` is never asked for (asserted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from managed_ledger import LocalStore
from stableline.broker.cluster.ownership import OwnershipRecord
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.topics.database import BROKER_DB
from stableline.broker.txn import shard_log
from stableline.broker.txn.coordinator_errors import ShardLogConflictError
from stableline.broker.txn.coordinator_shards import ShardRecords, shards_dir
from stableline.metadata import BrokerInfo, WatchOverflow
from txnbuffer import CoordinatorFencedError, TransactionNotFoundError
from txnbuffer.coordinator import COORDINATOR_DB, CoordinatorLog, LocalLog

log = logging.getLogger(__name__)


class Liveness(Protocol):
    """Whether a broker is live (the cluster's TopicOwnership answers it)."""

    def live_broker(self, broker_id: str) -> BrokerInfo | None: ...

    def live_brokers(self) -> list[BrokerInfo]: ...


# In the broker's store (BROKER_DB): the shards whose log this data dir has copied
# from, or written to, the cluster's (per cluster).
_COPIED_PREFIX = "coordinator-log-copied:"


class ShardLeaders(Protocol):
    """Which broker leads each shard (see the module docstring)."""

    count: int

    @property
    def peers(self) -> PeerClient:
        """How to call a shard's leader elsewhere."""
        ...

    async def led_here(self, broker_id: str) -> list[int]:
        """The shards this broker leads as it starts."""
        ...

    async def leader(self, shard: int) -> str:
        """The id of the broker leading `shard`; TransactionNotFoundError when the
        shard does not exist or nobody leads it."""
        ...

    async def take(self, shard: int, broker_id: str) -> str:
        """Lead `shard` as `broker_id` unless another broker does: the leader's id."""
        ...

    async def placed(self, fresh: bool = False) -> dict[int, str]:
        """Every shard some broker leads -> its leader's id (read anew when `fresh`)."""
        ...

    async def open_log(
        self, shard: int, broker_id: str, on_fenced: Callable[[int], None]
    ) -> CoordinatorLog:
        """The log of a shard `broker_id` leads and is about to recover: what its
        coordinator writes goes there too, and this broker's store holds the shard's
        records as the log has them."""
        ...

    async def take_over(self, shard: int, broker_id: str, gone: str) -> str:
        """Lead `shard` as `broker_id` if its leader is still `gone` and not live:
        the leader's id afterwards (another broker's when it came first)."""
        ...

    def successor(self, shard: int) -> str:
        """The live broker that takes `shard` when its leader goes (each broker
        computes the same from the live brokers it knows; a take decides)."""
        ...

    async def hand_over(self, shard: int, broker_id: str) -> str:
        """Give `shard`, led by `broker_id`, to another live broker: the shard's
        leader afterwards ("" when no other broker is live, and it stays here)."""
        ...

    def forget(self, shard: int) -> None:
        """The shard's record may have changed: read it again on its next use."""
        ...

    async def follow(self, on_change: Callable[[int, str], None]) -> None:
        """Call `on_change(shard, leader)` for every change of a shard's record from
        now on ("" when it is deleted), until cancelled."""
        ...

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        """The registration of a live broker, None when it is not live."""
        ...


class EveryShardHere:
    """Standalone: this broker leads all `count` shards; there is no other broker."""

    def __init__(self, count: int = 1):
        self.count = count

    @property
    def peers(self) -> PeerClient:
        raise AssertionError("standalone: every shard is led here, no other broker is called")

    async def led_here(self, broker_id: str) -> list[int]:
        return list(range(self.count))

    async def leader(self, shard: int) -> str:
        raise TransactionNotFoundError(
            f"coordinator shard {shard} does not exist on this broker: it leads its "
            f"{self.count} (0..{self.count - 1}) itself"
        )

    async def take(self, shard: int, broker_id: str) -> str:
        return broker_id

    async def placed(self, fresh: bool = False) -> dict[int, str]:
        return {}

    async def open_log(
        self, shard: int, broker_id: str, on_fenced: Callable[[int], None]
    ) -> CoordinatorLog:
        return LocalLog()

    async def take_over(self, shard: int, broker_id: str, gone: str) -> str:
        return broker_id

    def successor(self, shard: int) -> str:
        return ""

    async def hand_over(self, shard: int, broker_id: str) -> str:
        return ""

    def forget(self, shard: int) -> None:
        pass

    async def follow(self, on_change: Callable[[int, str], None]) -> None:
        return None

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return None


class RecordedShardLeaders:
    """In a cluster: the shard records name the leaders (see the module docstring)."""

    def __init__(
        self, records: ShardRecords, liveness: Liveness, local: LocalStore, peers: PeerClient
    ):
        self.records = records
        self.liveness = liveness
        self.count = records.count
        self._local = local
        self._peers = peers

    @property
    def peers(self) -> PeerClient:
        return self._peers

    async def led_here(self, broker_id: str) -> list[int]:
        await self._claim_logs_here(broker_id)
        records = await self.records.all()
        return [shard for shard, record in records.items() if record.leader == broker_id]

    async def _claim_logs_here(self, broker_id: str) -> None:
        """A shard whose log is in this data dir (a standalone run's shard 0, or a data
        dir that led shards before) is this broker's: taken if nobody leads it, and a
        ShardLogConflictError if another broker does, unless the log is a copy of
        that shard's log in this cluster (it led the shard here before: the cluster's
        log is the truth, loaded again should the shard come back)."""
        records = self.records
        for key, _ in list(self._local.scan_prefix(COORDINATOR_DB, "sequence:")):
            shard = int(key.removeprefix("sequence:"))
            if shard >= records.count:
                raise ShardLogConflictError(
                    f"this data dir holds the log of transaction coordinator shard {shard}, "
                    f"but cluster {records.cluster} has {records.count} shards; "
                    "start this broker in its own cluster or with a new data dir"
                )
            record = await records.place_on_self(shard, broker_id)
            if record.leader != broker_id and not self._copied_here(shard):
                raise ShardLogConflictError(
                    f"this data dir holds the log of transaction coordinator shard {shard} "
                    f"(transactions this broker coordinated before it joined cluster "
                    f"{records.cluster}), and broker {record.leader} leads that shard "
                    "there: two logs of one shard would give two transactions one id. "
                    "Start this broker with a new data dir, or in its own cluster"
                )

    def _copied_key(self, shard: int) -> str:
        return f"{_COPIED_PREFIX}{self.records.cluster}:{shard}"

    def _copied_here(self, shard: int) -> bool:
        return self._local.get(BROKER_DB, self._copied_key(shard)) is not None

    async def open_log(
        self, shard: int, broker_id: str, on_fenced: Callable[[int], None]
    ) -> CoordinatorLog:
        records = self.records
        # Taken again at start (a new epoch: a copy of this broker still running from
        # the same record, say a paused process on a lost disk, is fenced), unless
        # this broker has just placed or taken it.
        found = records.taken_here(shard)
        if found is None or found[0].leader != broker_id:
            found = await records.take(shard, broker_id, lambda r: r.leader == broker_id)
        record, version = found
        if record.leader != broker_id:
            raise CoordinatorFencedError(
                f"transaction coordinator shard {shard} was taken by broker {record.leader}"
            )
        prefix = shard_log.shard_key_prefix(shard)
        loaded = await shard_log.load(records.store, records.cluster, shard, prefix, self._local)
        shard_log_ = shard_log.ShardLog(
            records.store, records.cluster, shard, prefix, records.path(shard), version, on_fenced
        )
        if not loaded:
            # The cluster has no log of the shard yet: the one this data dir kept (a
            # run alone, or one from before logs were kept in the cluster) goes there.
            shard_log.upload(shard_log_, self._local, shard, prefix)
            await shard_log_.flushed()
        if not self._copied_here(shard):
            self._local.put(BROKER_DB, self._copied_key(shard), b"1")
            self._local.sync()
        log.info(
            "coordinator shard %d: led here at epoch %d (%d records in its log)",
            shard,
            record.epoch,
            loaded,
        )
        return shard_log_

    async def take_over(self, shard: int, broker_id: str, gone: str) -> str:
        def leader_gone(record: OwnershipRecord) -> bool:
            return record.leader == gone and self.liveness.live_broker(gone) is None

        record, _ = await self.records.take(shard, broker_id, leader_gone)
        if record.leader == broker_id:
            log.info("coordinator shard %d: taken over from broker %s", shard, gone)
        return record.leader

    def successor(self, shard: int) -> str:
        live = sorted(info.broker_id for info in self.liveness.live_brokers())
        return live[shard % len(live)] if live else ""

    async def hand_over(self, shard: int, broker_id: str) -> str:
        others = sorted(
            info.broker_id for info in self.liveness.live_brokers() if info.broker_id != broker_id
        )
        if not others:
            return ""
        led = {broker: 0 for broker in others}
        for leader in (await self.placed(fresh=True)).values():
            if leader in led:
                led[leader] += 1
        # The least loaded; among equals, one that differs by shard, so a stopping
        # broker's shards spread rather than pile onto the first id.
        fewest = min(led.values())
        candidates = [broker for broker in others if led[broker] == fewest]
        successor = candidates[shard % len(candidates)]
        record = await self.records.hand_over(shard, broker_id, successor)
        if record.leader == successor:
            log.info("coordinator shard %d: handed over to broker %s", shard, successor)
        return record.leader

    async def leader(self, shard: int) -> str:
        if not 0 <= shard < self.records.count:
            raise TransactionNotFoundError(
                f"coordinator shard {shard} does not exist: this cluster has "
                f"{self.count} (0..{self.count - 1})"
            )
        record = await self.records.record(shard)
        if record is None:
            raise TransactionNotFoundError(f"coordinator shard {shard} has no transactions")
        return record.leader

    async def take(self, shard: int, broker_id: str) -> str:
        return (await self.records.place_on_self(shard, broker_id)).leader

    async def placed(self, fresh: bool = False) -> dict[int, str]:
        records = await self.records.all(fresh)
        return {shard: record.leader for shard, record in records.items()}

    def forget(self, shard: int) -> None:
        self.records.forget(shard)

    async def follow(self, on_change: Callable[[int, str], None]) -> None:
        records = self.records
        directory = shards_dir(records.cluster)
        watch = await records.store.watch(directory)
        while True:
            try:
                async for notification in watch:
                    shard = int(notification.path.rpartition("/")[2])
                    result = notification.result
                    if result is None:
                        records.forget(shard)
                        on_change(shard, "")
                        continue
                    # Cached as reported: a broker that has closed its store (it is
                    # stopping) still names a shard's new leader.
                    record = OwnershipRecord.from_json(result.value)
                    records.seen(shard, record, result.stat.version)
                    on_change(shard, record.leader)
                return  # the store closed
            except WatchOverflow:
                watch = await records.store.watch(directory)
                for shard in range(records.count):
                    records.forget(shard)

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self.liveness.live_broker(broker_id)
