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
- Standalone nothing calls another broker: `peers` is never asked for (asserted).
"""

from __future__ import annotations

from typing import Protocol

from managed_ledger import LocalStore
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.txn.coordinator_errors import ShardLogConflictError
from stableline.broker.txn.coordinator_shards import ShardRecords
from stableline.metadata import BrokerInfo
from txnbuffer import TransactionNotFoundError
from txnbuffer.coordinator import COORDINATOR_DB


class Liveness(Protocol):
    """Whether a broker is live (the cluster's TopicOwnership answers it)."""

    def live_broker(self, broker_id: str) -> BrokerInfo | None: ...


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

    async def placed(self) -> dict[int, str]:
        """Every shard some broker leads -> its leader's id."""
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

    async def placed(self) -> dict[int, str]:
        return {}

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
        ShardLogConflictError if another broker does."""
        records = self.records
        for key, _ in self._local.scan_prefix(COORDINATOR_DB, "sequence:"):
            shard = int(key.removeprefix("sequence:"))
            if shard >= records.count:
                raise ShardLogConflictError(
                    f"this data dir holds the log of transaction coordinator shard {shard}, "
                    f"but cluster {records.cluster} has {records.count} shards; "
                    "start this broker in its own cluster or with a new data dir"
                )
            record = await records.place_on_self(shard, broker_id)
            if record.leader != broker_id:
                raise ShardLogConflictError(
                    f"this data dir holds the log of transaction coordinator shard {shard} "
                    f"(transactions this broker coordinated before it joined cluster "
                    f"{records.cluster}), and broker {record.leader} leads that shard "
                    "there: two logs of one shard would give two transactions one id. "
                    "Start this broker with a new data dir, or in its own cluster"
                )

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

    async def placed(self) -> dict[int, str]:
        return {shard: record.leader for shard, record in (await self.records.all()).items()}

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self.liveness.live_broker(broker_id)
