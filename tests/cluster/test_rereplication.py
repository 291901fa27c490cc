"""Re-replication over real brokers on a real etcd: a broker removed for good has its
copies made again on the live brokers (every topic back to Qw copies, nothing lost,
read from the new ensemble after its old leader is killed too), and a decommissioned
broker's copies are moved away while it still runs."""

from __future__ import annotations

import itertools
import json
import os
import time
import urllib.request

import pytest

import stableline
from stableline.local_cluster.broker_process import BrokerProcess
from tests.conftest import wait_until

from .conftest import Cluster, running_cluster

pytestmark = pytest.mark.slow

_namespaces = itertools.count()
OPERATION_TIMEOUT_S = 15.0
# Grace period 1 s + the session timeout (2 s) + catching up, on a loaded machine.
BACK_TO_QW_WITHIN_S = 60.0
GRACE_ENV = {"STABLELINE_REPLICATION_GRACE_PERIOD_S": "1"}


def _broker_id(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _service_url(brokers) -> str:
    return "stableline://" + ",".join(_broker_id(b) for b in brokers)


def _client(brokers) -> stableline.Client:
    return stableline.Client(_service_url(brokers), operation_timeout_seconds=OPERATION_TIMEOUT_S)


def _request(broker: BrokerProcess, path: str, method: str = "GET", body=None):
    request = urllib.request.Request(
        broker.http_url + path,
        None if body is None else json.dumps(body).encode(),
        {"Content-Type": "application/json", "X-Stableline-Request": "test"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def _namespace(broker: BrokerProcess, ensemble: int, write: int, ack: int) -> str:
    namespace = f"public/rerep-{os.getpid()}-{next(_namespaces)}"
    _request(
        broker,
        f"/admin/v2/namespaces/{namespace}/persistence",
        "POST",
        {
            "bookkeeperEnsemble": ensemble,
            "bookkeeperWriteQuorum": write,
            "bookkeeperAckQuorum": ack,
        },
    )
    return namespace


def _produce(brokers, topic: str, payloads: list[bytes]) -> None:
    with _client(brokers) as client:
        producer = client.create_producer(topic)
        for payload in payloads:
            producer.send(payload)


def _read_all_once_served(brokers, topic: str, count: int) -> list[bytes]:
    """Every message of `topic` from the start, as soon as a live broker serves it (a
    lookup may name a killed broker until its session lapses: a fresh client and
    subscription per try)."""
    deadline = time.monotonic() + BACK_TO_QW_WITHIN_S
    for attempt in itertools.count():
        try:
            with stableline.Client(_service_url(brokers), operation_timeout_seconds=5) as client:
                consumer = client.subscribe(
                    topic, f"check-{attempt}", initial_position=stableline.InitialPosition.Earliest
                )
                received = []
                for _ in range(count):
                    message = consumer.receive(timeout_millis=int(OPERATION_TIMEOUT_S * 1000))
                    received.append(message.data())
                return received
        except stableline.StableLineError:
            if time.monotonic() > deadline:
                raise
    raise AssertionError("unreachable")


def _record(cluster: Cluster, topic: str) -> dict:
    local = topic.removeprefix("persistent://")
    record = cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{local}")
    assert record is not None, topic
    return record


def _whole(record: dict, live: set[str], size: int) -> bool:
    """The record names `size` live members, each counted on (its copy made)."""
    return (
        len(record["ensemble"]) == size
        and set(record["ensemble"]) <= live
        and not any(d.startswith("copying:") for d in record["data_dirs"].values())
    )


def test_a_broker_removed_for_good_has_every_copy_made_again_and_nothing_is_lost(
    cluster_etcd, tmp_path
):
    with running_cluster(cluster_etcd, tmp_path / "c", count=4, env=GRACE_ENV) as cluster:
        brokers = cluster.brokers
        topics = [f"persistent://public/default/rerep-{os.getpid()}-{i}" for i in range(4)]
        sent: dict[str, list[bytes]] = {}
        for topic in topics:
            sent[topic] = [f"{topic}-{i}".encode() for i in range(20)]
            _produce(brokers, topic, sent[topic])
        # The victim: a member (not the leader) of the first topic; it may lead others,
        # which fail over to their successors, which re-replicate in turn.
        first = _record(cluster, topics[0])
        victim_id = next(m for m in first["ensemble"] if m != first["leader"])
        victim = cluster.by_id(victim_id)
        victim.kill()
        live = [b for b in brokers if b is not victim]
        live_ids = {_broker_id(b) for b in live}

        def all_back() -> bool:
            return all(_whole(_record(cluster, t), live_ids, 3) for t in topics)

        wait_until(all_back, BACK_TO_QW_WITHIN_S, "every topic back to 3 copies on live brokers")
        # Writes go on over the new ensembles.
        for topic in topics:
            more = [f"{topic}-{i}".encode() for i in range(20, 40)]
            _produce(live, topic, more)
            sent[topic] += more
        # The leader's stats say the copies are whole.
        record = _record(cluster, topics[0])
        leader = cluster.by_id(record["leader"])
        local = topics[0].removeprefix("persistent://")

        def stats_whole() -> bool:
            stats = _request(leader, f"/admin/v2/persistent/{local}/stats")
            replication = stats["replication"]
            return not replication["underReplicated"] and replication["ledgersBehind"] == 0

        wait_until(stats_whole, BACK_TO_QW_WITHIN_S, "the writer sees every copy made")
        # The old leader goes too: the new ensemble's members serve everything.
        leader.kill()
        survivors = [b for b in live if b is not leader]
        received = _read_all_once_served(survivors, topics[0], len(sent[topics[0]]))
        assert len(set(received)) == len(received), "a message delivered twice"
        assert received == sent[topics[0]], "lost or reordered after re-replication"


def test_a_decommissioned_broker_s_copies_move_to_the_others(cluster_etcd, tmp_path):
    with running_cluster(cluster_etcd, tmp_path / "c", count=3) as cluster:
        brokers = cluster.brokers
        namespace = _namespace(brokers[0], 2, 2, 1)
        topics = [f"persistent://{namespace}/t{i}" for i in range(6)]
        for topic in topics:
            _produce(brokers, topic, [b"x"])
        # A broker that leads topics and holds copies of others' (placement spreads
        # six topics of two copies over three brokers: each does both).
        led: dict[str, int] = {}
        held: dict[str, int] = {}
        for topic in topics:
            record = _record(cluster, topic)
            led[record["leader"]] = led.get(record["leader"], 0) + 1
            for member in record["ensemble"]:
                if member != record["leader"]:
                    held[member] = held.get(member, 0) + 1
        draining_id = max(held, key=lambda b: (led.get(b, 0) > 0, held[b]))
        assert led.get(draining_id) and held[draining_id], (led, held)
        draining = cluster.by_id(draining_id)
        path = f"/admin/v2/brokers/{draining_id}/decommission"
        _request(brokers[0], path, "POST")
        live_ids = {_broker_id(b) for b in brokers}

        def drained() -> bool:
            status = _request(brokers[0], path)
            return status["draining"] and status["copies"] == 0 and status["copiesBeingMade"] == 0

        wait_until(drained, BACK_TO_QW_WITHIN_S, f"broker {draining_id} holds no copy")

        def listed_draining() -> bool:
            listed = _request(brokers[0], f"/admin/v2/clusters/{cluster.name}/brokers")
            return {b["brokerId"] for b in listed if b["draining"]} == {draining_id}

        wait_until(listed_draining, 10, "the broker list says which broker is draining")
        for topic in topics:
            record = _record(cluster, topic)
            assert _whole(record, live_ids, 2), record
            # The topics it led were handed over, and their new leaders replaced it.
            assert draining_id not in record["ensemble"], record
        replaced = [t.removeprefix("persistent://") for t in topics]

        def copies_dropped() -> bool:
            ledgers = draining.data_dir / "ledgers"
            return not any(any((ledgers / t).glob("*.log")) for t in replaced)

        wait_until(copies_dropped, BACK_TO_QW_WITHIN_S, "the draining broker's copies deleted")
        # Nothing new is placed on it.
        new = f"persistent://{namespace}/placed-after"
        _produce([b for b in brokers if b is not draining], new, [b"y"])
        assert draining_id not in _record(cluster, new)["ensemble"]
        _request(brokers[0], path, "DELETE")
        assert not _request(brokers[0], path)["draining"]
