"""The HTTP admin API on Pulsar's paths, and /metrics, against a real broker."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from stableline import ConsumerType, InitialPosition, IsolationLevel

BASE = "/admin/v2/persistent/public/default"


def _request(broker, method: str, path: str):
    request = urllib.request.Request(
        broker.http_url + path, headers={"X-Stableline-Request": "test"}, method=method
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        return response.status, (
            json.loads(body)
            if body and response.headers.get_content_type() == "application/json"
            else body
        )


def test_health_answers_ok(broker):
    assert _request(broker, "GET", "/admin/v2/brokers/health") == (200, b"ok")


def test_runtime_says_when_the_broker_and_its_counters_started(broker):
    before_ms = int(time.time() * 1000)
    status, runtime = _request(broker, "GET", "/admin/v2/brokers/runtime")
    assert status == 200
    assert runtime["startedAtMs"] <= before_ms and runtime["uptimeMs"] >= 0
    broker.stop()
    broker.start()
    again = _request(broker, "GET", "/admin/v2/brokers/runtime")[1]
    assert again["startedAtMs"] > runtime["startedAtMs"]
    assert again["version"] == runtime["version"]


def test_topics_can_be_created_listed_and_deleted(broker):
    assert _request(broker, "PUT", BASE + "/made")[0] == 204
    with pytest.raises(urllib.error.HTTPError) as raised:
        _request(broker, "PUT", BASE + "/made")
    assert raised.value.code == 409
    assert _request(broker, "GET", BASE)[1] == ["persistent://public/default/made"]
    assert _request(broker, "DELETE", BASE + "/made")[0] == 204
    assert _request(broker, "GET", BASE)[1] == []
    with pytest.raises(urllib.error.HTTPError) as raised:
        _request(broker, "DELETE", BASE + "/made")
    assert raised.value.code == 404


def test_stats_show_counters_and_each_subscriptions_isolation_level(broker, client):
    business = client.subscribe(
        "bank",
        "business",
        consumer_type=ConsumerType.Shared,
        initial_position=InitialPosition.Earliest,
        ack_grouping_time_ms=0,  # the ack below is in the stats when it returns
    )
    client.subscribe(
        "bank",
        "monitoring",
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        initial_position=InitialPosition.Earliest,
    )
    producer = client.create_producer("bank")
    for i in range(10):
        producer.send(f"m{i}".encode())
    business.acknowledge(business.receive(5000))
    _status, stats = _request(broker, "GET", BASE + "/bank/stats")
    assert stats["msgInCounter"] == 10
    assert stats["bytesInCounter"] >= 20
    for field in (
        "msgRateIn",
        "msgThroughputIn",
        "msgOutCounter",
        "bytesOutCounter",
        "storageSize",
        "averageMsgSize",
    ):
        assert field in stats
    subs = stats["subscriptions"]
    assert subs["business"]["subscriptionIsolationLevel"] == "READ_COMMITTED"
    assert subs["monitoring"]["subscriptionIsolationLevel"] == "READ_UNCOMMITTED"
    assert subs["business"]["type"] == "Shared"
    assert subs["business"]["msgBacklog"] == 9
    assert subs["monitoring"]["msgBacklog"] == 10
    assert subs["business"]["consumers"][0]["availablePermits"] >= 0


def test_internal_stats_show_ledgers_and_cursors(broker, client):
    client.subscribe("internal", "sub", initial_position=InitialPosition.Earliest)
    client.create_producer("internal").send(b"x")
    _status, internal = _request(broker, "GET", BASE + "/internal/internalStats")
    assert internal["numberOfEntries"] == 1
    assert internal["lastConfirmedEntry"] == f"{internal['ledgers'][-1]['ledgerId']}:0"
    assert internal["cursors"]["sub"]["properties"]["isolation_level"] == "READ_COMMITTED"


def test_internal_stats_of_a_topic_with_nothing_written_show_no_ledger(broker):
    assert _request(broker, "PUT", BASE + "/empty")[0] == 204
    _status, internal = _request(broker, "GET", BASE + "/empty/internalStats")
    assert internal["ledgers"] == [] and internal["numberOfEntries"] == 0
    assert internal["currentLedgerEntries"] == 0
    assert internal["lastLedgerCreatedTimestamp"] is None


def test_metrics_are_prometheus_text(broker, client):
    client.create_producer("metered").send(b"x")
    client.subscribe("metered", "sub", isolation_level=IsolationLevel.READ_UNCOMMITTED)
    status, body = _request(broker, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'stableline_in_messages_total{topic="persistent://public/default/metered"} 1.0' in text
    assert 'isolation_level="READ_UNCOMMITTED"' in text


def test_transaction_metadata_takes_and_gives_the_txn_id_as_most_colon_least(broker, client):
    txn = client.new_transaction()
    text = f"{txn.id[0]}:{txn.id[1]}"
    path = "/admin/v3/transactions/transactionMetadata?txnId="
    status, document = _request(broker, "GET", path + text)
    assert (status, document["txnId"], document["status"]) == (200, text, "OPEN")
    for malformed in ("", "nope", f"({txn.id[0]},{txn.id[1]})", f"{text}:0", "-1:1", "+0:1"):
        with pytest.raises(urllib.error.HTTPError) as raised:
            _request(broker, "GET", path + urllib.parse.quote(malformed))
        assert raised.value.code == 400
        reason = json.loads(raised.value.read())["reason"]
        assert "expected 'most:least'" in reason, reason
    txn.abort()
