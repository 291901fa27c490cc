"""Disk faults through a real broker process: a full disk, failing fsyncs, and a torn
ledger tail restarted together with a corrupt transaction-buffer snapshot.

The faults come from the broker's `disk-full` / `fsync-fail` failpoints, which put
a FaultyDisk under every ledger (managed_ledger.disk); SIGUSR1 heals it.
"""

from __future__ import annotations

import signal
import threading
import urllib.request

import grpc
import pytest

import stableline
from managed_ledger import LocalStore
from stableline import InitialPosition, IsolationLevel, MessageId
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from txnbuffer.snapshot import SNAPSHOTS_DB

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
WAIT_S = 20.0


def _restart_with(broker, env: dict[str, str]) -> None:
    broker.env = env
    broker.restart()
    broker.env = {}


def _read_all(client, topic: str, level=RC) -> list[bytes]:
    reader = client.create_reader(topic, MessageId.earliest, isolation_level=level)
    values = []
    while reader.has_message_available():
        values.append(reader.read_next(int(WAIT_S * 1000)).data())
    reader.close()
    return values


def _consume(client, topic: str, subscription: str, count: int, level=RC) -> list[bytes]:
    consumer = client.subscribe(
        topic, subscription, initial_position=InitialPosition.Earliest, isolation_level=level
    )
    values = []
    for _ in range(count):
        message = consumer.receive(int(WAIT_S * 1000))
        consumer.acknowledge(message)
        values.append(message.data())
    consumer.close()
    return values


def _end_transaction(broker, txn_id: tuple[int, int], commit: bool) -> str:
    """End a transaction begun by an earlier client, as a coordinator's client would."""
    channel = grpc.insecure_channel(broker.service_url)
    try:
        response = broker_pb2_grpc.BrokerStub(channel).EndTransaction(
            pb.EndTransactionRequest(
                txn_id=pb.TxnId(most_bits=txn_id[0], least_bits=txn_id[1]),
                action=pb.TXN_ACTION_COMMIT if commit else pb.TXN_ACTION_ABORT,
            ),
            timeout=60,
        )
    finally:
        channel.close()
    return response.state


def _heal(broker, wait) -> None:
    broker.signal(signal.SIGUSR1)
    wait(lambda: "failpoints released" in broker.log(), WAIT_S, "the failpoints' release")


def test_full_disk_refuses_sends_keeps_the_topic_readable_and_recovers(broker, wait):
    topic = "disk-full"
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        acked = [f"before-{i}".encode() for i in range(20)]
        for value in acked:
            producer.send(value)
        txn = client.new_transaction(timeout_ms=120_000)
        producer.send(b"in-txn", txn=txn)
    _restart_with(broker, {"STABLELINE_FAILPOINTS": "disk-full"})

    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        for attempt in range(3):
            with pytest.raises(stableline.StorageFull, match="disk is full"):
                producer.send(f"refused-{attempt}".encode())
        stats_path = f"/admin/v2/persistent/public/default/{topic}/internalStats"
        assert broker.admin(stats_path)["state"] == "WriteFailed"
        # A raw producer sees the code in its SendError, and the stream stays open.
        channel = grpc.insecure_channel(broker.service_url)
        stub = broker_pb2_grpc.BrokerStub(channel)
        responses = list(
            stub.Produce(
                iter(
                    [
                        pb.ProduceRequest(open=pb.ProducerOpen(topic=topic)),
                        pb.ProduceRequest(
                            send=pb.ProducerSend(
                                sequence_id=1,
                                metadata=pb.EntryMetadata(num_messages=1),
                                payload=pb.MessageBatch(
                                    messages=[pb.SingleMessage(payload=b"raw")]
                                ).SerializeToString(),
                            )
                        ),
                    ]
                ),
                timeout=WAIT_S,
            )
        )
        channel.close()
        assert responses[-1].error.code == "StorageFull"
        assert "Free disk space" in responses[-1].error.message
        # Readable throughout, by readers and by subscriptions at both levels.
        assert _read_all(client, topic) == acked
        assert _consume(client, topic, "ru", len(acked) + 1, RU) == [*acked, b"in-txn"]
        assert _consume(client, topic, "rc", len(acked)) == acked
        # A commit decided while the disk is full cannot write its marker; the
        # coordinator keeps trying, and it lands once space returns.
        committed = threading.Event()

        def commit() -> None:
            if _end_transaction(broker, txn.id, commit=True) == "COMMITTED":
                committed.set()

        committer = threading.Thread(target=commit, daemon=True)
        committer.start()
        wait(lambda: "ending transaction" in broker.log(), WAIT_S, "a failed marker write")
        assert not committed.is_set()

        _heal(broker, wait)
        wait(committed.is_set, WAIT_S, "the commit to land after the disk healed")
        producer.send(b"after")
        assert _read_all(client, topic) == [*acked, b"in-txn", b"after"]
        assert broker.admin(stats_path)["state"] == "LedgerOpened"
    with urllib.request.urlopen(broker.http_url + "/admin/v2/brokers/health") as response:
        assert response.status == 200

    # And it is all durable: kill -9 and look again.
    broker.kill()
    broker.start()
    with stableline.Client(broker.service_url) as client:
        assert _read_all(client, topic) == [*acked, b"in-txn", b"after"]


def test_failed_fsync_fails_the_send_fences_the_ledger_and_loses_nothing_acked(broker, wait):
    topic = "fsync-fail"
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        producer.send(b"first")
    _restart_with(broker, {"STABLELINE_FAILPOINTS": "fsync-fail:1"})
    stats_path = f"/admin/v2/persistent/public/default/{topic}/internalStats"
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        fenced = broker.admin(stats_path)["ledgers"][-1]["ledgerId"]
        with pytest.raises(stableline.StorageError, match="the disk failed") as raised:
            producer.send(b"never-acknowledged")
        assert not isinstance(raised.value, stableline.StorageFull)
        assert broker.admin(stats_path)["state"] == "Fenced"
        second = producer.send(b"second")
        # Never written to the fenced ledger again: the next append rolled over.
        assert second.ledger_id > fenced
        assert broker.admin(stats_path)["state"] == "LedgerOpened"
        assert _read_all(client, topic) == [b"first", b"second"]
    broker.kill()
    broker.start()
    with stableline.Client(broker.service_url) as client:
        assert _read_all(client, topic) == [b"first", b"second"]
    assert "ledger fenced" in broker.log_path.with_name("broker-2.log").read_text()


def test_torn_tail_and_corrupt_snapshot_in_one_restart_recover_by_replay(broker, wait):
    topic = "torn-and-corrupt"
    buffer_path = f"/admin/v3/transactions/transactionBufferStats/public/default/{topic}"
    _restart_with(broker, {"STABLELINE_TXN_SNAPSHOT_EVERY_CHANGES": "1"})
    broker.env = {"STABLELINE_TXN_SNAPSHOT_EVERY_CHANGES": "1"}
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic)
        producer.send(b"plain-0")
        committed = client.new_transaction(timeout_ms=120_000)
        producer.send(b"committed-0", txn=committed)
        aborted = client.new_transaction(timeout_ms=120_000)
        producer.send(b"aborted-0", txn=aborted)
        producer.send(b"committed-1", txn=committed)
        aborted.abort()
        committed.commit()
        producer.send(b"plain-1")
        still_open = client.new_transaction(timeout_ms=120_000)
        open_first = producer.send(b"open-0", txn=still_open)
        producer.send(b"plain-2")
        last = producer.send(b"torn-away")
        before = broker.admin(buffer_path)
        assert before["lastSnapshotTimestamps"], before
    stable_before = f"{open_first.ledger_id}:{open_first.entry_id - 1}"
    assert before["maxReadPosition"] == stable_before
    broker.kill()

    # The last entry torn in the middle of its frame, as a write cut by power loss...
    ledger_file = broker.data_dir / "ledgers" / "public" / "default" / topic
    log_file = ledger_file / f"{last.ledger_id:016x}.log"
    data = log_file.read_bytes()
    log_file.write_bytes(data[: len(data) - 5])
    # ...and the snapshot's meta damaged, in the same restart.
    store = LocalStore(broker.data_dir / "metadata")
    (key, raw), *others = [
        (key, value)
        for key, value in store.scan_prefix(SNAPSHOTS_DB, "")
        if key.endswith(f"/{topic}\x00meta")
    ]
    assert not others
    store.put(SNAPSHOTS_DB, key, raw[:10] + bytes([raw[10] ^ 0xFF]) + raw[11:])
    store.sync()
    store.close()

    broker.start()
    broker.env = {}
    # Loaded in the background after the crash (or by this first request).
    wait(lambda: broker.admin(buffer_path)["state"] == "Ready", WAIT_S, "buffer ready")
    log_text = broker.log()
    assert "torn tail" in log_text
    assert "checksum mismatch; replaying the whole log instead" in log_text
    after = broker.admin(buffer_path)
    assert after["maxReadPosition"] == stable_before  # pinned by the open transaction
    assert after["ongoingTxnSize"] == 1 and after["abortedTxnSize"] == 1
    assert after["replayedEntries"] == 9  # the whole log: 7 left of 8 data entries, 2 markers
    assert after["lastConfirmedEntry"] == f"{last.ledger_id}:{last.entry_id - 1}"
    with stableline.Client(broker.service_url) as client:
        assert _read_all(client, topic, RU) == [
            b"plain-0",
            b"committed-0",
            b"aborted-0",
            b"committed-1",
            b"plain-1",
            b"open-0",
            b"plain-2",
        ]
        assert _read_all(client, topic) == [b"plain-0", b"committed-0", b"committed-1", b"plain-1"]
        # The open transaction is still the coordinator's to end.
        assert _end_transaction(broker, still_open.id, commit=True) == "COMMITTED"
        assert _read_all(client, topic) == [
            b"plain-0",
            b"committed-0",
            b"committed-1",
            b"plain-1",
            b"open-0",
            b"plain-2",
        ]
