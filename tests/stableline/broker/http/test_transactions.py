"""Transaction admin on Pulsar's paths (stableline/broker/http/transactions.py and
coordinatorStats), against a real broker."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from stableline import InitialPosition

TRANSACTIONS = "/admin/v3/transactions"


def _get(broker, path: str) -> tuple[int, object]:
    """(status, JSON) of a GET; error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_transaction_metadata_by_most_and_least_bits_is_the_txn_id_document(broker, client):
    txn = client.new_transaction()
    most, least = txn.id
    status, by_path = _get(broker, f"{TRANSACTIONS}/transactionMetadata/{most}/{least}")
    assert status == 200
    assert (by_path["txnId"], by_path["status"]) == (f"{most}:{least}", "OPEN")
    _status, by_query = _get(broker, f"{TRANSACTIONS}/transactionMetadata?txnId={most}:{least}")
    assert by_path.keys() == by_query.keys()
    assert by_path["openTimestamp"] == by_query["openTimestamp"]
    txn.commit()
    assert _get(broker, f"{TRANSACTIONS}/transactionMetadata/{most}/{least}")[1]["status"] == (
        "COMMITTED"
    )


@pytest.mark.parametrize(
    ("most", "least", "status"),
    [("0", "999999", 404), ("x", "1", 400), ("0", "-1", 400), ("0", str(2**64), 400)],
)
def test_transaction_metadata_by_bits_refuses_bad_or_unknown_ids(broker, most, least, status):
    code, body = _get(broker, f"{TRANSACTIONS}/transactionMetadata/{most}/{least}")
    assert code == status, body
    assert body["reason"]


def test_slow_transactions_are_the_open_ones_older_than_the_timeout(broker, client, wait):
    old = client.new_transaction()
    old_id = f"{old.id[0]}:{old.id[1]}"
    metadata = f"{TRANSACTIONS}/transactionMetadata/{old.id[0]}/{old.id[1]}"
    wait(lambda: _get(broker, metadata)[1]["ageMs"] > 600, message="the first txn aged 600 ms")
    young = client.new_transaction()
    ended = client.new_transaction()
    ended.commit()
    status, slow = _get(broker, f"{TRANSACTIONS}/slowTransactions/500")
    assert status == 200
    assert list(slow) == [old_id]
    assert slow[old_id]["status"] == "OPEN"
    by_query = _get(broker, f"{TRANSACTIONS}/slowTransactions?timeout=500")[1]
    assert list(by_query) == [old_id]
    everything = _get(broker, f"{TRANSACTIONS}/slowTransactions/0")[1]
    assert set(everything) == {old_id, f"{young.id[0]}:{young.id[1]}"}
    old.abort()
    young.abort()
    assert _get(broker, f"{TRANSACTIONS}/slowTransactions/0") == (200, {})


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/slowTransactions/soon", 400),
        ("/slowTransactions/-5", 400),
        ("/slowTransactions", 400),
        ("/slowTransactions/10?coordinatorId=7", 404),
    ],
)
def test_slow_transactions_refuse_a_bad_timeout_or_another_coordinator(broker, path, status):
    code, body = _get(broker, TRANSACTIONS + path)
    assert code == status, body
    assert body["reason"]


def test_pending_ack_stats_show_what_a_subscription_holds_for_open_transactions(broker, client):
    consumer = client.subscribe("held", "audit", initial_position=InitialPosition.Earliest)
    producer = client.create_producer("held")
    for i in range(3):
        producer.send(f"m{i}".encode())
    txn = client.new_transaction()
    received = [consumer.receive(5000) for _ in range(2)]
    for message in received:
        consumer.acknowledge(message, txn=txn)
    path = f"{TRANSACTIONS}/pendingAckStats/public/default/held/audit"
    status, held = _get(broker, path)
    assert status == 200
    assert held["state"] == "Ready"
    assert held["ongoingTxnSize"] == 1 and held["pendingAckMessages"] == 2
    [pending] = held["pendingAcks"]
    assert pending["txnId"] == f"{txn.id[0]}:{txn.id[1]}"
    assert pending["messageIds"] == [str(m.message_id()) for m in received]
    assert set(held["lowWaterMarks"]) == {"0"}
    assert 0 < held["recoverStartTime"] <= held["recoverEndTime"]
    txn.commit()
    after = _get(broker, path)[1]
    assert (after["ongoingTxnSize"], after["pendingAcks"]) == (0, [])


def test_pending_ack_stats_of_an_unknown_topic_or_subscription_is_404(broker, client):
    client.subscribe("known", "audit")
    assert _get(broker, f"{TRANSACTIONS}/pendingAckStats/public/default/known/other")[0] == 404
    assert _get(broker, f"{TRANSACTIONS}/pendingAckStats/public/default/absent/audit")[0] == 404


def test_coordinator_stats_have_pulsars_fields_and_keep_their_own(broker, client):
    txn = client.new_transaction()
    before_ms = int(time.time() * 1000)
    status, stats = _get(broker, f"{TRANSACTIONS}/coordinatorStats")
    assert status == 200
    assert stats["state"] == "Ready"
    assert stats["leastSigBits"] >= txn.id[1]
    assert stats["lowWaterMark"] == txn.id[1] - 1
    assert stats["ongoingTxnSize"] == 1 == stats["openTxns"]
    assert 0 < stats["recoverStartTime"] <= stats["recoverEndTime"] <= before_ms
    for kept in ("coordinatorId", "committedCount", "abortedCount", "openTransactions"):
        assert kept in stats, kept
    txn.abort()
