"""Recovery through a real broker process, killed at chosen points of a transaction's end
(failpoints) and while a topic's transaction buffer recovers."""

from __future__ import annotations

import contextlib
import signal
import threading

import grpc
import pytest

import stableline
from stableline import InitialPosition, IsolationLevel
from stableline._proto import broker_pb2, broker_pb2_grpc

EARLIEST = InitialPosition.Earliest
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
WAIT_S = 20.0


def _receive(consumer, count: int) -> list[bytes]:
    """Exactly `count` messages, acknowledged; raises stableline.Timeout if fewer come."""
    values = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=int(WAIT_S * 1000))
        consumer.acknowledge(message)
        values.append(message.data())
    return values


def _nothing_more(consumer, within_ms: int = 300) -> bool:
    try:
        consumer.receive(timeout_millis=within_ms)
    except stableline.Timeout:
        return True
    return False


def _buffer_stats(broker, topic: str) -> dict:
    return broker.admin(f"/admin/v3/transactions/transactionBufferStats/public/default/{topic}")


def _txn_status(broker, txn_id: tuple[int, int]) -> str:
    path = f"/admin/v3/transactions/transactionMetadata?txnId={txn_id[0]}:{txn_id[1]}"
    return broker.admin(path)["status"]


# A client whose broker the test kills mid-request: its request, retried across the
# outage, gives up this long after the kill (the default 30 s would only be waited out).
KILLED_CLIENT_TIMEOUT_S = 5.0


def _end_in_background(end) -> threading.Thread:
    """txn.commit or txn.abort from a thread: it hangs at the failpoint, and fails once
    the kill has lasted KILLED_CLIENT_TIMEOUT_S; the restart decides what happened."""

    def run() -> None:
        with contextlib.suppress(stableline.StableLineError):
            end()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _start_with_failpoints(broker, spec: str) -> None:
    broker.env = {"STABLELINE_FAILPOINTS": spec}
    broker.restart()
    broker.env = {}


@pytest.mark.parametrize(
    "failpoint",
    ["txn-decided", "txn-end-topic:persistent://public/default/kill-b"],
    ids=["decision logged, no marker", "decision logged, one of two markers"],
)
def test_a_kill_during_commit_ends_with_the_commit_on_every_topic(broker, wait, failpoint):
    _start_with_failpoints(broker, failpoint)
    with stableline.Client(
        broker.service_url, operation_timeout_seconds=KILLED_CLIENT_TIMEOUT_S
    ) as client:
        txn = client.new_transaction(timeout_ms=60_000)
        client.create_producer("kill-a").send(b"a", txn=txn)
        client.create_producer("kill-b").send(b"b", txn=txn)
        committing = _end_in_background(txn.commit)
        reached = broker.wait_for_event("failpoint", WAIT_S)
        if reached["name"] == "txn-end-topic":
            # kill-a's marker is written: wait until it is durable and applied.
            wait(lambda: _buffer_stats(broker, "kill-a")["ongoingTxnSize"] == 0, WAIT_S)
        marker_end_a = _buffer_stats(broker, "kill-a")["lastConfirmedEntry"]
        broker.kill()
        committing.join(WAIT_S)
    broker.start()

    with stableline.Client(broker.service_url) as client:
        for topic, value in (("kill-a", b"a"), ("kill-b", b"b")):
            consumer = client.subscribe(topic, "after", initial_position=EARLIEST)
            assert _receive(consumer, 1) == [value]
    assert _txn_status(broker, txn.id) == "COMMITTED"
    a_after = _buffer_stats(broker, "kill-a")
    assert a_after["ongoingTxnSize"] == 0
    if reached["name"] == "txn-end-topic":
        # Ended again by the re-driven coordinator: a no-op, no second marker.
        assert a_after["lastConfirmedEntry"] == marker_end_a


def test_a_kill_during_abort_leaves_nothing_visible_and_nothing_open(broker, wait):
    _start_with_failpoints(broker, "txn-decided")
    with stableline.Client(
        broker.service_url, operation_timeout_seconds=KILLED_CLIENT_TIMEOUT_S
    ) as client:
        txn = client.new_transaction(timeout_ms=60_000)
        client.create_producer("kill-abort").send(b"x", txn=txn)
        client.create_producer("kill-abort").send(b"plain")
        aborting = _end_in_background(txn.abort)
        broker.wait_for_event("failpoint", WAIT_S)
        broker.kill()
        aborting.join(WAIT_S)
    broker.start()

    wait(lambda: _txn_status(broker, txn.id) == "ABORTED", WAIT_S, "the abort to be re-driven")
    with stableline.Client(broker.service_url) as client:
        consumer = client.subscribe("kill-abort", "after", initial_position=EARLIEST)
        assert _receive(consumer, 1) == [b"plain"]
        assert _nothing_more(consumer)
    stats = _buffer_stats(broker, "kill-abort")
    assert (stats["ongoingTxnSize"], stats["abortedTxnSize"]) == (0, 1)


def test_while_a_topic_recovers_uncommitted_reads_go_on_and_committed_reads_wait(broker, wait):
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer("recovering")
        producer.send(b"p1")
        txn = client.new_transaction()
        producer.send(b"t1", txn=txn)
        txn.commit()
        producer.send(b"p2")
    # A kill, not a stop: no snapshot on the way out, so recovery has a log to replay.
    broker.kill()
    broker.env = {"STABLELINE_FAILPOINTS": "txn-buffer-recovery"}
    broker.start()
    broker.env = {}
    broker.wait_for_event("failpoint", WAIT_S)
    assert _buffer_stats(broker, "recovering")["state"] == "Initializing"

    with stableline.Client(broker.service_url) as client:
        uncommitted = client.subscribe(
            "recovering", "monitor", initial_position=EARLIEST, isolation_level=RU
        )
        committed = client.subscribe("recovering", "business", initial_position=EARLIEST)
        assert _receive(uncommitted, 3) == [b"p1", b"t1", b"p2"]
        assert _nothing_more(committed)

        # A transactional send waits for the buffer; a plain one does not.
        producer = client.create_producer("recovering")
        late = client.new_transaction()
        sent = threading.Event()
        sender = threading.Thread(
            target=lambda: (producer.send(b"t2", txn=late), sent.set()), daemon=True
        )
        sender.start()
        producer.send(b"p3")
        assert _receive(uncommitted, 1) == [b"p3"]
        assert not sent.is_set()

        broker.signal(signal.SIGUSR1)  # release the failpoint: recovery goes on
        wait(lambda: _buffer_stats(broker, "recovering")["state"] == "Ready", WAIT_S)
        assert _receive(committed, 4) == [b"p1", b"t1", b"p2", b"p3"]
        sender.join(WAIT_S)
        assert sent.is_set()
        late.commit()
        assert _receive(committed, 1) == [b"t2"]
        assert _receive(uncommitted, 1) == [b"t2"]


@pytest.mark.parametrize("restart", ["stop", "kill"])
def test_an_open_transaction_left_by_a_restart_blocks_committed_reads_until_it_times_out(
    broker, restart
):
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer("open-at-restart")
        producer.send(b"p0")
        # Long enough that it is still open when the restarted broker is checked.
        txn = client.new_transaction(timeout_ms=8000)
        producer.send(b"t", txn=txn)
        producer.send(b"p1")
    broker.stop() if restart == "stop" else broker.kill()
    broker.start()

    with stableline.Client(broker.service_url) as client:
        committed = client.subscribe("open-at-restart", "business", initial_position=EARLIEST)
        assert _receive(committed, 1) == [b"p0"]  # then blocked at the open transaction
        assert _nothing_more(committed)
        # The coordinator's timeout fires after the restart: aborted, the rest released.
        assert _receive(committed, 1) == [b"p1"]
        assert _nothing_more(committed)
    assert _txn_status(broker, txn.id) == "ABORTED"


# Topics whose stable positions the crash test below checks.
STABLE_TOPICS = [f"stable-after-crash-{index}" for index in range(4)]


def _committed_positions(broker, topic: str) -> list[tuple[int, int]]:
    """The stable position as GetLastMessageId and a READ_COMMITTED Fetch tell it."""
    request = broker_pb2.FetchRequest(
        topic=topic,
        start=broker_pb2.Position(ledger_id=0, entry_id=0),
        max_entries=100,
        isolation_level=broker_pb2.ISOLATION_LEVEL_READ_COMMITTED,
    )
    with grpc.insecure_channel(broker.service_url) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        last = stub.GetLastMessageId(broker_pb2.GetLastMessageIdRequest(topic=topic), timeout=10)
        fetched = stub.Fetch(request, timeout=10)
    return [
        (last.max_read_position.ledger_id, last.max_read_position.entry_id),
        (fetched.bound.ledger_id, fetched.bound.entry_id),
    ]


def test_committed_reads_after_a_crash_never_see_an_earlier_stable_position(broker, wait):
    # No snapshot but the one a clean stop takes: the crash leaves it behind the log.
    no_timed_snapshots = {"STABLELINE_TXN_SNAPSHOT_INTERVAL_S": "3600"}
    broker.env = no_timed_snapshots
    broker.restart()

    def commit_one_to_each(client) -> None:
        txn = client.new_transaction()
        for topic in STABLE_TOPICS:
            client.create_producer(topic).send(b"t", txn=txn)
        txn.commit()

    with stableline.Client(broker.service_url) as client:
        commit_one_to_each(client)
    broker.stop()  # each topic's snapshot holds the stable position after one commit
    broker.start()
    with stableline.Client(broker.service_url) as client:
        commit_one_to_each(client)
        commit_one_to_each(client)
    before = {topic: _committed_positions(broker, topic) for topic in STABLE_TOPICS}
    broker.kill()

    # Replay held at the failpoint: a read must wait for it, not answer the snapshot's.
    broker.env = {
        **no_timed_snapshots,
        "STABLELINE_FAILPOINTS": "txn-buffer-recovery",
        "STABLELINE_TOPIC_RECOVERY_WAIT_S": "0.3",
    }
    broker.start()
    broker.wait_for_event("failpoint", WAIT_S)
    for topic in STABLE_TOPICS:
        try:
            during = _committed_positions(broker, topic)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            assert "still replaying its log" in error.details(), error.details()
        else:
            assert during == before[topic], (topic, during, before[topic])

    broker.signal(signal.SIGUSR1)  # release the failpoint: recovery goes on
    for topic in STABLE_TOPICS:
        wait(
            lambda topic=topic: _buffer_stats(broker, topic)["state"] == "Ready",
            WAIT_S,
            f"{topic} to recover",
        )
        assert _committed_positions(broker, topic) == before[topic]
    broker.env = {}
