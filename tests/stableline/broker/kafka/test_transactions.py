"""Kafka's TransactionsTest plans with real transactional producers (confluent-kafka
and kafka-python) on stableline transactions.

A read_committed consumer never sees undecided or aborted records and sees every
committed one, a read_uncommitted one sees all in log order; a second producer with
the same transactional.id fences the first; a Kafka transaction is seen by a
stableline READ_COMMITTED subscription only once committed (and an SDK transaction
by a Kafka read_committed consumer: tests/stableline/broker/kafka/test_read_committed.py); a broker
restarted or killed between produce and commit comes back with the same offsets and
last stable offset, the producer can still commit, and an id initialised again
after the restart fences the old epoch.
"""

from __future__ import annotations

import time

import pytest

import stableline
from tests.stableline.broker.kafka.conftest import (
    CLIENT_TIMEOUT_S,
    confluent_consume,
    confluent_produce,
    end_offset,
    kafka_python_consume,
)
from tests.stableline.broker.kafka.test_security import secure  # noqa: F401 (a module-scoped fixture)

TOPIC = "transfers"


class ConfluentTxnProducer:
    """A confluent-kafka (librdkafka) transactional producer."""

    def __init__(self, bootstrap: str, transactional_id: str, **config) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "linger.ms": 5,
                **config,
            }
        )
        self._producer.init_transactions(CLIENT_TIMEOUT_S)

    def send(self, values: list[bytes], topic: str = TOPIC) -> None:
        """Begin a transaction and write `values` to it, delivered (not ended)."""
        self._producer.begin_transaction()
        failures = []
        for value in values:
            self._producer.produce(
                topic, value=value, on_delivery=lambda e, _m: e and failures.append(e)
            )
        assert self._producer.flush(CLIENT_TIMEOUT_S) == 0 and not failures, failures

    def commit(self) -> None:
        self._producer.commit_transaction(CLIENT_TIMEOUT_S)

    def abort(self) -> None:
        self._producer.abort_transaction(CLIENT_TIMEOUT_S)

    def close(self) -> None:
        self._producer = None

    @staticmethod
    def fenced(error: BaseException) -> bool:
        from confluent_kafka import KafkaError, KafkaException

        if not isinstance(error, KafkaException):
            return False
        kafka_error = error.args[0]
        return kafka_error.fatal() and kafka_error.code() == KafkaError._FENCED


class KafkaPythonTxnProducer:
    """A kafka-python transactional producer."""

    def __init__(self, bootstrap: str, transactional_id: str, **config) -> None:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id, **config
        )
        self._producer.init_transactions()

    def send(self, values: list[bytes], topic: str = TOPIC) -> None:
        self._producer.begin_transaction()
        sent = [self._producer.send(topic, value=value) for value in values]
        self._producer.flush(CLIENT_TIMEOUT_S)
        for future in sent:
            future.get(CLIENT_TIMEOUT_S)

    def commit(self) -> None:
        self._producer.commit_transaction()

    def abort(self) -> None:
        self._producer.abort_transaction()

    def close(self) -> None:
        self._producer.close(timeout=1)

    @staticmethod
    def fenced(error: BaseException) -> bool:
        from kafka.errors import ProducerFencedError

        return isinstance(error, ProducerFencedError)


PRODUCERS = {"confluent-kafka": ConfluentTxnProducer, "kafka-python": KafkaPythonTxnProducer}
# Each producer's records are read by the other client.
CONSUMER_OF = {"confluent-kafka": kafka_python_consume, "kafka-python": confluent_consume}


@pytest.fixture(params=list(PRODUCERS))
def client(request) -> str:
    return request.param


def values(*names: str) -> list[bytes]:
    return [name.encode() for name in names]


def test_read_committed_sees_committed_never_aborted_nor_undecided_and_uncommitted_all(
    kafka_broker, client
):
    bootstrap = kafka_broker.bootstrap
    confluent_produce(bootstrap, TOPIC, values("p0"))
    producer = PRODUCERS[client](bootstrap, "transfers-1")
    try:
        producer.send(values("c0", "c1", "c2"))
        producer.commit()
        producer.send(values("a0", "a1"))
        producer.abort()
        confluent_produce(bootstrap, TOPIC, values("p1"))
        producer.send(values("u0", "u1"))  # undecided
        # p0, 3 committed + marker, 2 aborted + marker, p1: u0 is at offset 9.
        assert end_offset(bootstrap, TOPIC, "read_committed") == 9
        assert end_offset(bootstrap, TOPIC) == 11
        consume = CONSUMER_OF[client]
        everything = values("p0", "c0", "c1", "c2", "a0", "a1", "p1", "u0", "u1")
        got = consume(bootstrap, TOPIC, len(everything), "read_uncommitted")
        assert [value for _, value in got] == everything
        assert [offset for offset, _ in got] == [0, 1, 2, 3, 5, 6, 8, 9, 10]
        got = consume(bootstrap, TOPIC, 5, "read_committed")
        assert [value for _, value in got] == values("p0", "c0", "c1", "c2", "p1")
        producer.commit()
    finally:
        producer.close()
    got = consume(bootstrap, TOPIC, 7, "read_committed")
    assert [value for _, value in got] == values("p0", "c0", "c1", "c2", "p1", "u0", "u1")
    assert end_offset(bootstrap, TOPIC, "read_committed") == end_offset(bootstrap, TOPIC) == 12


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka_broker, client):
    bootstrap = kafka_broker.bootstrap
    first = PRODUCERS[client](bootstrap, "transfers-1")
    first.send(values("zombie"))
    second = PRODUCERS[client](bootstrap, "transfers-1")  # aborts what the first left open
    try:
        with pytest.raises(Exception) as refused:
            first.commit()
        assert first.fenced(refused.value), refused.value
        second.send(values("fresh"))
        second.commit()
    finally:
        first.close()
        second.close()
    consume = CONSUMER_OF[client]
    assert [value for _, value in consume(bootstrap, TOPIC, 1, "read_committed")] == [b"fresh"]
    got = consume(bootstrap, TOPIC, 2, "read_uncommitted")
    assert [value for _, value in got] == values("zombie", "fresh")


def test_a_kafka_transaction_reaches_a_stableline_read_committed_subscription_only_committed(
    kafka_broker,
):
    bootstrap = kafka_broker.bootstrap
    with stableline.Client(kafka_broker.service_url) as sdk:
        committed = sdk.subscribe(
            TOPIC,
            "committed-view",
            initial_position=stableline.InitialPosition.Earliest,
            isolation_level=stableline.IsolationLevel.READ_COMMITTED,
        )
        everything = sdk.subscribe(
            TOPIC,
            "everything",
            initial_position=stableline.InitialPosition.Earliest,
            isolation_level=stableline.IsolationLevel.READ_UNCOMMITTED,
        )
        producer = ConfluentTxnProducer(bootstrap, "transfers-1")
        try:
            producer.send(values("k0", "k1"))
            # Durable and delivered to READ_UNCOMMITTED; READ_COMMITTED waits.
            assert [everything.receive(10_000).value() for _ in range(2)] == values("k0", "k1")
            with pytest.raises(stableline.Timeout):
                committed.receive(300)
            producer.commit()
            assert [committed.receive(10_000).value() for _ in range(2)] == values("k0", "k1")
            producer.send(values("dropped"))
            producer.abort()
            producer.send(values("k2"))
            producer.commit()
        finally:
            producer.close()
        assert committed.receive(10_000).value() == b"k2"  # the aborted one skipped


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_a_broker_stopped_between_produce_and_commit_comes_back_with_the_same_offsets(
    kafka_broker, stop
):
    bootstrap = kafka_broker.bootstrap
    confluent_produce(bootstrap, TOPIC, values("before"))
    producer = ConfluentTxnProducer(bootstrap, "transfers-1")
    try:
        producer.send(values("t0", "t1"))
        watermarks = (end_offset(bootstrap, TOPIC), end_offset(bootstrap, TOPIC, "read_committed"))
        assert watermarks == (3, 1)
        if stop == "kill -9":
            kafka_broker.kill()
            kafka_broker.start()
        else:
            kafka_broker.restart()
        assert kafka_broker.bootstrap == bootstrap
        after = (end_offset(bootstrap, TOPIC), end_offset(bootstrap, TOPIC, "read_committed"))
        assert after == watermarks
        producer.commit()  # the transaction outlived the broker's run
    finally:
        producer.close()
    got = confluent_consume(bootstrap, TOPIC, 3, "read_committed")
    assert [value for _, value in got] == values("before", "t0", "t1")
    assert end_offset(bootstrap, TOPIC, "read_committed") == end_offset(bootstrap, TOPIC) == 4


@pytest.mark.slow
def test_an_id_initialised_again_after_a_kill_fences_the_old_epoch_and_aborts_its_records(
    kafka_broker,
):
    bootstrap = kafka_broker.bootstrap
    old = ConfluentTxnProducer(bootstrap, "transfers-1")
    try:
        old.send(values("t0", "t1"))
        kafka_broker.kill()
        kafka_broker.start()
        assert end_offset(bootstrap, TOPIC, "read_committed") == 0  # still undecided
        ConfluentTxnProducer(bootstrap, "transfers-1").close()  # aborts it, fences `old`
        assert end_offset(bootstrap, TOPIC, "read_committed") == end_offset(bootstrap, TOPIC) == 3
        with pytest.raises(Exception) as refused:
            old.commit()
        assert old.fenced(refused.value), refused.value
    finally:
        old.close()
    assert confluent_consume(bootstrap, TOPIC, 2, "read_uncommitted")[1][1] == b"t1"
    confluent_produce(bootstrap, TOPIC, values("after"))
    assert confluent_consume(bootstrap, TOPIC, 1, "read_committed") == [(3, b"after")]


# A copy of 40 records takes about 5 s here; past this it is stuck, not slow.
COPY_TIMEOUT_S = 120.0


def confluent_copy(bootstrap: str, source: str, sink: str, count: int) -> int:
    """Consume-transform-produce `count` records from `source` to `sink`, offsets
    committed in each transaction, every other transaction aborted (the consumer
    then rewinds to the committed offsets); the transactions it took."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "copier",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([source])
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "copier-1", "linger.ms": 5}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    copied = transactions = 0
    deadline = time.monotonic() + COPY_TIMEOUT_S
    try:
        while copied < count:
            assert time.monotonic() < deadline, f"copied {copied} of {count} in {transactions}"
            batch = [m for m in consumer.consume(5, 0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce(sink, value=message.value())
            positions = consumer.position(consumer.assignment())
            metadata = consumer.consumer_group_metadata()
            producer.send_offsets_to_transaction(positions, metadata, CLIENT_TIMEOUT_S)
            transactions += 1
            if transactions % 2 == 0:
                producer.abort_transaction(CLIENT_TIMEOUT_S)
                for committed in consumer.committed(consumer.assignment(), CLIENT_TIMEOUT_S):
                    offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
                    consumer.seek(TopicPartition(committed.topic, committed.partition, offset))
            else:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
                copied += len(batch)
    finally:
        consumer.close()
    return transactions


def kafka_python_copy(bootstrap: str, source: str, sink: str, count: int) -> int:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id="copier",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="copier-1")
    producer.init_transactions()
    copied = transactions = 0
    deadline = time.monotonic() + COPY_TIMEOUT_S
    try:
        while copied < count:
            assert time.monotonic() < deadline, f"copied {copied} of {count} in {transactions}"
            batch = [r for rs in consumer.poll(500, max_records=5).values() for r in rs]
            if not batch:
                continue
            producer.begin_transaction()
            for record in batch:
                producer.send(sink, value=record.value)
            offsets = {tp: OffsetAndMetadata(consumer.position(tp)) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            transactions += 1
            if transactions % 2 == 0:
                producer.abort_transaction()
                for tp in consumer.assignment():
                    committed = consumer.committed(tp)
                    consumer.seek(tp, 0 if committed is None else committed)
            else:
                producer.commit_transaction()
                copied += len(batch)
    finally:
        consumer.close()
        producer.close(timeout=1)
    return transactions


COPIERS = {"confluent-kafka": confluent_copy, "kafka-python": kafka_python_copy}


@pytest.mark.slow
def test_consume_transform_produce_with_every_other_transaction_aborted_copies_each_once(
    kafka_broker, client
):
    bootstrap = kafka_broker.bootstrap
    count = 40
    originals = [f"record-{index}".encode() for index in range(count)]
    confluent_produce(bootstrap, "source", originals)
    transactions = COPIERS[client](bootstrap, "source", "sink", count)
    assert transactions >= 2 * count // 5 - 1  # half of them aborted, each re-done
    consume = CONSUMER_OF[client]
    got = consume(bootstrap, "sink", count, "read_committed")
    assert [value for _, value in got] == originals  # exactly once, in order
    assert end_offset(bootstrap, "sink", "read_committed") == end_offset(bootstrap, "sink")
    # The group's committed offset is the end of the source, as a new member finds it,
    # and so is its subscription's acknowledgement: nothing of the source is left.
    assert committed_offset(bootstrap, "copier", "source") == count
    stats = kafka_broker.admin("/admin/v2/persistent/public/default/source/stats")
    assert stats["subscriptions"]["copier"]["msgBacklog"] == 0


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (partition,) = consumer.committed([TopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
        return partition.offset
    finally:
        consumer.close()


def test_with_authentication_a_transactional_id_is_each_roles_own(secure):  # noqa: F811
    """Over SASL_SSL a transactional id belongs to the role using it, as transaction
    names do: another role's producer with the same id fences nothing of it."""
    secure.grant("alice", ["produce", "consume"])
    secure.grant("bob", ["produce", "consume"])
    bootstrap = secure.process.kafka_bootstrap
    alice = ConfluentTxnProducer(bootstrap, "shared-id", **secure.confluent("alice"))
    bob = ConfluentTxnProducer(bootstrap, "shared-id", **secure.confluent("bob"))
    try:
        alice.send(values("from-alice"), topic="roles")
        bob.send(values("from-bob"), topic="roles")
        bob.commit()
        alice.commit()  # not fenced by bob's init
    finally:
        alice.close()
        bob.close()
    got = confluent_consume(bootstrap, "roles", 2, "read_committed", **secure.confluent("alice"))
    assert sorted(value for _, value in got) == values("from-alice", "from-bob")
