"""Kafka reads across a broker killed and restarted while a topic replays its log.

A read_committed ListOffsets or Fetch waits for the replay (topic_recovery_wait_s)
and then answers NOT_LEADER_OR_FOLLOWER, which clients retry: it never tells a
last stable offset earlier than one told before the kill. Read_uncommitted reads
do not wait. Raw frames, so each answer's error code and offsets are seen as sent,
and a real client that rides the refusals out.
"""

from __future__ import annotations

import signal
import socket
import threading
import time

import stableline
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader, Writer
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S, end_offset
from tests.stableline.broker.kafka.test_bad_input import connect, receive_frame, send_frame

TOPIC = "ledger-entries"
NO_TIMED_SNAPSHOTS = {"STABLELINE_TXN_SNAPSHOT_INTERVAL_S": "3600"}


def request(sock: socket.socket, api_key: int, version: int, body: Writer) -> Reader:
    """One request on `sock`; the response body after its correlation id."""
    frame = Writer().int16(api_key).int16(version).int32(11).string("recovery-test")
    send_frame(sock, frame.getvalue() + body.getvalue())
    response = Reader(receive_frame(sock))
    assert response.int32() == 11
    return response


def latest_offset(sock: socket.socket, level: m.IsolationLevel) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v2 LATEST at `level`."""
    body = Writer().int32(-1).int8(level).int32(1).string(TOPIC).int32(1)
    response = request(sock, m.ApiKey.LIST_OFFSETS, 2, body.int32(0).int64(m.LATEST_TIMESTAMP))
    response.int32()  # throttle time
    assert response.int32() == 1 and response.string() == TOPIC and response.int32() == 1
    assert response.int32() == 0  # partition
    error = response.int16()
    response.int64()  # timestamp
    return error, response.int64()


def fetch_watermarks(sock: socket.socket, level: m.IsolationLevel) -> tuple[int, int, int]:
    """(error code, high watermark, last stable offset) of a Fetch v4 from offset 0."""
    body = Writer().int32(-1).int32(0).int32(1).int32(1 << 20).int8(level)
    body.int32(1).string(TOPIC).int32(1).int32(0).int64(0).int32(1 << 20)
    response = request(sock, m.ApiKey.FETCH, 4, body)
    response.int32()  # throttle time
    assert response.int32() == 1 and response.string() == TOPIC and response.int32() == 1
    assert response.int32() == 0  # partition
    return response.int16(), response.int64(), response.int64()


def commit_one(service_url: str) -> None:
    with stableline.Client(service_url) as client:
        txn = client.new_transaction(timeout_ms=60_000)
        client.create_producer(TOPIC).send(b"committed", txn=txn)
        txn.commit()


def test_read_committed_never_reports_an_earlier_last_stable_offset_after_a_crash(
    kafka_broker,
):
    kafka_broker.env = NO_TIMED_SNAPSHOTS
    kafka_broker.restart()
    commit_one(kafka_broker.service_url)
    kafka_broker.stop()  # the snapshot holds the stable position after one commit
    kafka_broker.start()
    commit_one(kafka_broker.service_url)
    commit_one(kafka_broker.service_url)
    with connect(kafka_broker.bootstrap) as sock:
        error, stable_before = latest_offset(sock, m.IsolationLevel.READ_COMMITTED)
        assert error == m.ErrorCode.NONE
        error, end_before = latest_offset(sock, m.IsolationLevel.READ_UNCOMMITTED)
        assert error == m.ErrorCode.NONE
    assert stable_before == end_before == 6  # three records, three commit markers
    kafka_broker.kill()

    # Replay held at the failpoint: the snapshot's stable position is two commits old.
    kafka_broker.env = {
        **NO_TIMED_SNAPSHOTS,
        "STABLELINE_FAILPOINTS": "txn-buffer-recovery",
        "STABLELINE_TOPIC_RECOVERY_WAIT_S": "0.3",
    }
    kafka_broker.start()
    kafka_broker.wait_for_event("failpoint", CLIENT_TIMEOUT_S)
    retriable = m.ErrorCode.NOT_LEADER_OR_FOLLOWER
    with connect(kafka_broker.bootstrap) as sock:
        error, stable = latest_offset(sock, m.IsolationLevel.READ_COMMITTED)
        assert error == retriable or stable >= stable_before, (error, stable, stable_before)
        error, _, stable = fetch_watermarks(sock, m.IsolationLevel.READ_COMMITTED)
        assert error == retriable or stable >= stable_before, (error, stable, stable_before)
        # Read_uncommitted reads need no replay: they answer at once, from the log.
        assert latest_offset(sock, m.IsolationLevel.READ_UNCOMMITTED) == (0, end_before)
        assert fetch_watermarks(sock, m.IsolationLevel.READ_UNCOMMITTED)[:2] == (0, end_before)

        # A real client retries the refusal until the replay ends.
        refusals = kafka_broker.log().count("still replaying its log")
        assert refusals >= 1
        got: list[int] = []
        client = threading.Thread(
            target=lambda: got.append(end_offset(kafka_broker.bootstrap, TOPIC, "read_committed"))
        )
        client.start()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while kafka_broker.log().count("still replaying its log") == refusals:
            assert time.monotonic() < deadline, "the client was never refused"
            assert client.is_alive(), f"answered while the log replays: {got}"
            client.join(0.05)
        kafka_broker.signal(signal.SIGUSR1)  # release the failpoint: the replay goes on
        client.join(CLIENT_TIMEOUT_S)
        assert got == [stable_before]
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while True:
            error, stable = latest_offset(sock, m.IsolationLevel.READ_COMMITTED)
            assert error == retriable or stable >= stable_before, (error, stable)
            if error == m.ErrorCode.NONE:
                break
            assert time.monotonic() < deadline, "read_committed still refused after replay"
        assert stable == stable_before
        assert fetch_watermarks(sock, m.IsolationLevel.READ_COMMITTED) == (
            0,
            end_before,
            stable_before,
        )
    kafka_broker.env = {}
