"""A real broker with its Kafka port open, and real Kafka clients from PyPI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline.testing import BrokerProcess

# Clients give up on a broker this long after it stops answering.
CLIENT_TIMEOUT_S = 20.0


class KafkaBroker(BrokerProcess):
    """A BrokerProcess with its Kafka port open on a free port (kept across restarts)."""

    def __init__(self, data_dir: Path, **options) -> None:
        super().__init__(data_dir, kafka_port=0, **options)

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    process = KafkaBroker(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        code = process.stop()
        assert code in (0, -9), f"broker exited with {code}\n{process.log()}"


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], **config) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    for value in values:
        producer.produce(topic, value=value, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "messages still undelivered"
    assert not failures, failures


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(topic, value=value)
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()


def confluent_consume(
    bootstrap: str,
    topic: str,
    count: int,
    isolation: str = "read_uncommitted",
    partition: int = 0,
    **config,
) -> list[tuple[int, bytes]]:
    """(offset, value) of the first `count` records of a partition from its earliest
    offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # assigned partitions: no group coordination
            "enable.auto.commit": False,
            "isolation.level": isolation,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    count: int,
    isolation: str = "read_uncommitted",
    partition: int = 0,
    **config,
) -> list[tuple[int, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        **config,
    )
    assigned = TopicPartition(topic, partition)
    consumer.assign([assigned])
    consumer.seek_to_beginning(assigned)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((record.offset, record.value) for record in records)
    finally:
        consumer.close()
    return got


def end_offset(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> int:
    """The partition's end offset (ListOffsets latest) at an isolation level."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation)
    try:
        partition = TopicPartition(topic, 0)
        return consumer.end_offsets([partition])[partition]
    finally:
        consumer.close()
