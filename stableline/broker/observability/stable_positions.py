"""Why READ_COMMITTED readers of a topic wait: its stable position, how far it trails
the LAC, and the open transaction that pins it, as the coordinator describes it.

The transaction buffer knows which transaction is oldest on a topic (its first
entry is where READ_COMMITTED stops); the coordinator knows how old that
transaction is, when it times out and what else it touches. This joins the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dispatcher import IsolationLevel
from stableline.broker.topics.topic import Topic
from txnbuffer import BufferState, TransactionNotFoundError

if TYPE_CHECKING:
    from stableline.broker.txn.coordinators import Coordinators


def _pinning_transaction(topic: Topic, coordinators: Coordinators) -> dict | None:
    buffer = topic.buffer
    for txn_id, first_position in buffer.ongoing.items():
        pinning: dict[str, Any] = {"firstPosition": str(first_position)}
        try:
            pinning.update(coordinators.get(txn_id).describe())
        except TransactionNotFoundError:
            # Left ongoing by an earlier run and not settled yet, or of a shard
            # another broker leads (its leader describes it).
            pinning.update({"txnId": str(txn_id), "status": "UNKNOWN"})
        return pinning
    return None


def _stall_reason(topic: Topic, pinning: dict | None, lag_entries: int) -> str | None:
    if topic.buffer.state is BufferState.INITIALIZING:
        return "the transaction buffer is recovering; READ_COMMITTED reads wait until it is ready"
    if pinning is not None:
        return (
            f"open transaction {pinning['txnId']} ({pinning['status']}) wrote its first entry "
            f"at {pinning['firstPosition']}; READ_COMMITTED reads stop before it until it ends"
        )
    if lag_entries:
        return "entries after the stable position are not yet readable"
    return None


def stable_position(topic: Topic, coordinators: Coordinators) -> dict[str, Any]:
    """One topic's stable position document."""
    buffer = topic.buffer
    lag_entries, lag_ms = buffer.stable_lag()
    pinning = _pinning_transaction(topic, coordinators)
    return {
        "topic": str(topic.name),
        "state": buffer.state.value,
        "maxReadPosition": str(buffer.max_read_position),
        "lastConfirmedEntry": str(topic.ledger.last_confirmed),
        "stableLagEntries": lag_entries,
        "stableLagMs": lag_ms,
        "ongoingTxnSize": len(buffer.ongoing),
        "pinnedBy": pinning,
        "reason": _stall_reason(topic, pinning, lag_entries),
        "readCommittedSubscriptions": sorted(
            name
            for name, subscription in topic.subscriptions.items()
            if subscription.isolation_level is IsolationLevel.READ_COMMITTED
        ),
    }


def stable_positions(topics: list[Topic], coordinators: Coordinators) -> list[dict]:
    """Every topic's document, the ones READ_COMMITTED waits on longest first."""
    documents = [stable_position(topic, coordinators) for topic in topics]
    return sorted(documents, key=lambda d: (-d["stableLagMs"], -d["stableLagEntries"], d["topic"]))
