"""lastMessageId and a subscription's entry at a position, on Pulsar's paths
(stableline/broker/http/messages.py), against a real broker."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from dispatcher import IsolationLevel as DispatchIsolationLevel
from dispatcher import SubscriptionType
from managed_ledger import EntryHeader, ManagedLedger
from stableline import InitialPosition, IsolationLevel
from stableline.broker.http import messages as http_messages
from stableline.broker.topics.topic import Topic
from stableline.topic_name import TopicName

BASE = "/admin/v2/persistent/public/default"
RU = DispatchIsolationLevel.READ_UNCOMMITTED


def _get(broker, path: str) -> tuple[int, object, dict[str, str]]:
    """(status, JSON, headers) of a GET; error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def test_last_message_id_is_the_last_entry_and_says_the_stable_position(broker, client):
    producer = client.create_producer("ids")
    producer.send(b"first")
    last = producer.send(b"second")
    status, document, _ = _get(broker, BASE + "/ids/lastMessageId")
    assert status == 200
    assert (document["ledgerId"], document["entryId"]) == (last.ledger_id, last.entry_id)
    assert document["partitionIndex"] == -1
    assert document["stablePosition"] == f"{last.ledger_id}:{last.entry_id}"
    txn = client.new_transaction()
    pending = producer.send(b"in a transaction", txn=txn)
    document = _get(broker, BASE + "/ids/lastMessageId")[1]
    assert (document["ledgerId"], document["entryId"]) == (pending.ledger_id, pending.entry_id)
    assert document["stablePosition"] == f"{last.ledger_id}:{last.entry_id}"
    txn.abort()


def test_last_message_id_of_an_unknown_topic_is_404(broker):
    status, body, _ = _get(broker, BASE + "/absent/lastMessageId")
    assert status == 404 and body["reason"]


def test_position_n_is_the_nth_unacknowledged_entry_with_pulsars_headers(broker, client):
    # Acks confirmed as they return (not grouped): position/1 must see m0 acknowledged.
    consumer = client.subscribe(
        "nth", "audit", initial_position=InitialPosition.Earliest, ack_grouping_time_ms=0
    )
    producer = client.create_producer("nth")
    ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(4)]
    consumer.acknowledge(consumer.receive(5000))  # m0
    path = BASE + "/nth/subscription/audit/position/"
    status, first, headers = _get(broker, path + "1")
    assert status == 200
    assert first["messageId"] == f"{ids[1].ledger_id}:{ids[1].entry_id}"
    assert [m["payload"] for m in first["messages"]] == ["m1"]
    assert first["messages"][0]["properties"] == {"i": "1"}
    assert headers["X-Pulsar-Message-ID"] == first["messageId"]
    assert headers["X-Pulsar-producer-name"] == producer.producer_name()
    assert headers["X-Pulsar-num-batch-message"] == "1"
    assert _get(broker, path + "3")[1]["messages"][0]["payload"] == "m3"
    status, body, _ = _get(broker, path + "4")
    assert status == 404 and "fewer than 4" in body["reason"]


def test_position_n_reads_at_the_subscriptions_isolation_level(broker, client):
    client.subscribe("nth-txn", "rc", initial_position=InitialPosition.Earliest)
    client.subscribe(
        "nth-txn",
        "ru",
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        initial_position=InitialPosition.Earliest,
    )
    producer = client.create_producer("nth-txn")
    txn = client.new_transaction()
    producer.send(b"uncommitted", txn=txn)
    producer.send(b"plain")
    path = BASE + "/nth-txn/subscription/{}/position/1"
    assert _get(broker, path.format("ru"))[1]["messages"][0]["payload"] == "uncommitted"
    # READ_COMMITTED stops at the open transaction: nothing it may read yet.
    assert _get(broker, path.format("rc"))[0] == 404
    asked = _get(broker, path.format("rc") + "?isolationLevel=READ_UNCOMMITTED")[1]
    assert asked["txnId"] == f"{txn.id[0]}:{txn.id[1]}"
    txn.commit()
    assert _get(broker, path.format("rc"))[1]["messages"][0]["payload"] == "uncommitted"


@pytest.mark.parametrize(
    ("tail", "status"),
    [("0", 400), ("-1", 400), ("x", 400), ("1?isolationLevel=SOMETIMES", 400)],
)
def test_position_n_refuses_a_bad_position_or_level(broker, client, tail, status):
    client.subscribe("nth-bad", "audit")
    code, body, _ = _get(broker, BASE + "/nth-bad/subscription/audit/position/" + tail)
    assert code == status, body
    assert body["reason"]


def test_position_n_of_an_unknown_subscription_is_404(broker, client):
    client.create_producer("nth-none").send(b"x")
    assert _get(broker, BASE + "/nth-none/subscription/absent/position/1")[0] == 404


def test_examine_message_counts_entries_from_either_end_of_the_log(broker, client):
    producer = client.create_producer("examined")
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    path = BASE + "/examined/examinemessage"
    status, last, headers = _get(broker, path)  # latest, position 1: the last entry
    assert status == 200
    assert last["messageId"] == f"{ids[2].ledger_id}:{ids[2].entry_id}"
    assert headers["X-Pulsar-Message-ID"] == last["messageId"]
    assert (
        _get(broker, path + "?initialPosition=latest&messagePosition=3")[1]["messages"][0][
            "payload"
        ]
        == "m0"
    )
    assert (
        _get(broker, path + "?initialPosition=earliest&messagePosition=2")[1]["messages"][0][
            "payload"
        ]
        == "m1"
    )
    status, body, _ = _get(broker, path + "?initialPosition=earliest&messagePosition=4")
    assert status == 404 and "fewer than 4" in body["reason"]


def test_examine_message_shows_a_transaction_marker_as_pulsar_does(broker, client):
    producer = client.create_producer("examined-txn")
    txn = client.new_transaction()
    producer.send(b"in a transaction", txn=txn)
    txn.commit()
    status, marker, _ = _get(broker, BASE + "/examined-txn/examinemessage")
    assert status == 200
    assert marker["marker"] is True and marker["messages"] == []
    assert marker["txnId"] == f"{txn.id[0]}:{txn.id[1]}"


@pytest.mark.parametrize(
    "query",
    ["?initialPosition=middle", "?messagePosition=0", "?messagePosition=-1", "?messagePosition=x"],
)
def test_examine_message_refuses_a_bad_start_or_position(broker, client, query):
    client.create_producer("examined-bad").send(b"x")
    status, body, _ = _get(broker, BASE + "/examined-bad/examinemessage" + query)
    assert status == 400, body
    assert body["reason"]


async def test_position_n_looks_at_a_bounded_number_of_entries(tmp_path, store, monkeypatch):
    """Acknowledged entries between the mark-delete and the n-th are looked at too;
    one request looks at no more than MAX_POSITION_SCAN_ENTRIES of them."""
    name = TopicName.parse("scan-bound")
    topic = Topic(name, await ManagedLedger.open(str(name), tmp_path / "ledger", store))
    subscription = topic.create_subscription(
        "audit", SubscriptionType.EXCLUSIVE, RU, start_at_earliest=True
    )
    positions = [(await topic.publish(EntryHeader(), b"x"))[0] for _ in range(10)]
    subscription.ack([(position, -1) for position in positions[1:7]])  # 0 stays unacked
    monkeypatch.setattr(http_messages, "MAX_POSITION_SCAN_ENTRIES", 5)
    assert http_messages.nth_unacked_entry(topic, subscription, RU, 1)[0].position == positions[0]
    assert http_messages.nth_unacked_entry(topic, subscription, RU, 2) == (None, 5)
    monkeypatch.setattr(http_messages, "MAX_POSITION_SCAN_ENTRIES", 100)
    entry, scanned = http_messages.nth_unacked_entry(topic, subscription, RU, 2)
    assert (entry.position, scanned) == (positions[7], 8)
    await topic.close()
