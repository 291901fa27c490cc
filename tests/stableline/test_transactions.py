"""Transactions through a real broker: both isolation levels on one topic, multi-topic
commits, timeouts, late appends, transactional acks, admin views, bad input."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

import stableline
from stableline import ConsumerType, InitialPosition, IsolationLevel, MessageId
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc

EARLIEST = InitialPosition.Earliest
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


def _receive_all(consumer, timeout_ms: int = 300) -> list[bytes]:
    values = []
    while True:
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except stableline.Timeout:
            return values
        consumer.acknowledge(message)
        values.append(message.data())


def _get(broker, path: str):
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Shared])
def test_both_isolation_levels_read_one_topic_at_once(client, consumer_type):
    committed = client.subscribe(
        "levels", "business", consumer_type=consumer_type, initial_position=EARLIEST
    )
    uncommitted = client.subscribe(
        "levels",
        "monitor",
        consumer_type=consumer_type,
        initial_position=EARLIEST,
        isolation_level=RU,
    )
    producer = client.create_producer("levels")
    producer.send(b"m1")
    txn = client.new_transaction()
    producer.send(b"m2", txn=txn)
    producer.send(b"m3")
    assert _receive_all(committed) == [b"m1"]
    seen = [uncommitted.receive(5000) for _ in range(3)]
    assert [m.data() for m in seen] == [b"m1", b"m2", b"m3"]
    assert seen[1].txn_id() == txn.id and seen[0].txn_id() is None
    txn.commit()
    assert committed.receive(5000).data() == b"m2"
    assert committed.receive(5000).data() == b"m3"
    aborted = client.new_transaction()
    producer.send(b"a1", txn=aborted)
    producer.send(b"m4")
    aborted.abort()
    assert _receive_all(committed) == [b"m4"]
    assert [uncommitted.receive(5000).data() for _ in range(2)] == [b"a1", b"m4"]


def test_interleaved_transactions_release_in_log_order(client):
    consumer = client.subscribe("interleaved", "sub", initial_position=EARLIEST)
    producer = client.create_producer("interleaved")
    first, second = client.new_transaction(), client.new_transaction()
    producer.send(b"t1-a", txn=first)
    producer.send(b"t2-a", txn=second)
    producer.send(b"t1-b", txn=first)
    second.commit()
    assert _receive_all(consumer) == []  # the older transaction still pins the stable position
    first.commit()
    assert _receive_all(consumer) == [b"t1-a", b"t2-a", b"t1-b"]


def test_a_transaction_over_two_topics_is_all_or_nothing(client):
    orders = client.subscribe("orders", "sub", initial_position=EARLIEST)
    payments = client.subscribe("payments", "sub", initial_position=EARLIEST)
    to_orders, to_payments = client.create_producer("orders"), client.create_producer("payments")
    txn = client.new_transaction()
    to_orders.send(b"order-1", txn=txn)
    to_payments.send(b"payment-1", txn=txn)
    assert _receive_all(orders) == [] and _receive_all(payments) == []
    txn.commit()
    assert _receive_all(orders) == [b"order-1"]
    assert _receive_all(payments) == [b"payment-1"]
    txn = client.new_transaction()
    to_orders.send(b"order-2", txn=txn)
    to_payments.send(b"payment-2", txn=txn)
    txn.abort()
    to_orders.send(b"order-3")
    to_payments.send(b"payment-3")
    assert _receive_all(orders) == [b"order-3"]
    assert _receive_all(payments) == [b"payment-3"]


def test_a_timed_out_transaction_is_aborted_and_unblocks_readers(client, broker, wait):
    consumer = client.subscribe("timeout", "sub", initial_position=EARLIEST)
    producer = client.create_producer("timeout")
    txn = client.new_transaction(timeout_ms=300)
    producer.send(b"never", txn=txn)
    producer.send(b"after")
    wait(
        lambda: (
            _get(
                broker, f"/admin/v3/transactions/transactionMetadata?txnId={txn.id[0]}:{txn.id[1]}"
            )["status"]
            == "ABORTED"
        ),
        10,
        "the transaction to time out",
    )
    assert _receive_all(consumer) == [b"after"]
    with pytest.raises(stableline.TransactionEnded):
        txn.commit()


def test_late_append_to_an_ended_transaction_is_refused_and_writes_nothing(client, broker):
    producer = client.create_producer("late")
    txn = client.new_transaction()
    producer.send(b"in", txn=txn)
    txn.commit()
    before = client.get_last_message_id("late")
    with pytest.raises(stableline.TransactionEnded):
        producer.send(b"late", txn=txn)
    # Also when a client does not know the transaction ended (raw protocol).
    channel = grpc.insecure_channel(broker.service_url)
    stub = broker_pb2_grpc.BrokerStub(channel)
    metadata = pb.EntryMetadata(
        num_messages=1, txn_id=pb.TxnId(most_bits=txn.id[0], least_bits=txn.id[1])
    )
    payload = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"late")]).SerializeToString()
    responses = list(
        stub.Produce(
            iter(
                [
                    pb.ProduceRequest(open=pb.ProducerOpen(topic="late")),
                    pb.ProduceRequest(
                        send=pb.ProducerSend(sequence_id=1, metadata=metadata, payload=payload)
                    ),
                ]
            )
        )
    )
    channel.close()
    assert responses[-1].error.code == "TransactionEnded"
    assert client.get_last_message_id("late") == before


def test_transactional_ack_takes_effect_on_commit_and_is_dropped_on_abort(client, broker):
    producer = client.create_producer("txn-ack")
    for value in (b"a", b"b"):
        producer.send(value)
    consumer = client.subscribe(
        "txn-ack",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        ack_grouping_time_ms=0,  # the plain ack below is confirmed when it returns
    )
    first, second = consumer.receive(5000), consumer.receive(5000)
    aborted = client.new_transaction()
    consumer.acknowledge(first, txn=aborted)
    committed = client.new_transaction()
    consumer.acknowledge(second, txn=committed)
    with pytest.raises(stableline.InvalidMessageId, match="open transaction"):
        consumer.acknowledge(second, txn=aborted)

    def backlog() -> int:
        stats = _get(broker, "/admin/v2/persistent/public/default/txn-ack/stats")
        return stats["subscriptions"]["sub"]["msgBacklog"]

    assert backlog() == 2
    committed.commit()
    assert backlog() == 1
    aborted.abort()
    again = consumer.receive(5000)
    assert again.data() == b"a"
    consumer.acknowledge(again)
    assert backlog() == 0


def test_a_committed_transactional_ack_survives_a_kill_right_after_the_commit(broker):
    """The commit's answer means its acks are durable: the coordinator completes a
    transaction only once the cursors holding its acks are written."""
    with stableline.Client(broker.service_url) as client:
        client.create_producer("txn-ack-kill").send(b"once")
        consumer = client.subscribe("txn-ack-kill", "sub", initial_position=EARLIEST)
        txn = client.new_transaction()
        consumer.acknowledge(consumer.receive(5000), txn=txn)
        txn.commit()
        broker.kill()
    broker.start()
    stats = _get(broker, "/admin/v2/persistent/public/default/txn-ack-kill/stats")
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0


def test_an_open_transaction_survives_a_restart_and_commits_after_it(broker):
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer("restart-txn")
        txn = client.new_transaction(timeout_ms=120_000)
        producer.send(b"t", txn=txn)
        producer.send(b"plain")
        txn_id = txn.id
    broker.restart()
    with stableline.Client(broker.service_url) as client:
        consumer = client.subscribe("restart-txn", "sub", initial_position=EARLIEST)
        assert _receive_all(consumer) == []
        stats = _get(
            broker, "/admin/v3/transactions/transactionBufferStats/public/default/restart-txn"
        )
        assert stats["ongoingTxnSize"] == 1
        assert stats["oldestOngoingTxn"]["txnId"] == f"{txn_id[0]}:{txn_id[1]}"
        channel = grpc.insecure_channel(broker.service_url)
        state = (
            broker_pb2_grpc.BrokerStub(channel)
            .EndTransaction(
                pb.EndTransactionRequest(
                    txn_id=pb.TxnId(most_bits=txn_id[0], least_bits=txn_id[1]),
                    action=pb.TXN_ACTION_COMMIT,
                )
            )
            .state
        )
        channel.close()
        assert state == "COMMITTED"
        assert _receive_all(consumer) == [b"t", b"plain"]


def test_reader_filters_aborted_transactions_with_the_fetched_list(client):
    producer = client.create_producer("fetch-aborts")
    for round_ in range(3):
        txn = client.new_transaction()
        producer.send(f"x{round_}".encode(), txn=txn)
        producer.send(f"p{round_}".encode())
        txn.abort() if round_ % 2 == 0 else txn.commit()
    committed = client.create_reader("fetch-aborts", MessageId.earliest, RC)
    values = []
    while committed.has_message_available():
        values.append(committed.read_next(5000).data())
    assert values == [b"p0", b"x1", b"p1", b"p2"]
    everything = client.create_reader("fetch-aborts", MessageId.earliest, RU)
    values = []
    while everything.has_message_available():
        values.append(everything.read_next(5000).data())
    assert values == [b"x0", b"p0", b"x1", b"p1", b"x2", b"p2"]


def test_admin_shows_transaction_buffer_and_metadata(client, broker):
    producer = client.create_producer("observed")
    txn = client.new_transaction()
    producer.send(b"open", txn=txn)
    stats = _get(broker, "/admin/v3/transactions/transactionBufferStats/public/default/observed")
    assert stats["state"] == "Ready"
    assert stats["ongoingTxnSize"] == 1
    assert stats["maxReadPosition"] != stats["lastConfirmedEntry"]
    for field in ("abortedTxnSize", "lowWaterMarks", "recoveryTimeMs", "replayedEntries"):
        assert field in stats
    metadata = _get(
        broker, f"/admin/v3/transactions/transactionMetadata?txnId={txn.id[0]}:{txn.id[1]}"
    )
    assert metadata["status"] == "OPEN"
    assert metadata["producedPartitions"] == ["persistent://public/default/observed"]
    coordinator = _get(broker, "/admin/v3/transactions/coordinatorStats")
    assert coordinator["openTransactions"][0]["txnId"] == f"{txn.id[0]}:{txn.id[1]}"
    metrics = urllib.request.urlopen(broker.http_url + "/metrics", timeout=5).read().decode()
    assert (
        'stableline_txn_buffer_ongoing{topic="persistent://public/default/observed"} 1.0' in metrics
    )
    assert (
        'stableline_txn_buffer_stable_lag_entries{topic="persistent://public/default/observed"} 1.0'
        in metrics
    )
    txn.abort()
    stats = _get(broker, "/admin/v3/transactions/transactionBufferStats/public/default/observed")
    assert stats["ongoingTxnSize"] == 0 and stats["abortedTxnSize"] == 1
    assert stats["maxReadPosition"] == stats["lastConfirmedEntry"]


def test_bad_transaction_requests_get_typed_errors(client, broker):
    for timeout_ms in (0, -5):
        with pytest.raises(stableline.InvalidArgument, match="timeout"):
            client.new_transaction(timeout_ms=timeout_ms)
    txn = client.new_transaction()
    txn.commit()
    with pytest.raises(stableline.TransactionEnded):
        txn.commit()
    with pytest.raises(stableline.TransactionEnded):
        txn.abort()
    channel = grpc.insecure_channel(broker.service_url)
    stub = broker_pb2_grpc.BrokerStub(channel)
    with pytest.raises(grpc.RpcError) as raised:
        stub.EndTransaction(
            pb.EndTransactionRequest(txn_id=pb.TxnId(most_bits=0, least_bits=999_999))
        )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "not known" in raised.value.details()
    with pytest.raises(grpc.RpcError) as raised:
        stub.EndTransaction(
            pb.EndTransactionRequest(txn_id=pb.TxnId(most_bits=0, least_bits=1), action=9)
        )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    with pytest.raises(ValueError, match="unknown isolation level"):
        client.subscribe("t", "s", isolation_level=IsolationLevel.parse("read_dirty"))
    with pytest.raises(urllib.error.HTTPError) as http_error:
        _get(broker, "/admin/v3/transactions/transactionMetadata?txnId=nope")
    assert http_error.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as http_error:
        _get(broker, "/admin/v3/transactions/transactionMetadata?txnId=0:424242")
    assert http_error.value.code == 404
    # The broker is still up and serving.
    assert client.create_producer("after-bad").send(b"ok").entry_id == 0


def test_restarts_recover_from_the_snapshot_and_replay_only_the_tail(broker, tmp_path):
    # Snapshots only on clean shutdown here, so what a kill leaves is predictable.
    config = tmp_path / "broker.toml"
    config.write_text("txn_snapshot_interval_s = 3600\n")
    broker.extra_args = ["--config", str(config)]
    broker.restart()
    stats_path = "/admin/v3/transactions/transactionBufferStats/public/default/snap"
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer("snap")
        for round_ in range(4):
            txn = client.new_transaction()
            producer.send(f"t{round_}".encode(), txn=txn)
            producer.send(f"p{round_}".encode())
            txn.abort() if round_ == 1 else txn.commit()
    broker.restart()  # SIGTERM: the buffer snapshots as it closes
    after_stop = _get(broker, stats_path)
    assert after_stop["recoveredFromSnapshot"] is True
    assert after_stop["replayedEntries"] == 0
    assert after_stop["abortedTxnSize"] == 1

    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer("snap")
        txn = client.new_transaction()
        producer.send(b"t4", txn=txn)
        txn.commit()
        producer.send(b"p4")
        before_kill = _get(broker, stats_path)
    broker.kill()  # no snapshot of the last three entries: they are replayed
    broker.start()
    after_kill = _get(broker, stats_path)
    assert after_kill["recoveredFromSnapshot"] is True
    assert after_kill["replayedEntries"] == 3  # t4, its commit marker, p4
    assert after_kill["maxReadPosition"] == before_kill["maxReadPosition"]
    assert after_kill["abortedTxnSize"] == 1

    with stableline.Client(broker.service_url) as client:
        consumer = client.subscribe("snap", "sub", initial_position=EARLIEST)
        assert _receive_all(consumer) == [
            b"t0", b"p0", b"p1", b"t2", b"p2", b"t3", b"p3", b"t4", b"p4"
        ]  # fmt: skip
