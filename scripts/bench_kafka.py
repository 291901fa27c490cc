"""Kafka port throughput: confluent-kafka beside the stableline SDK, same broker, same run.

One broker process (temporary data dir, default config: fsync on) with its Kafka
port open. 100-byte messages, batched by each client:
- produce: confluent-kafka Producer (linger.ms 5, acks all) to the Kafka port, and
  the stableline SDK's send_async + flush to the gRPC port, each to its own topic;
- consume: confluent-kafka Consumer from the earliest offset (assigned partition),
  and an SDK subscription from the earliest message (batch_receive + acknowledge).
Prints a table; with --json writes the figures (msgs/s) and their ratios.

    python scripts/bench_kafka.py [--messages 200000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import stableline
from stableline import InitialPosition
from stableline.testing import temporary_broker

PAYLOAD = b"x" * 100
# A stage that takes longer has stalled: it fails saying how far it got.
STAGE_TIMEOUT_S = 120.0


def kafka_produce(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    producer.produce(topic, PAYLOAD)  # metadata, connection, topic creation: not timed
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, PAYLOAD)
                break
            except BufferError:
                producer.poll(0.01)  # the client's queue is full: let it drain
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def kafka_consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + STAGE_TIMEOUT_S
    while got < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka consumer got {got} of {count} messages in time")
        for message in consumer.consume(10_000, 1.0):
            assert message.error() is None, message.error()
            got += 1
    rate = got / (time.perf_counter() - started)
    consumer.close()
    return rate


def sdk_produce(service_url: str, topic: str, count: int) -> float:
    with stableline.Client(service_url) as client:
        # A fire-and-forget loop past max_pending_messages needs room to wait for.
        producer = client.create_producer(topic, block_if_queue_full=True)
        producer.send(PAYLOAD)
        started = time.perf_counter()
        for _ in range(count):
            producer.send_async(PAYLOAD, None)
        producer.flush()
        return count / (time.perf_counter() - started)


def sdk_consume(service_url: str, topic: str, count: int) -> float:
    with stableline.Client(service_url) as client:
        consumer = client.subscribe(topic, "bench", initial_position=InitialPosition.Earliest)
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + STAGE_TIMEOUT_S
        while got < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"SDK consumer got {got} of {count} messages in time")
            batch = consumer.batch_receive(1000, 1000)
            got += len(batch)
            consumer.acknowledge(batch)
        return got / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    count = args.messages
    with (
        tempfile.TemporaryDirectory() as parent,
        temporary_broker(Path(parent), extra_args=["--kafka", "127.0.0.1:0"]) as broker,
    ):
        bootstrap = f"127.0.0.1:{broker.wait_for_event('ready')['kafka_port']}"
        stages = {
            "kafka_produce_msgs_s": lambda: kafka_produce(bootstrap, "bench-kafka", count),
            "sdk_produce_msgs_s": lambda: sdk_produce(broker.service_url, "bench-sdk", count),
            "kafka_consume_msgs_s": lambda: kafka_consume(bootstrap, "bench-kafka", count),
            "sdk_consume_msgs_s": lambda: sdk_consume(broker.service_url, "bench-sdk", count),
        }
        figures = {}
        for name, stage in stages.items():
            figures[name] = stage()
            print(f"{name}: {figures[name]:,.0f}", file=sys.stderr, flush=True)
    figures["produce_ratio"] = figures["kafka_produce_msgs_s"] / figures["sdk_produce_msgs_s"]
    figures["consume_ratio"] = figures["kafka_consume_msgs_s"] / figures["sdk_consume_msgs_s"]
    figures["messages"] = count
    for name, value in figures.items():
        print(f"{name:>24}: {value:,.2f}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
