"""A fourth broker joins a busy cluster of three real brokers on a real etcd and takes
existing load by itself, through the balancer: it is sent copies of topics whose
ensembles it was not in (each ensemble grows by it and shrinks by a member once its
copy is whole), then leads at least one; the producers see no failed send, and every
topic read back from the start holds exactly what was acknowledged, in order. A
joiner killed while its copies are being made leaves the ensembles as they were."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import stableline
from stableline.testing import BrokerProcess
from tests.conftest import wait_until
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer

from .conftest import Cluster, running_cluster

pytestmark = pytest.mark.slow

BALANCER_ON = {
    "STABLELINE_LOAD_BALANCER_ENABLED": "true",
    "STABLELINE_LOAD_REPORT_INTERVAL_S": "1",
    "STABLELINE_LOAD_BALANCER_CONSECUTIVE_REPORTS": "2",
    "STABLELINE_LOAD_BALANCER_MIN_EXCESS": "20",
    "STABLELINE_LOAD_BALANCER_MAX_MOVES_PER_MINUTE": "6",
}
# Old entries reach a new member slowly (some 300 KiB a topic take seconds), so its
# copies are still being made when the test kills a broker.
SLOW_COPIES = {**BALANCER_ON, "STABLELINE_REREPLICATION_RATE_BYTES_PER_S": "50000"}
TOPICS = [f"persistent://public/default/joined-{i}" for i in range(6)]
OPERATION_TIMEOUT_S = 30.0
TAKES_LOAD_WITHIN_S = 120.0


def _id(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _service(brokers: list[BrokerProcess]) -> str:
    return ",".join(_id(broker) for broker in brokers)


def _record(cluster: Cluster, topic: str) -> dict:
    local = topic.removeprefix("persistent://")
    record = cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{local}")
    assert record is not None, topic
    return record


class Producers:
    """One producer a topic, each sending unique payloads one at a time until stopped;
    what was acknowledged is kept in send order."""

    def __init__(self, brokers: list[BrokerProcess]):
        self.client = stableline.Client(
            _service(brokers), operation_timeout_seconds=OPERATION_TIMEOUT_S
        )
        self.failures: list[BaseException] = []
        self.acked: dict[str, list[bytes]] = {topic: [] for topic in TOPICS}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, args=(t,)) for t in TOPICS]

    def _send(self, topic: str) -> None:
        producer = self.client.create_producer(topic)
        for seq in range(10**9):
            if self._stop.is_set():
                return
            payload = f"{topic}#{seq}#".encode().ljust(1024, b".")
            try:
                producer.send(payload)
            except Exception as error:
                self.failures.append(error)
                return
            self.acked[topic].append(payload)

    def __enter__(self) -> Producers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=OPERATION_TIMEOUT_S * 2)
        self.client.close()


def _read_back(brokers: list[BrokerProcess], topic: str, count: int) -> list[bytes]:
    """The topic's log from the start: its payloads in message id order, each message
    once (a consumer following a move is sent again what it had not acknowledged: a
    redelivery, told by its message id, is not a second copy in the log)."""
    with stableline.Client(
        _service(brokers), operation_timeout_seconds=OPERATION_TIMEOUT_S
    ) as client:
        consumer = client.subscribe(
            topic, "read-back", initial_position=stableline.InitialPosition.Earliest
        )
        log: dict[tuple, bytes] = {}
        while len(log) < count:
            message = consumer.receive(timeout_millis=int(OPERATION_TIMEOUT_S * 1000))
            log[tuple(message.message_id())] = message.data()
            consumer.acknowledge(message)
        # Nothing more than was acknowledged (a duplicate would show here).
        try:
            while True:
                message = consumer.receive(timeout_millis=1000)
                key = tuple(message.message_id())
                assert key in log, f"{topic}: more than was acknowledged: {message.data()[:40]!r}"
                consumer.acknowledge(message)
        except stableline.Timeout:
            pass
        return [log[key] for key in sorted(log)]


def _whole_ensembles(cluster: Cluster, without: str = "") -> bool:
    """Every topic on three members, none leaving, none of them `without`."""
    records = [_record(cluster, topic) for topic in TOPICS]
    return all(
        len(record["ensemble"]) == 3
        and "leaving" not in record
        and without not in record["ensemble"]
        for record in records
    )


def _check_read_back(brokers: list[BrokerProcess], producers: Producers) -> None:
    for topic in TOPICS:
        acked = producers.acked[topic]
        assert acked, topic
        # Unique payloads in send order: nothing lost, duplicated or reordered.
        assert _read_back(brokers, topic, len(acked)) == acked, topic


def _joiner(cluster: Cluster, root: Path) -> BrokerProcess:
    return BrokerProcess(
        root / "broker-joiner" / "data",
        extra_args=["--metadata-store", cluster.etcd.url, "--cluster", cluster.name],
        env={"STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S), **BALANCER_ON},
    )


def test_a_fourth_broker_joins_and_takes_topics_by_itself(cluster_etcd: EtcdServer, tmp_path: Path):
    with running_cluster(cluster_etcd, tmp_path, env=BALANCER_ON) as cluster:
        with stableline.Client(_service(cluster.brokers)) as client:
            for topic in TOPICS:
                client.lookup_topic(topic)  # placed 2/2/2 by load, each on all three
        assert all(len(_record(cluster, topic)["ensemble"]) == 3 for topic in TOPICS)
        with Producers(cluster.brokers) as producers:
            wait_until(
                lambda: (
                    all(len(sent) >= 20 for sent in producers.acked.values()) or producers.failures
                ),
                OPERATION_TIMEOUT_S,
                "every producer sending",
            )
            joiner = _joiner(cluster, tmp_path)
            joiner.start()
            cluster.brokers.append(joiner)  # stopped with the others
            new = _id(joiner)
            started = time.monotonic()

            def takes_load() -> bool:
                records = [_record(cluster, topic) for topic in TOPICS]
                leads = sum(1 for record in records if record["leader"] == new)
                holds = sum(
                    1
                    for record in records
                    if new in record["ensemble"]
                    and not record["data_dirs"].get(new, "").startswith("copying:")
                )
                return (leads >= 1 and holds >= 1) or bool(producers.failures)

            wait_until(takes_load, TAKES_LOAD_WITHIN_S, "the fourth broker to lead a topic")
            took_after = time.monotonic() - started

            # Each ensemble shrank again by the member its new one replaced.
            wait_until(
                lambda: _whole_ensembles(cluster), TAKES_LOAD_WITHIN_S, "ensembles back to three"
            )
            # Some more traffic through the new leader before the producers stop.
            sent_now = {topic: len(sent) for topic, sent in producers.acked.items()}
            wait_until(
                lambda: (
                    all(len(producers.acked[t]) > sent_now[t] + 10 for t in TOPICS)
                    or producers.failures
                ),
                OPERATION_TIMEOUT_S,
                "every producer sending on",
            )
        print(f"the fourth broker led a topic {took_after:.1f} s after it started")
        assert producers.failures == []
        records = {topic: _record(cluster, topic) for topic in TOPICS}
        print("ensembles after:", {t: (r["leader"], r["ensemble"]) for t, r in records.items()})
        assert sum(1 for record in records.values() if new in record["ensemble"]) >= 1
        _check_read_back(cluster.brokers, producers)


def test_a_joiner_killed_while_its_copies_are_made_leaves_the_ensembles_as_they_were(
    cluster_etcd: EtcdServer, tmp_path: Path
):
    with running_cluster(cluster_etcd, tmp_path, env=SLOW_COPIES) as cluster:
        with stableline.Client(_service(cluster.brokers)) as client:
            for topic in TOPICS:
                client.lookup_topic(topic)
        with Producers(cluster.brokers) as producers:
            wait_until(
                lambda: (
                    all(len(sent) >= 300 for sent in producers.acked.values()) or producers.failures
                ),
                OPERATION_TIMEOUT_S * 2,
                "every topic holding some 300 KiB",
            )
            joiner = _joiner(cluster, tmp_path)
            joiner.start()
            new = _id(joiner)

            def copying_to_it() -> bool:
                return any(
                    _record(cluster, topic)["data_dirs"].get(new, "").startswith("copying:")
                    for topic in TOPICS
                ) or bool(producers.failures)

            wait_until(copying_to_it, TAKES_LOAD_WITHIN_S, "a copy being made to the joiner")
            joiner.kill()
            # Its session lapses; each writer takes it out of the ensemble again.
            wait_until(
                lambda: _whole_ensembles(cluster, without=new),
                TAKES_LOAD_WITHIN_S,
                "the ensembles as they were, without the killed joiner",
            )
        assert producers.failures == []
        _check_read_back(cluster.brokers, producers)


def test_a_leader_killed_while_a_copy_of_its_topic_is_made_fails_over_and_the_swap_ends(
    cluster_etcd: EtcdServer, tmp_path: Path
):
    """Mid-swap the ensemble is one larger (four members, one copy being made): a
    failover still finds enough fenced members to serve the topic, the producers see
    no failed send, and the swap ends with every acknowledged message kept."""
    with running_cluster(cluster_etcd, tmp_path, env=SLOW_COPIES) as cluster:
        with stableline.Client(_service(cluster.brokers)) as client:
            for topic in TOPICS:
                client.lookup_topic(topic)
        with Producers(cluster.brokers) as producers:
            wait_until(
                lambda: (
                    all(len(sent) >= 300 for sent in producers.acked.values()) or producers.failures
                ),
                OPERATION_TIMEOUT_S * 2,
                "every topic holding some 300 KiB",
            )
            joiner = _joiner(cluster, tmp_path)
            joiner.start()
            cluster.brokers.append(joiner)  # stopped with the others
            new = _id(joiner)
            swapped: list[str] = []

            def copying_to_it() -> bool:
                swapped[:] = [
                    topic
                    for topic in TOPICS
                    if _record(cluster, topic)["data_dirs"].get(new, "").startswith("copying:")
                ]
                return bool(swapped) or bool(producers.failures)

            wait_until(copying_to_it, TAKES_LOAD_WITHIN_S, "a copy being made to the joiner")
            topic = swapped[0]
            killed = cluster.by_id(_record(cluster, topic)["leader"])
            killed.kill()
            gone = _id(killed)
            survivors = [broker for broker in cluster.brokers if broker is not killed]

            def taken_and_swapped() -> bool:
                record = _record(cluster, topic)
                return (
                    record["leader"] != gone
                    and "leaving" not in record
                    and not record["data_dirs"].get(new, "").startswith("copying:")
                ) or bool(producers.failures)

            wait_until(taken_and_swapped, TAKES_LOAD_WITHIN_S, "the topic taken, its swap done")
            sent_now = {t: len(sent) for t, sent in producers.acked.items()}
            wait_until(
                lambda: (
                    all(len(producers.acked[t]) > sent_now[t] + 10 for t in TOPICS)
                    or producers.failures
                ),
                OPERATION_TIMEOUT_S,
                "every producer sending on",
            )
        assert producers.failures == []
        _check_read_back(survivors, producers)
