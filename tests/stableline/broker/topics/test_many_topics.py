"""Many topics on one broker: more topics than open files, loading on first use,
stable positions across a restart, and connections kept off the ledger files'
descriptors."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import stableline
import stableline.aio
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.testing import BrokerProcess, open_files_limited

OPEN_FILES = 1024
TOPICS = 1500
RC = broker_pb2.ISOLATION_LEVEL_READ_COMMITTED
RU = broker_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED


def _name(index: int) -> str:
    return f"persistent://public/many/t-{index:05d}"


async def _send_one_to_each(service_url: str, names: list[str], concurrency: int = 32) -> None:
    pending = iter(names)
    async with stableline.aio.Client(service_url) as client:

        async def worker() -> None:
            for name in pending:
                producer = await client.create_producer(name)
                await producer.send(f"only message of {name}".encode())
                await producer.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def _fetch(stub, topic: str, level: int) -> broker_pb2.FetchResponse:
    return stub.Fetch(
        broker_pb2.FetchRequest(
            topic=topic,
            start=broker_pb2.Position(ledger_id=0, entry_id=0),
            max_entries=100,
            isolation_level=level,
        ),
        timeout=30,
    )


def _payloads(entries) -> list[bytes]:
    return [
        message.payload
        for entry in entries
        for message in broker_pb2.MessageBatch.FromString(entry.payload).messages
    ]


def _loaded_topics(broker: BrokerProcess) -> int:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("stableline_topics "):
                return int(float(line.split()[1]))
    raise AssertionError("no stableline_topics metric")


@pytest.fixture
def limited_broker(tmp_path):
    """A broker whose open-files soft and hard limits are both 1024: raising the soft
    limit at start cannot help."""
    process = BrokerProcess(tmp_path / "data", interpreter_args=open_files_limited(OPEN_FILES))
    process.start()
    try:
        yield process
    finally:
        assert process.stop() in (0, -9), process.log()


def test_the_broker_raises_its_open_files_soft_limit_to_the_hard_limit_and_says_when_low(
    tmp_path,
):
    broker = BrokerProcess(tmp_path / "data", interpreter_args=open_files_limited(256, 2048))
    broker.start()
    try:
        limits = Path(f"/proc/{broker.process.pid}/limits").read_text()
        (line,) = [line for line in limits.splitlines() if line.startswith("Max open files")]
        assert line.split()[3:5] == ["2048", "2048"], line
        log = broker.log()
        assert "open files: the limit is 2048 even at its hard limit" in log
        assert "ledger files open at most: 1024" in log  # half of it
    finally:
        assert broker.stop() == 0, broker.log()


@pytest.mark.slow
def test_1500_topics_at_1024_open_files_are_all_created_and_all_readable_after_a_restart(
    limited_broker,
):
    names = [_name(index) for index in range(TOPICS)]
    asyncio.run(_send_one_to_each(limited_broker.service_url, names))
    assert len(os.listdir(f"/proc/{limited_broker.process.pid}/fd")) < OPEN_FILES

    limited_broker.stop()
    limited_broker.start()
    # Healthy without loading a single topic: each loads when first used.
    assert _loaded_topics(limited_broker) == 0
    assert "topics: 1500 known, 0 loaded at start" in limited_broker.log()

    with grpc.insecure_channel(limited_broker.service_url) as channel:
        listed = admin_pb2_grpc.AdminStub(channel).ListTopics(
            admin_pb2.ListTopicsRequest(namespace="public/many"), timeout=30
        )
        assert sorted(listed.topics) == names
        stub = broker_pb2_grpc.BrokerStub(channel)
        for name in names:
            for level in (RC, RU):
                entries = _fetch(stub, name, level).entries
                assert _payloads(entries) == [f"only message of {name}".encode()], (name, level)
    assert len(os.listdir(f"/proc/{limited_broker.process.pid}/fd")) < OPEN_FILES


def test_a_read_committed_read_after_a_restart_never_sees_an_earlier_stable_position(broker):
    """One topic with an open transaction (loaded at start, in the background, to
    settle it), one with only ended ones (loaded by the first read): for both, the
    first READ_COMMITTED read after the restart is bounded no lower than before."""
    with stableline.Client(broker.service_url) as client:
        pinned = client.create_producer("stable-pinned")
        settled = client.create_producer("stable-settled")
        for producer in (pinned, settled):
            producer.send(b"p0")
            committed = client.new_transaction(timeout_ms=120_000)
            producer.send(b"c0", txn=committed)
            producer.send(b"c1", txn=committed)
            committed.commit()
            aborted = client.new_transaction(timeout_ms=120_000)
            producer.send(b"a0", txn=aborted)
            aborted.abort()
            producer.send(b"p1")
        still_open = client.new_transaction(timeout_ms=120_000)
        pinned.send(b"open", txn=still_open)
        pinned.send(b"p2")

    def visible(stub, topic: str) -> tuple[tuple[int, int], list[bytes]]:
        response = _fetch(stub, f"persistent://public/default/{topic}", RC)
        aborted_first = {
            (a.first_position.ledger_id, a.first_position.entry_id) for a in response.aborted
        }
        # One aborted transaction of one entry each: its first entry is all of it.
        payloads = _payloads(
            entry
            for entry in response.entries
            if (entry.ledger_id, entry.entry_id) not in aborted_first
        )
        return (response.bound.ledger_id, response.bound.entry_id), payloads

    with grpc.insecure_channel(broker.service_url) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        before = {topic: visible(stub, topic) for topic in ("stable-pinned", "stable-settled")}
    assert before["stable-pinned"][1] == [b"p0", b"c0", b"c1", b"p1"]
    assert before["stable-settled"][1] == [b"p0", b"c0", b"c1", b"p1"]

    broker.stop()
    broker.start()
    with grpc.insecure_channel(broker.service_url) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # The very first request of the run for each topic.
        for topic in ("stable-settled", "stable-pinned"):
            bound, payloads = visible(stub, topic)
            assert bound >= before[topic][0], (topic, bound, before[topic][0])
            assert payloads == before[topic][1], topic


def test_connections_cannot_take_the_descriptors_the_ledger_files_need(tmp_path):
    # Once, connections past what the limit allowed made every ledger open fail
    # (LimitExceeded naming the limit, still what an open out of descriptors says:
    # tests/managed_ledger/test_ledger_files.py). Their caps now fit under the limit
    # (connection_caps.py): the ones past them are refused and the topics work.
    broker = BrokerProcess(tmp_path / "data", interpreter_args=open_files_limited(64))
    broker.start()
    held: list[grpc.Channel] = []
    try:
        with stableline.Client(broker.service_url) as client:
            client.new_transaction().abort()
            refused = 0
            for _ in range(80):
                channel = grpc.insecure_channel(
                    broker.service_url, options=[("grpc.use_local_subchannel_pool", 1)]
                )
                held.append(channel)
                try:
                    health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=1
                    )
                except grpc.RpcError:
                    refused += 1
            assert refused >= 70, f"only {refused} of 80 connections refused under 64 files"
            for index in range(20):
                client.create_producer(f"after-{index}").send(b"accepted")
            reader = client.create_reader("after-19")
            assert reader.read_next(timeout_millis=10_000).data() == b"accepted"
        assert "internal error" not in broker.log()
        assert "Too many open files" not in broker.log()
    finally:
        for channel in held:
            channel.close()
        assert broker.stop() == 0, broker.log()


@pytest.mark.parametrize("stop", ["clean stop", "kill -9"])
def test_topics_the_last_run_may_have_left_transactions_in_are_loaded_at_start(broker, wait, stop):
    with stableline.Client(broker.service_url) as client:
        txn = client.new_transaction(timeout_ms=120_000)
        client.create_producer("left-open").send(b"t", txn=txn)
        client.create_producer("left-idle").send(b"p")
    broker.stop() if stop == "clean stop" else broker.kill()
    broker.start()

    def loaded() -> dict[str, str]:
        return {
            document["topic"]: document["state"]
            for document in broker.admin("/admin/v3/transactions/stablePositions")
        }

    # Nothing asks for either topic: the one with an open transaction is loaded
    # to settle it with the coordinator; after a crash, every topic the crashed
    # run had loaded is.
    open_topic, idle_topic = (
        f"persistent://public/default/{t}" for t in ("left-open", "left-idle")
    )
    wait(lambda: loaded().get(open_topic) == "Ready", 20, "left-open loaded at start")
    if stop == "kill -9":
        wait(lambda: loaded().get(idle_topic) == "Ready", 20, "left-idle loaded at start")
    else:
        assert idle_topic not in loaded()
