"""The JSON admin endpoints behind the dashboard, against a real broker: every topic's
stats, each topic's stable position and the transaction pinning it, and peeking at a
subscription at either isolation level."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from stableline import InitialPosition, IsolationLevel

TOPIC = "persistent://public/default/ledger-book"
BASE = "/admin/v2/persistent/public/default/ledger-book"
STABLE = "/admin/v3/transactions/stablePosition/public/default/ledger-book"


def _get(broker, path: str):
    return broker.admin(path)


def _error(broker, path: str) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(broker.http_url + path, timeout=10)
    return raised.value.code, json.loads(raised.value.read())["reason"]


@pytest.fixture
def stalled(client):
    """A topic with a READ_COMMITTED and a READ_UNCOMMITTED subscription, one committed
    message, then an open transaction's message, then a plain message behind it."""
    for name, level in (
        ("business", IsolationLevel.READ_COMMITTED),
        ("monitoring", IsolationLevel.READ_UNCOMMITTED),
    ):
        client.subscribe(
            TOPIC, name, isolation_level=level, initial_position=InitialPosition.Earliest
        ).close()
    producer = client.create_producer(TOPIC)
    first = producer.send(b"before")
    txn = client.new_transaction()
    in_txn = producer.send(b"inside", txn=txn)
    behind = producer.send(b"behind")
    return txn, first, in_txn, behind


def test_broker_stats_lists_every_topic_under_its_namespace_with_rates(broker, client):
    client.create_producer("alpha").send(b"a")
    client.create_producer("persistent://acme/payments/beta").send(b"b")
    nested = _get(broker, "/admin/v2/broker-stats/topics")
    alpha = nested["public/default"]["0x00000000_0xffffffff"]["persistent"][
        "persistent://public/default/alpha"
    ]
    beta = nested["acme/payments"]["0x00000000_0xffffffff"]["persistent"][
        "persistent://acme/payments/beta"
    ]
    assert alpha["msgInCounter"] == beta["msgInCounter"] == 1
    for stats in (alpha, beta):
        assert {"msgRateIn", "msgRateOut", "msgThroughputOut"} <= stats.keys()
        assert stats["transactionBuffer"]["stableLagEntries"] == 0


def test_stable_position_names_the_open_transaction_that_pins_it(broker, client, stalled):
    txn, _first, in_txn, _behind = stalled
    document = _get(broker, STABLE)
    assert document["stableLagEntries"] == 2  # the transaction's entry and the one behind it
    assert document["stableLagMs"] >= 0
    assert document["maxReadPosition"] == f"{in_txn.ledger_id}:{in_txn.entry_id - 1}"
    pinned = document["pinnedBy"]
    assert pinned["txnId"] == f"{txn.id[0]}:{txn.id[1]}"
    assert pinned["status"] == "OPEN"
    assert pinned["firstPosition"] == f"{in_txn.ledger_id}:{in_txn.entry_id}"
    assert pinned["ageMs"] >= 0 and pinned["producedPartitions"] == [TOPIC]
    assert pinned["txnId"] in document["reason"]
    assert document["readCommittedSubscriptions"] == ["business"]
    (listed,) = _get(broker, "/admin/v3/transactions/stablePositions")
    moving = {"stableLagMs", "pinnedBy"}  # ages grow between the two requests
    assert {k: v for k, v in listed.items() if k not in moving} == {
        k: v for k, v in document.items() if k not in moving
    }
    assert listed["pinnedBy"]["txnId"] == pinned["txnId"]


def test_stable_position_is_released_when_the_pinning_transaction_commits(broker, client, stalled):
    txn, *_ = stalled
    txn.commit()
    document = _get(broker, STABLE)
    assert document["pinnedBy"] is None and document["reason"] is None
    assert document["stableLagEntries"] == document["stableLagMs"] == 0
    assert document["maxReadPosition"] == document["lastConfirmedEntry"]


def test_stable_positions_list_the_longest_waiting_topic_first(broker, client, stalled):
    client.create_producer("calm").send(b"x")
    topics = [d["topic"] for d in _get(broker, "/admin/v3/transactions/stablePositions")]
    assert topics == [TOPIC, "persistent://public/default/calm"]


def _peek(broker, level: str | None = None, subscription: str = "business", count: int = 10):
    query = f"?count={count}" + (f"&isolationLevel={level}" if level else "")
    return _get(broker, f"{BASE}/subscription/{subscription}/peek{query}")


def test_peek_read_committed_stops_at_the_stable_position(broker, client, stalled):
    _txn, first, _in_txn, _behind = stalled
    peeked = _peek(broker, "READ_COMMITTED")
    assert peeked["isolationLevel"] == "READ_COMMITTED"
    assert [m["payload"] for m in peeked["messages"]] == ["before"]
    assert peeked["messages"][0]["messageId"] == str(first)
    assert peeked["messages"][0]["visibleToReadCommitted"] is True
    assert peeked["entriesAfterBound"] == 2


def test_peek_read_uncommitted_shows_the_open_transactions_messages_labelled(
    broker, client, stalled
):
    txn, _first, in_txn, _behind = stalled
    peeked = _peek(broker, "read_uncommitted")
    messages = {m["payload"]: m for m in peeked["messages"]}
    assert list(messages) == ["before", "inside", "behind"]
    inside = messages["inside"]
    assert inside["messageId"] == str(in_txn)
    assert inside["txnId"] == f"{txn.id[0]}:{txn.id[1]}" and inside["txnState"] == "OPEN"
    assert inside["visibleToReadCommitted"] is False
    assert messages["behind"]["txnId"] is None
    assert messages["behind"]["visibleToReadCommitted"] is False
    assert peeked["entriesAfterBound"] == 0


def test_peek_defaults_to_the_subscriptions_own_level(broker, client, stalled):
    assert _peek(broker)["isolationLevel"] == "READ_COMMITTED"
    assert _peek(broker, subscription="monitoring")["isolationLevel"] == "READ_UNCOMMITTED"


def test_peek_leaves_out_aborted_messages_at_read_committed_only(broker, client):
    client.subscribe(TOPIC, "business", initial_position=InitialPosition.Earliest).close()
    producer = client.create_producer(TOPIC)
    txn = client.new_transaction()
    producer.send(b"rolled-back", txn=txn)
    txn.abort()
    producer.send(b"after")
    committed = _peek(broker, "READ_COMMITTED")
    assert [m["payload"] for m in committed["messages"]] == ["after"]
    uncommitted = _peek(broker, "READ_UNCOMMITTED")["messages"]
    assert [(m["payload"], m["txnState"]) for m in uncommitted] == [
        ("rolled-back", "ABORTED"),
        ("after", None),
    ]


def test_peek_does_not_move_the_cursor_and_skips_acknowledged_messages(broker, client):
    consumer = client.subscribe(
        TOPIC, "business", initial_position=InitialPosition.Earliest, ack_grouping_time_ms=0
    )
    producer = client.create_producer(TOPIC)
    for i in range(3):
        producer.send(f"m{i}".encode(), properties={"n": str(i)}, partition_key=f"k{i}")
    consumer.acknowledge(consumer.receive(5000))
    peeked = _peek(broker, count=2)["messages"]
    assert [(m["payload"], m["key"], m["properties"]) for m in peeked] == [
        ("m1", "k1", {"n": "1"}),
        ("m2", "k2", {"n": "2"}),
    ]
    assert _peek(broker, count=1)["messages"][0]["payload"] == "m1"
    assert consumer.receive(5000).data() == b"m1"


def test_peek_shows_binary_payloads_as_base64(broker, client):
    client.subscribe(TOPIC, "business", initial_position=InitialPosition.Earliest).close()
    client.create_producer(TOPIC).send(b"\xff\x00\xfe")
    (message,) = _peek(broker)["messages"]
    assert (message["payload"], message["payloadEncoding"]) == ("/wD+", "base64")


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("?isolationLevel=SERIALIZABLE", 400, "isolationLevel must be"),
        ("?count=0", 400, "count must be"),
        ("?count=1000", 400, "count must be"),
        ("?count=ten", 400, "count must be"),
    ],
)
def test_peek_refuses_bad_parameters_clearly(broker, client, query, status, says):
    client.subscribe(TOPIC, "business").close()
    code, reason = _error(broker, f"{BASE}/subscription/business/peek{query}")
    assert code == status and says in reason
    with urllib.request.urlopen(broker.http_url + "/admin/v2/brokers/health") as response:
        assert response.read() == b"ok"  # the broker stays up


def test_peek_of_unknown_subscription_or_topic_is_404(broker, client):
    client.subscribe(TOPIC, "business").close()
    code, reason = _error(broker, f"{BASE}/subscription/nobody/peek")
    assert code == 404 and "nobody" in reason
    code, _reason = _error(
        broker, "/admin/v2/persistent/public/default/nowhere/subscription/x/peek"
    )
    assert code == 404
    code, _reason = _error(broker, "/admin/v3/transactions/stablePosition/public/default/nowhere")
    assert code == 404


def _peak_rss_mb(broker) -> float:
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def _produce_one_entry(broker, topic: str, payload: bytes, count: int) -> None:
    import grpc

    from stableline._proto import broker_pb2 as pb
    from stableline._proto import broker_pb2_grpc

    requests = [
        pb.ProduceRequest(open=pb.ProducerOpen(topic=topic)),
        pb.ProduceRequest(
            send=pb.ProducerSend(
                sequence_id=1, metadata=pb.EntryMetadata(num_messages=count), payload=payload
            )
        ),
    ]
    with grpc.insecure_channel(broker.service_url) as channel:
        responses = list(broker_pb2_grpc.BrokerStub(channel).Produce(iter(requests), timeout=60))
    assert responses[-1].HasField("receipt"), responses[-1]


def test_peek_and_position_n_decode_only_the_messages_they_show(broker, client):
    """One entry of 2.6 million empty messages: a peek of one message decodes one (the
    whole batch would take gigabytes), position/1 shows the first 100 and says so."""
    from stableline.wire import plain_prefix

    count = 2_600_000
    client.subscribe("millions", "sub", initial_position=InitialPosition.Earliest).close()
    _produce_one_entry(broker, "millions", plain_prefix(0) * count, count)
    client.create_producer("millions").send(b"after")
    before = _peak_rss_mb(broker)
    base = "/admin/v2/persistent/public/default/millions/subscription/sub"
    peeked = _get(broker, base + "/peek?count=1")
    assert [m["messageId"] for m in peeked["messages"]] == ["0:0:0"]
    assert peeked["messages"][0]["size"] == 0
    document = _get(broker, base + "/position/1")
    assert document["numMessages"] == count
    assert len(document["messages"]) == 100 and document["messagesTruncated"] is True
    second = _get(broker, base + "/position/2")
    assert second["messagesTruncated"] is False
    assert [m["payload"] for m in second["messages"]] == ["after"]
    # Decoding the batch whole took over a gigabyte; message by message, next to nothing.
    assert _peak_rss_mb(broker) - before < 200
