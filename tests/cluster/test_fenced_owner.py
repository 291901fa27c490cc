"""A fenced broker (its metadata session lost) and the replicated topics it served,
over one etcd of this module's own and three real brokers (E=3, Qw=3, Qa=2): a
lookup asked of a fenced broker never names it (it names the owner the topic's
record names, or refuses with BrokerUnavailable so the client asks another broker at
once), and once it is back in its cluster it writes to a topic it served before only
after taking it again, at a newer epoch."""

from __future__ import annotations

import itertools
import os
import signal
import time
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

import stableline
from stableline._proto import broker_pb2, broker_pb2_grpc
from stableline.testing import BrokerProcess
from tests.conftest import wait_until

from .conftest import Cluster, own_etcd, running_cluster

_topics = itertools.count()
# Far above a 2 s session's lapse and a takeover on a loaded machine.
DEADLINE_S = 30.0
# A fenced broker reads a record for at most 0.5 s before it refuses a lookup.
REFUSED_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def fenced_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with (
        own_etcd(tmp_path_factory.mktemp("fenced-etcd")) as etcd,
        running_cluster(etcd, tmp_path_factory.mktemp("fenced-cluster")) as cluster,
    ):
        yield cluster


def _topic() -> str:
    return f"persistent://public/default/fenced-{next(_topics)}"


def _service_url(brokers: list[BrokerProcess]) -> str:
    return "stableline://" + ",".join(f"127.0.0.1:{b.grpc_port}" for b in brokers)


def _broker_id(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _fenced(broker: BrokerProcess) -> bool:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("stableline_writes_fenced "):
                return float(line.split()[1]) == 1.0
    raise AssertionError("no stableline_writes_fenced in /metrics")


def _lookup(broker: BrokerProcess, topic: str) -> str:
    """The gRPC address `broker` names for `topic`, or "refused: CODE"."""
    with grpc.insecure_channel(broker.service_url) as channel:
        try:
            answer = broker_pb2_grpc.BrokerStub(channel).Lookup(
                broker_pb2.LookupRequest(topic=topic), timeout=10
            )
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            code = dict(error.trailing_metadata() or ()).get("stableline-error", "")
            return f"refused: {code}"
        return answer.grpc_address


def _produce_refusal(broker: BrokerProcess, topic: str) -> str:
    """The code `broker` refuses a producer of `topic` with."""
    with grpc.insecure_channel(broker.service_url) as channel:
        stream = broker_pb2_grpc.BrokerStub(channel).Produce(
            iter([broker_pb2.ProduceRequest(open=broker_pb2.ProducerOpen(topic=topic))]),
            timeout=10,
        )
        with pytest.raises(grpc.RpcError) as refused:
            next(stream)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    return dict(refused.value.trailing_metadata() or ()).get("stableline-error", "")


def _record(cluster: Cluster, topic: str) -> dict:
    local = topic.removeprefix("persistent://")
    record = cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{local}")
    assert record is not None, f"no ownership record for {topic}"
    return record


def _produce(brokers: list[BrokerProcess], topic: str, payloads: list[bytes]) -> list:
    with stableline.Client(_service_url(brokers), operation_timeout_seconds=15) as client:
        producer = client.create_producer(topic)
        return [producer.send(payload) for payload in payloads]


def _read_all(brokers: list[BrokerProcess], topic: str, count: int) -> list[bytes]:
    with stableline.Client(_service_url(brokers), operation_timeout_seconds=15) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest)
        return [reader.read_next(10_000).data() for _ in range(count)]


@pytest.mark.slow
def test_fenced_brokers_name_no_owner_they_cannot_read_and_the_topic_is_taken_again_after(
    fenced_cluster: Cluster,
):
    cluster = fenced_cluster
    topic = _topic()
    before = _produce(cluster.brokers, topic, [b"before-%d" % i for i in range(5)])
    taken = _record(cluster, topic)
    assert len(taken["ensemble"]) == 3
    leader = cluster.by_id(taken["leader"])
    assert cluster.etcd.process is not None
    os.kill(cluster.etcd.process.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: all(_fenced(b) for b in cluster.brokers),
            timeout_s=DEADLINE_S,
            message="every broker to fence itself with etcd away",
        )
        # Fenced, none may name itself (the leader above all: another broker may
        # take its topic) nor an owner from a record it cannot read afresh.
        for broker in [leader, *(b for b in cluster.brokers if b is not leader)]:
            started = time.monotonic()
            answer = _lookup(broker, topic)
            assert answer == "refused: BrokerUnavailable", (broker.grpc_port, answer)
            assert time.monotonic() - started < REFUSED_WITHIN_S
        # Nor does the leader take a producer of it, or hold one up waiting on etcd.
        started = time.monotonic()
        assert _produce_refusal(leader, topic) == "BrokerUnavailable"
        assert time.monotonic() - started < REFUSED_WITHIN_S
    finally:
        os.kill(cluster.etcd.process.pid, signal.SIGCONT)
    wait_until(
        lambda: not any(_fenced(b) for b in cluster.brokers),
        timeout_s=DEADLINE_S,
        message="every broker back in its cluster",
    )
    after = _produce(cluster.brokers, topic, [b"after-%d" % i for i in range(5)])
    # Written only once taken again: a newer epoch, a newer ledger, no id given twice.
    assert _record(cluster, topic)["epoch"] > taken["epoch"]
    assert min(after).ledger_id > max(before).ledger_id
    assert _read_all(cluster.brokers, topic, 10) == [b"before-%d" % i for i in range(5)] + [
        b"after-%d" % i for i in range(5)
    ]


@pytest.mark.slow
def test_a_woken_owner_names_the_broker_that_took_its_topic_never_itself(
    fenced_cluster: Cluster,
):
    cluster = fenced_cluster
    topic = _topic()
    before = _produce(cluster.brokers, topic, [b"before-%d" % i for i in range(5)])
    taken = _record(cluster, topic)
    leader = cluster.by_id(taken["leader"])
    others = [b for b in cluster.brokers if b is not leader]
    assert leader.process is not None
    os.kill(leader.process.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: _record(cluster, topic)["leader"] != taken["leader"],
            timeout_s=DEADLINE_S,
            message="another member to take the topic of the paused leader",
        )
    finally:
        os.kill(leader.process.pid, signal.SIGCONT)
    successor = _record(cluster, topic)["leader"]
    # From the wake on: the woken broker names the successor, or refuses (and the
    # client asks another broker); never itself, though its own record said so.
    answers: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while not answers or answers[-1] != successor or _fenced(leader):
        assert time.monotonic() < deadline, f"the woken broker answered {answers}"
        answers.append(_lookup(leader, topic))
        assert answers[-1] != _broker_id(leader), answers
        assert answers[-1] in (successor, "refused: BrokerUnavailable"), answers
    # A client that knows only the woken broker is sent on to the successor, whose
    # ledger is newer than anything the woken broker wrote.
    woken = _produce([leader], topic, [b"after-the-wake"])
    assert woken[0].ledger_id > max(before).ledger_id
    assert _record(cluster, topic)["epoch"] > taken["epoch"]
    assert _read_all(others, topic, 6) == [b"before-%d" % i for i in range(5)] + [b"after-the-wake"]
