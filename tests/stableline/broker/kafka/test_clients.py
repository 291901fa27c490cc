"""Real Kafka clients (librdkafka through confluent-kafka, and kafka-python) against
a real broker's Kafka port: what one writes the other reads, in order, at
consecutive offsets, across restarts and crashes."""

from __future__ import annotations

import pytest

from tests.stableline.broker.kafka.conftest import (
    confluent_consume,
    confluent_produce,
    end_offset,
    kafka_python_consume,
    kafka_python_produce,
)

VALUES = [f"message-{i:04d}".encode() for i in range(200)]


def test_confluent_produces_and_kafka_python_reads_in_order_at_consecutive_offsets(
    kafka_broker,
):
    confluent_produce(kafka_broker.bootstrap, "orders", VALUES)
    got = kafka_python_consume(kafka_broker.bootstrap, "orders", len(VALUES))
    assert got == list(enumerate(VALUES))


def test_kafka_python_produces_and_confluent_reads_in_order_at_consecutive_offsets(
    kafka_broker,
):
    kafka_python_produce(kafka_broker.bootstrap, "orders", VALUES)
    got = confluent_consume(kafka_broker.bootstrap, "orders", len(VALUES))
    assert got == list(enumerate(VALUES))


def test_an_idempotent_compressed_producer_writes_each_message_once(kafka_broker):
    # librdkafka compresses each batch with its codec; each topic gets one codec.
    for codec in ("gzip", "lz4", "zstd"):
        confluent_produce(
            kafka_broker.bootstrap,
            codec,
            VALUES,
            **{"enable.idempotence": True, "compression.type": codec, "acks": "all"},
        )
        got = confluent_consume(kafka_broker.bootstrap, codec, len(VALUES))
        assert got == list(enumerate(VALUES)), codec
        assert end_offset(kafka_broker.bootstrap, codec) == len(VALUES)
    kafka_python_produce(kafka_broker.bootstrap, "lz4-python", VALUES, compression_type="lz4")
    assert kafka_python_consume(kafka_broker.bootstrap, "lz4-python", len(VALUES)) == list(
        enumerate(VALUES)
    )


@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_offsets_continue_where_they_were_after_a_restart(kafka_broker, stop):
    confluent_produce(kafka_broker.bootstrap, "orders", VALUES[:100])
    if stop == "kill -9":
        kafka_broker.kill()
        kafka_broker.start()
    else:
        kafka_broker.restart()
    assert kafka_python_consume(kafka_broker.bootstrap, "orders", 100) == list(
        enumerate(VALUES[:100])
    )
    confluent_produce(kafka_broker.bootstrap, "orders", VALUES[100:])
    got = confluent_consume(kafka_broker.bootstrap, "orders", len(VALUES))
    assert got == list(enumerate(VALUES))
