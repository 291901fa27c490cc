"""Kafka port throughput: confluent-kafka beside the stableline SDK, same broker, same run.

One broker process (temporary data dir, default config: fsync on) with its Kafka
port open. 100-byte messages, batched by each client:
- produce: confluent-kafka Producer (linger.ms 5, acks all) to the Kafka port, and
  the stableline SDK's send_async + flush to the gRPC port, each to its own topic;
- consume: confluent-kafka Consumer from the earliest offset (assigned partition),
  and an SDK subscription from the earliest message (batch_receive + acknowledge);
- isolation: a topic written in SDK transactions of TXN_SIZE messages, one in
  ABORT_EVERY aborted (10%), read whole by confluent-kafka consumers at
  read_uncommitted (every record) and read_committed (the committed ones: the
  client drops the aborted ranges itself from the Fetch's aborted transactions and
  the abort markers, served as control batches). Each is timed from the earliest
  offset to its last record, in turns, best of ISOLATION_ROUNDS; the rates are the
  records delivered and the log offsets passed (records and markers) per second.
Prints a table; with --json writes the figures (msgs/s) and their ratios.

    python scripts/bench/bench_kafka.py [--messages 200000] [--json out.json]
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
TXN_SIZE = 100
ABORT_EVERY = 10
# Each isolation level reads the transactional topic this many times; the best counts.
ISOLATION_ROUNDS = 2
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
        # No more than is left: consume() returns once it has them, not at its timeout.
        for message in consumer.consume(min(10_000, count - got), 1.0):
            assert message.error() is None, message.error()
            got += 1
    rate = got / (time.perf_counter() - started)
    consumer.close()
    return rate


def sdk_transactions(service_url: str, topic: str, count: int) -> tuple[int, int]:
    """`count` messages in transactions of TXN_SIZE, every ABORT_EVERY-th aborted:
    (messages committed, log offsets written: messages and one marker a transaction)."""
    committed = transactions = 0
    with stableline.Client(service_url) as client:
        producer = client.create_producer(topic, block_if_queue_full=True)
        for number in range(max(1, count // TXN_SIZE)):
            txn = client.new_transaction()
            for _ in range(TXN_SIZE):
                producer.send_async(PAYLOAD, None, txn=txn)
            producer.flush()
            if number % ABORT_EVERY == ABORT_EVERY - 1:
                txn.abort()
            else:
                txn.commit()
                committed += TXN_SIZE
            transactions += 1
    return committed, transactions * (TXN_SIZE + 1)


def kafka_read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> float:
    """Seconds a confluent-kafka consumer at `isolation` takes from the earliest
    offset to its `expected`-th record (and not one more arrives)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + STAGE_TIMEOUT_S
    try:
        while got < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{isolation} consumer got {got} of {expected} in time")
            for message in consumer.consume(min(10_000, expected - got), 1.0):
                assert message.error() is None, message.error()
                got += 1
        elapsed = time.perf_counter() - started
        extra = sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
        assert extra == 0, f"{isolation}: {extra} records past the {expected} expected"
    finally:
        consumer.close()
    return elapsed


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
        temporary_broker(Path(parent), kafka_port=0) as broker,
    ):
        bootstrap = broker.kafka_bootstrap
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
        committed, offsets = sdk_transactions(broker.service_url, "bench-txn", count)
        written = offsets // (TXN_SIZE + 1) * TXN_SIZE
        best: dict[str, float] = {}
        for _round in range(ISOLATION_ROUNDS):  # taking turns: neither reads a warmer log
            for isolation, expected in (
                ("read_uncommitted", written),
                ("read_committed", committed),
            ):
                seconds = kafka_read_all(bootstrap, "bench-txn", isolation, expected)
                best[isolation] = min(seconds, best.get(isolation, seconds))
                print(f"{isolation}: {expected / seconds:,.0f} msgs/s", file=sys.stderr)
        for isolation, expected in (("read_uncommitted", written), ("read_committed", committed)):
            figures[f"{isolation}_msgs_s"] = expected / best[isolation]
            figures[f"{isolation}_offsets_s"] = offsets / best[isolation]
        figures["txn_messages"] = written
        figures["txn_size"] = TXN_SIZE
        figures["txn_committed"] = committed
        figures["txn_aborted_share"] = 1 - committed / written
    figures["produce_ratio"] = figures["kafka_produce_msgs_s"] / figures["sdk_produce_msgs_s"]
    figures["consume_ratio"] = figures["kafka_consume_msgs_s"] / figures["sdk_consume_msgs_s"]
    figures["isolation_offsets_ratio"] = (
        figures["read_committed_offsets_s"] / figures["read_uncommitted_offsets_s"]
    )
    figures["messages"] = count
    for name, value in figures.items():
        print(f"{name:>24}: {value:,.2f}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
