"""Acks held for transactions led elsewhere (txn/remote_acks.py): recorded, restored
into a just-loaded topic's subscriptions, forgotten once ended; standalone there are
none."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore, TxnId
from stableline.broker.txn.remote_acks import NoRemoteAcks, RemoteAcks

TOPIC = "persistent://public/default/held"
TXN = TxnId(1, 7)


class Subscription:
    """Records what a restore holds again on it."""

    def __init__(self):
        self.held: list = []

    def restore_transaction_acks(self, txn_id, ids) -> None:
        self.held.append((txn_id, ids))


@pytest.fixture
def store(tmp_path):
    opened = LocalStore(tmp_path / "local")
    yield opened
    opened.close()


def test_standalone_restores_and_forgets_nothing_and_records_no_ack():
    acks = NoRemoteAcks()
    assert acks.restore(TOPIC, {"sub": Subscription()}) == []
    acks.forget(TOPIC, "sub", TXN)
    with pytest.raises(AssertionError, match="led here"):
        acks.record(TOPIC, "sub", TXN, [(1, 2, -1)])


def test_a_recorded_ack_is_held_again_until_forgotten(store):
    acks = RemoteAcks(store)
    acks.record(TOPIC, "sub", TXN, [(1, 2, -1)])
    subscription = Subscription()
    assert acks.restore(TOPIC, {"sub": subscription}) == [("sub", TXN, [(1, 2, -1)])]
    assert len(subscription.held) == 1
    acks.forget(TOPIC, "sub", TXN)
    assert acks.restore(TOPIC, {"sub": Subscription()}) == []
