"""What subscriptions here hold for transactions whose coordinator shard another broker
leads, kept so that a restart of this broker holds it again.

A local coordinator's own ack records rebuild the holds of its transactions when a
topic loads (transactional_acks.restore_pending_acks); a remote shard's records are
on its leader's disk. So this broker writes its own record of each such ack into its
metadata store (database `broker`, one key per ack under the topic and subscription),
after the leader has recorded it and before the ack is answered, and deletes the
records once the transaction's end is applied here.

Promises:
- `restore(topic)` holds again, in the just-loaded topic's subscriptions, every ack
  recorded here for it, and returns what it restored, so the broker can settle each
  with its transaction's leader: ended there means the end is applied here now (a
  lost end, or its deletion lost with a crash); unknown there means released.
- Costs O(acks of the topic) per load, nothing for a topic without any.
- Records are written with the store's periodic sync, as cursor positions are: a
  record lost with the machine (not the process) leaves its messages unheld after a
  restart, and the leader's end still applies the ack.

Standalone every shard is led here, so there is never such an ack: `NoRemoteAcks`
has nothing to restore or forget and refuses to record one (asserted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Protocol

from dispatcher import Subscription
from managed_ledger import LocalStore, Position, TxnId
from stableline.broker.topics.database import BROKER_DB

_PREFIX = "remote-ack:"


def _topic_prefix(topic: str) -> str:
    return f"{_PREFIX}{topic}\0"


def _txn_prefix(topic: str, subscription: str, txn_id: TxnId) -> str:
    return f"{_topic_prefix(topic)}{subscription}\0{txn_id.most_bits}:{txn_id.least_bits}:"


# (subscription, transaction, message ids) of each ack a topic's load held again.
Restored = list[tuple[str, TxnId, list[tuple[int, int, int]]]]


class HeldRemoteAcks(Protocol):
    """What subscriptions here hold for transactions led elsewhere."""

    def record(
        self, topic: str, subscription: str, txn_id: TxnId, message_ids: list[tuple[int, int, int]]
    ) -> None: ...

    def forget(self, topic: str, subscription: str, txn_id: TxnId) -> None: ...

    def restore(self, topic: str, subscriptions: Mapping[str, Subscription]) -> Restored: ...


class NoRemoteAcks:
    """Standalone: every shard is led here, no ack is held for another broker's."""

    def record(
        self, topic: str, subscription: str, txn_id: TxnId, message_ids: list[tuple[int, int, int]]
    ) -> None:
        raise AssertionError(f"standalone: transaction {txn_id} is led here, not elsewhere")

    def forget(self, topic: str, subscription: str, txn_id: TxnId) -> None:
        return None

    def restore(self, topic: str, subscriptions: Mapping[str, Subscription]) -> Restored:
        return []


class RemoteAcks:
    def __init__(self, store: LocalStore):
        self._store = store

    def record(
        self, topic: str, subscription: str, txn_id: TxnId, message_ids: list[tuple[int, int, int]]
    ) -> None:
        # Unique across restarts: a transaction's acks before and after one never collide.
        key = f"{_txn_prefix(topic, subscription, txn_id)}{time.time_ns():020d}"
        self._store.put(BROKER_DB, key, json.dumps(message_ids).encode())

    def forget(self, topic: str, subscription: str, txn_id: TxnId) -> None:
        """Delete what was recorded for the transaction on this subscription."""
        keys = [
            key
            for key, _ in self._store.scan_prefix(
                BROKER_DB, _txn_prefix(topic, subscription, txn_id)
            )
        ]
        if keys:
            self._store.write_many(BROKER_DB, {}, keys)

    def restore(self, topic: str, subscriptions: Mapping[str, Subscription]) -> Restored:
        """Hold again what is recorded for `topic`; (subscription, txn, ids) of each."""
        restored = []
        prefix = _topic_prefix(topic)
        for key, raw in self._store.scan_prefix(BROKER_DB, prefix):
            subscription_name, txn_text = key[len(prefix) :].split("\0")
            most, least, _sequence = txn_text.split(":")
            txn_id = TxnId(int(most), int(least))
            ids = [tuple(message_id) for message_id in json.loads(raw)]
            subscription = subscriptions.get(subscription_name)
            if subscription is None:
                self.forget(topic, subscription_name, txn_id)
                continue
            subscription.restore_transaction_acks(
                txn_id, [(Position(ledger, entry), batch) for ledger, entry, batch in ids]
            )
            restored.append((subscription_name, txn_id, ids))
        return restored
