"""A partitioned topic through the Kafka port: Kafka partition i is its partition
`T-partition-i`, produced and consumed by confluent-kafka and kafka-python, and the
same messages through the stableline SDK; where keys land with each client."""

from __future__ import annotations

import time

import pytest
from kafka.partitioner.default import murmur2

import stableline
from stableline._routing import key_partition
from tests.stableline.broker.kafka.conftest import (
    CLIENT_TIMEOUT_S,
    confluent_consume,
    kafka_python_consume,
    make_partitioned,
)

PARTITIONS = 4


def kafka_partition_of(key: bytes, count: int) -> int:
    """Where Kafka's Java client, kafka-python and librdkafka's murmur2 partitioner
    put a key."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def test_metadata_lists_every_partition_led_by_the_broker(module_kafka_broker):
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    topic = "listed"
    make_partitioned(module_kafka_broker, topic, PARTITIONS)
    consumer = KafkaConsumer(bootstrap_servers=module_kafka_broker.bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
        assert topic in consumer.topics()
        # Listed once, as the partitioned topic: its partitions are not topics of Kafka.
        assert not any(name.startswith(f"{topic}-partition-") for name in consumer.topics())
    finally:
        consumer.close()
    listed = AdminClient({"bootstrap.servers": module_kafka_broker.bootstrap}).list_topics(
        timeout=10
    )
    (broker,) = listed.brokers.values()
    assert (broker.id, broker.port) == (0, module_kafka_broker.kafka_port)
    partitions = listed.topics[topic].partitions
    assert sorted(partitions) == list(range(PARTITIONS))
    assert {p.leader for p in partitions.values()} == {0}


@pytest.mark.parametrize("producer", ["confluent-kafka", "kafka-python"])
def test_each_kafka_partition_is_its_stableline_partition(module_kafka_broker, producer):
    topic = f"each-{producer}"
    make_partitioned(module_kafka_broker, topic, PARTITIONS)
    sent = {p: [f"p{p}-{i}".encode() for i in range(20)] for p in range(PARTITIONS)}
    if producer == "confluent-kafka":
        from confluent_kafka import Producer

        client = Producer({"bootstrap.servers": module_kafka_broker.bootstrap, "linger.ms": 5})
        for partition, values in sent.items():
            for value in values:
                client.produce(topic, value=value, partition=partition)
        assert client.flush(CLIENT_TIMEOUT_S) == 0
    else:
        from kafka import KafkaProducer

        client = KafkaProducer(bootstrap_servers=module_kafka_broker.bootstrap, acks="all")
        for partition, values in sent.items():
            for value in values:
                client.send(topic, value=value, partition=partition)
        client.flush(CLIENT_TIMEOUT_S)
        client.close()
    for partition, values in sent.items():
        expected = list(enumerate(values))
        assert confluent_consume(module_kafka_broker.bootstrap, topic, 20, partition=partition) == (
            expected
        )
        assert kafka_python_consume(
            module_kafka_broker.bootstrap, topic, 20, partition=partition
        ) == (expected)
    # The SDK reads the same messages from each partition's own topic.
    with stableline.Client(module_kafka_broker.service_url) as client:
        for partition, values in sent.items():
            reader = client.create_reader(
                f"{topic}-partition-{partition}", stableline.MessageId.earliest
            )
            assert [reader.read_next(10_000).data() for _ in values] == values


def test_a_partition_beyond_the_count_is_unknown(module_kafka_broker):
    from confluent_kafka import KafkaError

    make_partitioned(module_kafka_broker, "two-partitions", 2)
    got = []

    def delivered(error, _message) -> None:
        got.append(error)

    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": module_kafka_broker.bootstrap, "message.timeout.ms": 3000}
    )
    producer.produce("two-partitions", value=b"x", partition=2, on_delivery=delivered)
    producer.flush(CLIENT_TIMEOUT_S)
    assert [error.code() for error in got] == [KafkaError._UNKNOWN_PARTITION]


def test_keys_land_where_each_client_puts_them(module_kafka_broker):
    """Kafka clients choose the partition of a keyed record themselves (murmur2,
    Java's; librdkafka with partitioner=murmur2_random); the SDK hashes keys with
    Pulsar's Murmur3. Each keeps every key on one partition, in order, but the two
    disagree on which."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    make_partitioned(module_kafka_broker, "by-kafka", PARTITIONS)
    make_partitioned(module_kafka_broker, "by-sdk", PARTITIONS)
    keys = [f"account-{i}".encode() for i in range(12)]
    python_producer = KafkaProducer(bootstrap_servers=module_kafka_broker.bootstrap, acks="all")
    confluent = Producer(
        {"bootstrap.servers": module_kafka_broker.bootstrap, "partitioner": "murmur2_random"}
    )
    for round_ in range(3):
        for key in keys:
            python_producer.send("by-kafka", key=key, value=b"python-%d" % round_)
            confluent.produce("by-kafka", key=key, value=b"confluent-%d" % round_)
    python_producer.flush(CLIENT_TIMEOUT_S)
    python_producer.close()
    assert confluent.flush(CLIENT_TIMEOUT_S) == 0
    with stableline.Client(module_kafka_broker.service_url) as client:
        for partition in range(PARTITIONS):
            reader = client.create_reader(
                f"by-kafka-partition-{partition}", stableline.MessageId.earliest
            )
            while reader.has_message_available():
                key = reader.read_next(10_000).partition_key().encode()
                assert kafka_partition_of(key, PARTITIONS) == partition
        producer = client.create_producer("by-sdk")
        for key in keys:
            producer.send(b"sdk", partition_key=key.decode())
        producer.flush()
    seen = read_keys(module_kafka_broker.bootstrap, "by-sdk", len(keys))
    assert sorted(seen) == sorted((key_partition(k.decode(), PARTITIONS), k) for k in keys)
    # The two hashes are different functions: these keys prove it.
    assert any(
        key_partition(k.decode(), PARTITIONS) != kafka_partition_of(k, PARTITIONS) for k in keys
    )


def read_keys(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    """(partition, key) of `count` records of every partition, with kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    assigned = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for partition, records in consumer.poll(timeout_ms=500).items():
                got.extend((partition.partition, record.key) for record in records)
    finally:
        consumer.close()
    return got
