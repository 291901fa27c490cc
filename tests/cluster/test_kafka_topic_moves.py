"""Kafka clients, unchanged, while their topic moves (three real brokers on one real
etcd, the default 3/3/2 policy), as they ride through a partition reassignment: an
idempotent confluent-kafka producer (acks=all) sees no failed delivery while its topic
is transferred twice and unloaded once, or while its leader is stopped with SIGTERM
(handing it over) and started again; every payload is in the log once, in the order
sent; a read_committed consumer group reads each once, in order, and its committed
offset is answered after the moves where it was; a transaction open across a transfer
commits, so do transactions committed one after another through the moves, and an
offset sent to a transaction before its input partition moves is the group's once it
commits."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S

from .conftest import Cluster, running_cluster
from .test_kafka_failover import _read_committed
from .test_topic_moves import _admin, _other_members, _path

_names = itertools.count()
# How long the clients may take to follow a move (their retries within it).
FOLLOW_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("kafka-moves")
    with running_cluster(cluster_etcd, root, kafka=True) as started:
        yield started


def _bootstrap(cluster: Cluster) -> str:
    return ",".join(b.kafka_bootstrap for b in cluster.brokers)


def _full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


class KafkaLoad:
    """An idempotent producer (acks=all) sending unique payloads in a thread, each
    delivery's outcome kept, and a read_committed group member in another thread,
    reading and committing as it goes (each commit the coordinator answered done
    kept, with its time)."""

    def __init__(self, cluster: Cluster, topic: str, group: str):
        self.cluster, self.topic, self.group = cluster, topic, group
        self.delivered: list[bytes] = []
        self.failed: list[str] = []
        self.read: list[tuple[bytes, int]] = []  # (payload, offset) as delivered
        self.commits: list[tuple[float, int]] = []  # (when, offset) answered done
        self.consumer_errors: list[str] = []
        self._sent = 0
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._assigned = threading.Event()
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._consumer = threading.Thread(target=self._consume, daemon=True)

    def __enter__(self) -> KafkaLoad:
        self._consumer.start()
        assert self._assigned.wait(FOLLOW_WITHIN_S), "the group member got no partition"
        self._producer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop_producing.set()
        self._stop_consuming.set()
        self._producer.join(FOLLOW_WITHIN_S * 2)
        self._consumer.join(FOLLOW_WITHIN_S * 2)

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": _bootstrap(self.cluster),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "delivery.timeout.ms": int(FOLLOW_WITHIN_S * 1000),
            }
        )

        def on_delivery(error, message) -> None:
            if error is None:
                self.delivered.append(message.value())
            else:
                self.failed.append(f"{message.value()!r}: {error}")

        while not self._stop_producing.is_set():
            producer.produce(self.topic, b"m-%07d" % self._sent, on_delivery=on_delivery)
            self._sent += 1
            producer.poll(0.005)
        producer.flush(FOLLOW_WITHIN_S * 2)
        self.failed.extend(
            ["never answered"] * (self._sent - len(self.delivered) - len(self.failed))
        )

    def _consume(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": _bootstrap(self.cluster),
                "group.id": self.group,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([self.topic], on_assign=lambda *_: self._assigned.set())
        try:
            while not self._stop_consuming.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().fatal():
                        self.consumer_errors.append(str(message.error()))
                    continue
                self.read.append((message.value(), message.offset()))
                if len(self.read) % 20 == 0:
                    offset = message.offset() + 1
                    try:
                        (done,) = consumer.commit(
                            offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=False
                        )
                    except KafkaException:
                        continue  # the coordinator or the partition moving: the next one
                    if done.error is None:
                        self.commits.append((time.monotonic(), offset))
        finally:
            consumer.close()

    def wait_delivered(self, more: int) -> None:
        target = len(self.delivered) + more
        wait_until(
            lambda: len(self.delivered) >= target or self.failed,
            FOLLOW_WITHIN_S,
            f"{more} more deliveries",
        )
        assert self.failed == []

    def last_commit_before(self, moment: float) -> int:
        done = [offset for when, offset in self.commits if when < moment]
        assert done, "no commit before the move"
        return done[-1]

    def check(self) -> None:
        """Stops producing, then checks what the producer and the member saw. The
        member reads as the log grows, so a payload written twice shows at two
        offsets (the log itself may be trimmed behind the group's commits)."""
        self._stop_producing.set()
        self._producer.join(FOLLOW_WITHIN_S * 2)
        assert self.failed == [], self.failed[:5]
        sent = [b"m-%07d" % n for n in range(self._sent)]
        assert sorted(self.delivered) == sent
        wanted = set(sent)
        wait_until(
            lambda: wanted <= {payload for payload, _ in self.read},
            FOLLOW_WITHIN_S,
            "every delivered payload read by the group",
        )
        self._stop_consuming.set()
        self._consumer.join(FOLLOW_WITHIN_S * 2)
        assert self.consumer_errors == []
        # One offset per payload (none written twice), read in the order sent.
        offsets: dict[bytes, set[int]] = {}
        for payload, offset in self.read:
            offsets.setdefault(payload, set()).add(offset)
        assert {p: o for p, o in offsets.items() if len(o) > 1} == {}
        # The topic's first message (_new_topic's) is read too.
        first_reads = list(dict.fromkeys(payload for payload, _ in self.read))
        assert first_reads == [b"first", *sent]


def _committed(cluster: Cluster, group: str, topic: str) -> int:
    """The group's committed offset of partition 0, as its coordinator answers now
    (asked again while the coordinator or the partition's owner is moving)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": _bootstrap(cluster), "group.id": group})
    try:
        deadline = time.monotonic() + FOLLOW_WITHIN_S
        while True:
            try:
                (answer,) = consumer.committed([TopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
                if answer.error is None:
                    return answer.offset
                last: object = answer.error
            except KafkaException as error:
                last = error
            if time.monotonic() > deadline:
                pytest.fail(f"no committed offset within {FOLLOW_WITHIN_S}s: {last}")
            time.sleep(0.2)  # the next try, not a wait for the condition
    finally:
        consumer.close()


def _new_topic(cluster: Cluster) -> str:
    """A new topic (made by a first send), with its three copies."""
    from confluent_kafka import Producer

    topic = f"kmove-{next(_names)}-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": _bootstrap(cluster)})
    producer.produce(topic, b"first")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return topic


def _move(cluster: Cluster, topic: str, how: str) -> str:
    """Unload or transfer `topic` at its owner; the broker that leads it after."""
    leader = cluster.topic_leader(_full(topic))
    owner = cluster.by_id(leader)
    if how == "unload":
        status, body = _admin(owner, "PUT", _path(_full(topic)) + "/unload")
        assert status == 204, body
    else:
        target = _other_members(cluster, _full(topic))[0]
        status, body = _admin(owner, "POST", _path(_full(topic)) + f"/transfer?broker={target}")
        assert status == 200, body
        assert json.loads(body) == {"broker": target}
    after = cluster.topic_leader(_full(topic))
    assert after != leader
    return after


# How long a broker's records watch may take to see a record another broker wrote.
WATCH_LAG_S = 5.0


def _metadata_leader(broker, topic: str) -> int:
    """Partition 0's leader (Kafka node id) as `broker`'s Metadata names it."""
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": broker.kafka_bootstrap}).list_topics(
        topic, timeout=10
    )
    return listed.topics[topic].partitions[0].leader


def _wait_metadata_names(cluster: Cluster, topic: str, leader: str) -> None:
    """Every broker's Metadata names `leader` (a broker id) once its watch has seen
    the record: at once at the brokers that wrote it, within WATCH_LAG_S elsewhere."""
    node = _node_id(cluster, leader)
    for broker in cluster.brokers:
        wait_until(
            lambda broker=broker: _metadata_leader(broker, topic) == node,
            WATCH_LAG_S,
            f"{broker.kafka_bootstrap}'s Metadata naming node {node}",
        )


def _node_id(cluster: Cluster, broker_id: str) -> int:
    record = cluster.read_record(f"/stableline/brokers/{cluster.name}/{broker_id}")
    assert record is not None
    return record["kafka_node_id"]


def _check_log(cluster: Cluster, topic: str, sent: list[bytes]) -> None:
    """The partition holds the first payload, then each sent one once, in order (a
    topic no subscription has consumed: retention keeps every ledger)."""
    assert _read_committed(cluster.brokers, topic, len(sent) + 1) == [b"first", *sent]


def test_an_idempotent_producer_and_a_group_ride_through_transfers_and_an_unload(
    kafka_cluster: Cluster,
):
    topic = _new_topic(kafka_cluster)
    group = f"kmove-group-{uuid.uuid4().hex}"
    with KafkaLoad(kafka_cluster, topic, group) as load:
        load.wait_delivered(200)
        for how in ("transfer", "transfer", "unload"):
            wait_until(lambda: load.commits, FOLLOW_WITHIN_S, "a commit")
            started = time.monotonic()
            committed_before = load.last_commit_before(started)
            leader = _move(kafka_cluster, topic, how)
            _wait_metadata_names(kafka_cluster, topic, leader)
            # The group's offsets, kept at the partition's owner, moved with it.
            assert _committed(kafka_cluster, group, topic) >= committed_before
            load.wait_delivered(200)
        load.check()
        last = load.commits[-1][1]
    assert _committed(kafka_cluster, group, topic) == last


def test_an_idempotent_producer_and_a_group_ride_through_a_sigterm_of_the_leader(
    kafka_cluster: Cluster,
):
    topic = _new_topic(kafka_cluster)
    group = f"kmove-group-{uuid.uuid4().hex}"
    with KafkaLoad(kafka_cluster, topic, group) as load:
        load.wait_delivered(200)
        wait_until(lambda: load.commits, FOLLOW_WITHIN_S, "a commit")
        leader = kafka_cluster.topic_leader(_full(topic))
        stopping = kafka_cluster.by_id(leader)
        committed_before = load.last_commit_before(time.monotonic())
        assert stopping.stop() == 0
        try:
            new_leader = kafka_cluster.topic_leader(_full(topic))
            assert new_leader != leader
            assert f"topic {_full(topic)}: handed over to broker {new_leader}" in stopping.log()
            load.wait_delivered(200)
            assert _committed(kafka_cluster, group, topic) >= committed_before
        finally:
            stopping.start()
        load.wait_delivered(200)
        load.check()
        last = load.commits[-1][1]
    assert _committed(kafka_cluster, group, topic) == last


def test_a_kafka_transaction_open_across_a_transfer_commits(kafka_cluster: Cluster):
    from confluent_kafka import Producer

    topic = _new_topic(kafka_cluster)
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(kafka_cluster),
            "transactional.id": f"kmove-txn-{uuid.uuid4().hex}",
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    before = [b"before-%d" % i for i in range(10)]
    for payload in before:
        producer.produce(topic, payload)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    _move(kafka_cluster, topic, "transfer")
    after = [b"after-%d" % i for i in range(10)]
    for payload in after:
        producer.produce(topic, payload)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    _check_log(kafka_cluster, topic, before + after)


@pytest.mark.parametrize("moves", ["transfers and an unload", "sigterm of the leader"])
def test_kafka_transactions_committed_in_a_loop_through_moves_all_commit(
    kafka_cluster: Cluster, moves: str
):
    """Transactions of ten messages, one after another, while the topic is
    transferred twice and unloaded, or while its leader is stopped with SIGTERM and
    started again: no call of the producer fails (its client retries what the moves
    refuse by itself), and a read_committed reader reads them all."""
    from confluent_kafka import KafkaException, Producer

    topic = _new_topic(kafka_cluster)
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(kafka_cluster),
            "transactional.id": f"kmove-loop-{uuid.uuid4().hex}",
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    committed: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def transactions() -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            payloads = [b"t-%05d-%d" % (n, i) for i in range(10)]
            try:
                producer.begin_transaction()
                for payload in payloads:
                    producer.produce(topic, payload)
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            except KafkaException as error:
                errors.append(str(error))
                return
            committed.extend(payloads)

    worker = threading.Thread(target=transactions, daemon=True)
    worker.start()

    def more_commits() -> None:
        target = len(committed) + 50
        wait_until(lambda: len(committed) >= target or errors, FOLLOW_WITHIN_S, "commits")
        assert errors == []

    try:
        if moves == "sigterm of the leader":
            more_commits()
            stopping = kafka_cluster.by_id(kafka_cluster.topic_leader(_full(topic)))
            assert stopping.stop() == 0
            try:
                more_commits()
            finally:
                stopping.start()
        else:
            for how in ("transfer", "transfer", "unload"):
                more_commits()
                _move(kafka_cluster, topic, how)
        more_commits()
    finally:
        stop.set()
        worker.join(FOLLOW_WITHIN_S * 2)
    assert errors == []
    _check_log(kafka_cluster, topic, committed)


def test_an_offset_sent_to_a_transaction_before_its_partition_moves_is_committed(
    kafka_cluster: Cluster,
):
    """Consume-transform-produce across a move: send_offsets_to_transaction holds the
    group's offset on the input partition's owner, the input topic is transferred,
    the transaction commits, and the group's offset is the one sent."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    source = _new_topic(kafka_cluster)
    sink = _new_topic(kafka_cluster)
    plain = Producer({"bootstrap.servers": _bootstrap(kafka_cluster)})
    for i in range(10):
        plain.produce(source, b"in-%d" % i)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0
    group = f"kmove-ctp-{uuid.uuid4().hex}"
    consumer = Consumer({"bootstrap.servers": _bootstrap(kafka_cluster), "group.id": group})
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(kafka_cluster),
            "transactional.id": f"kmove-ctp-{uuid.uuid4().hex}",
            "transaction.timeout.ms": 60_000,
        }
    )
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(sink, b"out")
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 7)], consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S
        )
        _move(kafka_cluster, source, "transfer")
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        wait_until(
            lambda: _committed(kafka_cluster, group, source) == 7,
            FOLLOW_WITHIN_S,
            "the offset sent to the transaction committed",
        )
    finally:
        consumer.close()
