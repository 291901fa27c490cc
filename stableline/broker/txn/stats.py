"""The stats document of the transaction coordinator, in Pulsar's field names (HTTP
and gRPC admin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from txnbuffer import TransactionCoordinator

if TYPE_CHECKING:
    from stableline.broker.txn.coordinators import Coordinators

# Pulsar's coordinator state once its log is replayed; the HTTP admin listens only
# after the coordinator recovered, so it never answers before.
COORDINATOR_READY = "Ready"


@dataclass(frozen=True, slots=True)
class RecoveryWindow:
    """When the coordinator's recovery started and ended (ms since the epoch);
    0 and 0 when not recorded, as Pulsar says of a coordinator not started."""

    started_ms: int = 0
    ended_ms: int = 0

    def __post_init__(self) -> None:
        assert 0 <= self.started_ms <= self.ended_ms or self.ended_ms == 0, self


def coordinators_stats(coordinators: Coordinators, recovery: RecoveryWindow) -> dict[str, Any]:
    """The coordinators this broker leads: counts summed over them, the first one's
    own fields (with one shard, that shard's document), and each one's document under
    `coordinators` by shard id."""
    shards = {
        str(shard): coordinator_stats(coordinators.local[shard], recovery)
        for shard in sorted(coordinators.local)
    }
    summed = (
        "openTxns",
        "ongoingTxnSize",
        "clientsWithOpenTxns",
        "endedTxns",
        "committedCount",
        "abortedCount",
        "timedOutCount",
    )
    first = next(iter(shards.values()), {"state": COORDINATOR_READY, "openTransactions": []})
    return {
        **first,
        **{key: sum(doc[key] for doc in shards.values()) for key in summed},
        "openTransactions": [t for doc in shards.values() for t in doc["openTransactions"]],
        "shardCount": coordinators.shard_count,
        "coordinators": shards,
    }


def coordinator_stats(
    coordinator: TransactionCoordinator, recovery: RecoveryWindow
) -> dict[str, Any]:
    """Pulsar's TransactionCoordinatorStats fields beside the coordinator's own."""
    open_transactions = coordinator.list_open()
    return {
        **coordinator.stats(),
        "state": COORDINATOR_READY,
        "leastSigBits": coordinator.last_sequence,
        "lowWaterMark": coordinator.low_watermark,
        "ongoingTxnSize": len(open_transactions),
        "recoverStartTime": recovery.started_ms,
        "recoverEndTime": recovery.ended_ms,
        "openTransactions": [meta.describe() for meta in open_transactions],
    }
