"""The typed data-plane calls a reader and a transaction's owner need, against a real
broker: GetLastMessageId with the topic's ledgers (what Spark plans from) and
GetTransaction (how a client learns how its transaction ended). Both answer what the
admin JSON says, with no JSON."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

import stableline
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline.testing import BrokerProcess

ENTRIES_PER_LEDGER = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("typed") / "data",
        env={"STABLELINE_MAX_ENTRIES_PER_LEDGER": str(ENTRIES_PER_LEDGER)},
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def client(broker) -> Iterator[stableline.Client]:
    with stableline.Client(broker.service_url) as connected:
        yield connected


@pytest.fixture(scope="module")
def stub(broker) -> Iterator[broker_pb2_grpc.BrokerStub]:
    with grpc.insecure_channel(broker.service_url) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


def _admin(broker: BrokerProcess, path: str) -> dict:
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read())


def _text(position: pb.Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def test_last_message_id_lists_the_ledgers_the_admin_lists_only_when_asked(client, broker, stub):
    producer = client.create_producer("layout")
    for i in range(2 * ENTRIES_PER_LEDGER + 2):
        producer.send(f"m{i}".encode())  # one entry each: send waits for its receipt
    topic = "persistent://public/default/layout"
    with_ledgers = stub.GetLastMessageId(
        pb.GetLastMessageIdRequest(topic=topic, include_ledgers=True), timeout=10
    )
    internal = _admin(broker, "/admin/v2/persistent/public/default/layout/internalStats")
    assert [(i.ledger_id, i.entries, i.size_bytes, i.closed) for i in with_ledgers.ledgers] == [
        (i["ledgerId"], i["entries"], i["size"], i["closed"]) for i in internal["ledgers"]
    ]
    assert [i.entries for i in with_ledgers.ledgers][:3] == [4, 4, 2]
    assert _text(with_ledgers.last_confirmed_entry) == internal["lastConfirmedEntry"]
    plain = stub.GetLastMessageId(pb.GetLastMessageIdRequest(topic=topic), timeout=10)
    assert list(plain.ledgers) == []
    assert plain.last_confirmed_entry == with_ledgers.last_confirmed_entry


def test_the_stable_position_stops_before_an_open_transaction_as_the_buffer_says(
    client, broker, stub
):
    producer = client.create_producer("pinned")
    producer.send(b"before")
    txn = client.new_transaction()
    producer.send(b"inside", txn=txn)
    producer.send(b"after")
    request = pb.GetLastMessageIdRequest(
        topic="persistent://public/default/pinned", include_ledgers=True
    )
    response = stub.GetLastMessageId(request, timeout=10)
    buffer = _admin(broker, "/admin/v3/transactions/transactionBufferStats/public/default/pinned")
    assert _text(response.max_read_position) == buffer["maxReadPosition"]
    assert _text(response.last_confirmed_entry) == buffer["lastConfirmedEntry"]
    assert response.max_read_position.entry_id < response.last_confirmed_entry.entry_id
    txn.commit()
    after = stub.GetLastMessageId(request, timeout=10)
    assert after.max_read_position == after.last_confirmed_entry


def test_get_transaction_follows_a_transaction_from_open_to_committed(client, stub):
    before_ms = int(time.time() * 1000)
    txn = client.new_transaction(timeout_ms=30_000)
    request = pb.GetTransactionRequest(txn_id=pb.TxnId(most_bits=txn.id[0], least_bits=txn.id[1]))
    opened = stub.GetTransaction(request, timeout=10)
    assert (opened.txn_id.most_bits, opened.txn_id.least_bits) == txn.id
    assert opened.state == pb.TXN_STATE_OPEN
    assert before_ms <= opened.open_timestamp_ms <= int(time.time() * 1000)
    assert opened.timeout_at_ms == opened.open_timestamp_ms + 30_000
    assert opened.ended_timestamp_ms == 0 and opened.name == ""
    txn.commit()
    ended = stub.GetTransaction(request, timeout=10)
    assert ended.state == pb.TXN_STATE_COMMITTED
    assert ended.ended_timestamp_ms >= opened.open_timestamp_ms


def test_get_transaction_says_aborted_and_names_a_named_transaction(stub):
    opened = stub.NewTransaction(pb.NewTransactionRequest(timeout_ms=30_000, name="nightly"))
    stub.EndTransaction(
        pb.EndTransactionRequest(txn_id=opened.txn_id, action=pb.TXN_ACTION_ABORT), timeout=10
    )
    state = stub.GetTransaction(pb.GetTransactionRequest(txn_id=opened.txn_id), timeout=10)
    assert (state.state, state.name) == (pb.TXN_STATE_ABORTED, "nightly")


def test_get_transaction_of_an_unknown_id_is_not_found_naming_it(stub):
    request = pb.GetTransactionRequest(txn_id=pb.TxnId(most_bits=0, least_bits=987_654))
    with pytest.raises(grpc.RpcError) as raised:
        stub.GetTransaction(request, timeout=10)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "transaction 0:987654 is not known" in raised.value.details()
