"""A rolling restart of a three-broker cluster (one real etcd) under load: each broker
in turn gets SIGTERM, is started again on its data dir and rejoins before the next,
while clients that retry within their operation timeout by themselves keep working.

The load: a plain producer and a transactional producer (one message to each of two
3/3/2 topics per transaction, one transaction in five aborted) through the SDK,
Exclusive READ_COMMITTED and READ_UNCOMMITTED subscriptions consuming and
acknowledging; a confluent-kafka transactional producer (one in five aborted too)
and a read_committed Kafka consumer reading. "Rejoins" is what an operator waits
for before the next broker: every topic's writer has all its copies up again.
Promised: no client call fails (no send, receive, commit or abort), and the history
is clean by scripts/faults/checker.py (nothing lost, nothing written twice, no
reorder per producer, nothing aborted or partial seen by READ_COMMITTED); the Kafka
consumer reads every committed record once, in order, and no aborted one."""

from __future__ import annotations

import importlib
import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import stableline
from tests.conftest import wait_until

from .conftest import Cluster, running_cluster

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "faults"
# Each client's own budget for one call: longer than a stop and a start.
OPERATION_TIMEOUT_S = 30.0
# Rounds of every load between two steps of the restart, so each step runs under load.
ROUNDS_PER_STEP = 5
STEP_TIMEOUT_S = 60.0
CATCH_UP_TIMEOUT_S = 60.0
RC = stableline.IsolationLevel.READ_COMMITTED
RU = stableline.IsolationLevel.READ_UNCOMMITTED
EARLIEST = stableline.InitialPosition.Earliest

_runs = itertools.count()
PRODUCER_LOOPS = ("plain", "transactions", "kafka-producer")
# One transaction in this many is aborted (SDK and Kafka): READ_COMMITTED must not see it.
ABORT_EVERY = 5


@pytest.fixture
def checker(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("checker")


class Load:
    """The clients' loops, each on a thread of its own; what they did and every failed
    call, kept for the checks."""

    def __init__(self, checker, seeds: str, kafka_bootstrap: str, topics: list[str], kafka: str):
        self.checker = checker
        self.seeds = seeds
        self.bootstrap = kafka_bootstrap
        self.topics = topics
        self.kafka_topic = kafka
        self.history = checker.History()
        self.failures: list[str] = []
        self.rounds: dict[str, int] = {}
        self.kafka_committed: list[bytes] = []
        self.kafka_seen: list[tuple[int, bytes]] = []
        self.stopping = threading.Event()  # the producers stop
        self.caught_up = threading.Event()  # the consumers stop
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _client(self) -> stableline.Client:
        return stableline.Client(self.seeds, operation_timeout_seconds=OPERATION_TIMEOUT_S)

    def _failed(self, what: str, error: BaseException) -> None:
        with self._lock:
            self.failures.append(f"{what}: {type(error).__name__}: {error}")

    def _round(self, name: str) -> None:
        with self._lock:
            self.rounds[name] = self.rounds.get(name, 0) + 1

    def start(self) -> None:
        loops: list[tuple[str, Callable[[], None]]] = [
            ("plain", self._plain),
            ("transactions", self._transactions),
            ("kafka-producer", self._kafka_producer),
            ("kafka-consumer", self._kafka_consumer),
        ]
        for index, topic in enumerate(self.topics):
            loops.append((f"rc-{index}", lambda topic=topic, i=index: self._consume(topic, RC, i)))
        loops.append(("ru-0", lambda: self._consume(self.topics[0], RU, 0)))
        for name, loop in loops:
            thread = threading.Thread(target=loop, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def rounds_of_all(self) -> int:
        """The rounds of the loop that made fewest (every loop counts once running)."""
        with self._lock:
            return min(self.rounds.get(thread.name, 0) for thread in self._threads)

    def stop_producers(self) -> None:
        """Every producer's last call answered: what they did is all known."""
        self.stopping.set()
        self._join([t for t in self._threads if t.name in PRODUCER_LOOPS])

    def stop_consumers(self) -> None:
        self.caught_up.set()
        self._join([t for t in self._threads if t.name not in PRODUCER_LOOPS])

    @staticmethod
    def _join(threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join(OPERATION_TIMEOUT_S * 2)
            assert not thread.is_alive(), f"{thread.name} did not stop"

    # ---------------------------------------------------------------- loops

    def _plain(self) -> None:
        topic, checker = self.topics[0], self.checker
        with self._client() as client:
            producer = client.create_producer(topic, producer_name="plain")
            for seq in itertools.count():
                if self.stopping.is_set():
                    return
                payload = f"plain:{seq}"
                try:
                    message_id = producer.send(payload.encode())
                except Exception as error:
                    self._failed(f"send {payload}", error)
                    self.history.sends.append(
                        checker.Send(topic, "plain", seq, payload, checker.UNKNOWN)
                    )
                    continue
                self.history.sends.append(
                    checker.Send(topic, "plain", seq, payload, checker.ACKED, str(message_id))
                )
                self._round("plain")

    def _transactions(self) -> None:
        checker = self.checker
        with self._client() as client:
            producers = {
                topic: client.create_producer(topic, producer_name=f"tx.{index}")
                for index, topic in enumerate(self.topics)
            }
            for number in itertools.count():
                if self.stopping.is_set():
                    return
                name = f"t{number}"
                self.history.transactions[name] = checker.TxnOutcome.OPEN
                try:
                    txn = client.new_transaction(timeout_ms=60_000)
                    for index, topic in enumerate(self.topics):
                        payload = f"tx.{index}:{number}"
                        message_id = producers[topic].send(payload.encode(), txn=txn)
                        self.history.sends.append(
                            checker.Send(
                                topic,
                                f"tx.{index}",
                                number,
                                payload,
                                checker.ACKED,
                                str(message_id),
                                name,
                            )
                        )
                    self.history.transactions[name] = checker.TxnOutcome.UNKNOWN
                    abort = number % ABORT_EVERY == ABORT_EVERY - 1
                    (txn.abort if abort else txn.commit)()
                except Exception as error:
                    self._failed(f"transaction {name}", error)
                    continue
                self.history.transactions[name] = (
                    checker.TxnOutcome.ABORTED if abort else checker.TxnOutcome.COMMITTED
                )
                self._round("transactions")

    def _consume(self, topic: str, level: stableline.IsolationLevel, index: int) -> None:
        name = f"{'rc' if level is RC else 'ru'}-{index}"
        log = self.checker.SubscriptionLog(name, topic, level is RC, exclusive=True)
        self.history.subscriptions.append(log)
        with self._client() as client:
            consumer = client.subscribe(
                topic,
                name,
                consumer_type=stableline.ConsumerType.Exclusive,
                initial_position=EARLIEST,
                isolation_level=level,
            )
            while not self.caught_up.is_set():
                try:
                    message = consumer.receive(timeout_millis=500)
                except stableline.Timeout:
                    continue
                except Exception as error:
                    self._failed(f"receive on {name}", error)
                    continue
                log.delivered(message.data().decode(), str(message.message_id()))
                try:
                    consumer.acknowledge(message)
                except Exception as error:
                    self._failed(f"acknowledge on {name}", error)
                self._round(name)

    def _kafka_producer(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"rolling-{next(_runs)}",
                "transaction.timeout.ms": 60_000,
            }
        )
        try:
            producer.init_transactions(OPERATION_TIMEOUT_S)
        except Exception as error:
            self._failed("kafka init_transactions", error)
            return
        for number in itertools.count():
            if self.stopping.is_set():
                return
            abort = number % ABORT_EVERY == ABORT_EVERY - 1
            payload = f"k:{number}{':aborted' if abort else ''}".encode()
            try:
                producer.begin_transaction()
                producer.produce(self.kafka_topic, payload)
                producer.flush(OPERATION_TIMEOUT_S)
                if abort:
                    producer.abort_transaction(OPERATION_TIMEOUT_S)
                else:
                    producer.commit_transaction(OPERATION_TIMEOUT_S)
            except Exception as error:
                self._failed(f"kafka transaction {payload!r}", error)
                return  # its state is unknown: the checks below say what it cost
            if not abort:
                self.kafka_committed.append(payload)
            self._round("kafka-producer")

    def _kafka_consumer(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "unused",  # assigned: no group coordination
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        consumer.assign([TopicPartition(self.kafka_topic, 0, OFFSET_BEGINNING)])
        try:
            while not self.caught_up.is_set():
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF and not error.retriable():
                        self._failed("kafka poll", KafkaErrorText(str(error)))
                    continue
                self.kafka_seen.append((message.offset(), message.value()))
                self._round("kafka-consumer")
        finally:
            consumer.close()


class KafkaErrorText(Exception):
    """A confluent-kafka error, as its text."""


def _wait_for_rounds(load: Load, rounds: int, what: str) -> None:
    """Until every loop has made `rounds` rounds; else fail naming the laggards."""
    try:
        wait_until(lambda: load.rounds_of_all() >= rounds, STEP_TIMEOUT_S, what)
    except AssertionError as error:
        raise AssertionError(f"{error}: rounds {load.rounds}, failures {load.failures}") from None


def _fully_replicated(cluster: Cluster, topics: list[str]) -> bool:
    """Whether every topic's writer has all its copies up (a restarted member is
    back and caught up): what an operator waits for before the next broker, as
    Kafka's waits for no under-replicated partition."""
    for topic in topics:
        try:
            owner = cluster.by_id(cluster.topic_leader(topic))
            stats = owner.admin(f"/admin/v2/{topic.replace('://', '/')}/stats")
        except (OSError, ValueError):  # moving meanwhile: asked again
            return False
        if stats.get("replication", {}).get("underReplicated", True):
            return False
    return True


def _restart(cluster: Cluster, broker, load: Load, topics: list[str]) -> None:
    """SIGTERM, a clean exit, a start on the same data dir; then the broker holds its
    copies again and the loads made progress."""
    before = load.rounds_of_all()
    assert broker.stop() == 0, broker.log()[-4000:]
    broker.start()
    wait_until(
        lambda: _fully_replicated(cluster, topics),
        STEP_TIMEOUT_S,
        f"every topic fully replicated again after restarting {broker.target}",
    )
    _wait_for_rounds(
        load, before + ROUNDS_PER_STEP, f"every load going on after restarting {broker.target}"
    )


def test_a_rolling_restart_under_plain_transactional_and_kafka_load_fails_no_call(
    cluster_etcd, tmp_path, checker
):
    with running_cluster(cluster_etcd, tmp_path, kafka=True) as cluster:
        seeds = ",".join(broker.service_url for broker in cluster.brokers)
        bootstrap = ",".join(broker.kafka_bootstrap for broker in cluster.brokers)
        topics = [f"persistent://public/default/rolling-{index}" for index in range(2)]
        kafka_topic = "rolling-kafka"
        with stableline.Client(seeds) as client:
            for topic in [*topics, f"persistent://public/default/{kafka_topic}"]:
                client.create_producer(topic).close()
        load = Load(checker, seeds, bootstrap, topics, kafka_topic)
        load.start()
        try:
            _wait_for_rounds(load, ROUNDS_PER_STEP, "every load going")
            every_topic = [*topics, f"persistent://public/default/{kafka_topic}"]
            for broker in cluster.brokers:
                _restart(cluster, broker, load, every_topic)
        finally:
            load.stop_producers()
        # The consumers catch up with every acknowledged send, then stop.
        acked = {
            (send.topic, send.payload)
            for send in load.history.sends
            if send.outcome == checker.ACKED
            and (
                send.txn is None
                or load.history.transactions[send.txn] is checker.TxnOutcome.COMMITTED
            )
        }

        def caught_up() -> bool:
            seen = {
                (log.topic, event.payload)
                for log in load.history.subscriptions
                if log.read_committed
                for event in log.events
                if isinstance(event, checker.Delivered)
            }
            kafka = {value for _, value in load.kafka_seen}
            return acked <= seen and set(load.kafka_committed) <= kafka

        try:
            wait_until(caught_up, CATCH_UP_TIMEOUT_S, "the consumers catching up")
        finally:
            load.stop_consumers()
        assert load.failures == []
        violations = checker.check(load.history)
        assert violations == [], "\n".join(str(v) for v in violations)
        # Kafka: each committed record once, in offset order, in the order committed,
        # and nothing of an aborted one.
        offsets = [offset for offset, _ in load.kafka_seen]
        assert offsets == sorted(set(offsets))
        assert [value for _, value in load.kafka_seen] == load.kafka_committed
