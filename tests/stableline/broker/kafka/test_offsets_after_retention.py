"""Offsets and message ids are never given twice, whatever retention deleted.

A real broker whose retention deletes a topic's every ledger once its group has
committed them all: after a restart (clean or kill -9) or an idle unload and
reload, the high watermark, the log
start and the group's committed offset stay at the old end, a consumer there keeps
its place, the next record takes the next offset, and the next message id a new
ledger id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from tests.stableline.broker.kafka.conftest import (
    CLIENT_TIMEOUT_S,
    KafkaBroker,
    confluent_produce,
    poll_records,
)
from tests.stableline.broker.kafka.group_clients import wait_for

TOPIC = "audit"
GROUP = "auditors"
RECORDS = 10

# Small ledgers, retention that deletes a consumed ledger at once, and idle topics
# unloaded soon.
RETENTION_ENV = {
    "STABLELINE_MAX_ENTRIES_PER_LEDGER": "2",
    "STABLELINE_RETENTION_TIME_S": "0",
    "STABLELINE_INACTIVE_TOPIC_UNLOAD_S": "0.5",
}
FULL_NAME = f"persistent://public/default/{TOPIC}"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", env=RETENTION_ENV).running() as process:
        yield process


def _internal_stats(broker: KafkaBroker) -> dict:
    return broker.admin(f"/admin/v2/persistent/public/default/{TOPIC}/internalStats")


def _loaded(broker: KafkaBroker) -> bool:
    for bundles in broker.admin("/admin/v2/broker-stats/topics").values():
        for kinds in bundles.values():
            if FULL_NAME in kinds.get("persistent", {}):
                return True
    return False


def _ledger_ids(broker: KafkaBroker) -> list[int]:
    return [ledger["ledgerId"] for ledger in _internal_stats(broker)["ledgers"]]


def _consumer(broker: KafkaBroker):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            # A position out of range would jump to the end and hide the bug: fail.
            "auto.offset.reset": "error",
        }
    )


def _watermarks(broker: KafkaBroker) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    consumer = _consumer(broker)
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=CLIENT_TIMEOUT_S)
    finally:
        consumer.close()


def _committed(broker: KafkaBroker) -> int:
    from confluent_kafka import TopicPartition

    consumer = _consumer(broker)
    try:
        [partition] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=CLIENT_TIMEOUT_S)
        return partition.offset
    finally:
        consumer.close()


def _produce_one(broker: KafkaBroker, value: bytes) -> int:
    from confluent_kafka import Producer

    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(TOPIC, value=value, on_delivery=lambda _e, m: offsets.append(m.offset()))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return offsets[0]


def _read_from_committed(broker: KafkaBroker, count: int) -> list[tuple[int, bytes]]:
    """Records read by the group from its committed offset; fails on any error
    (OFFSET_OUT_OF_RANGE above all)."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(broker)
    consumer.assign([TopicPartition(TOPIC, 0, _committed(broker))])
    return poll_records(consumer, count)


@pytest.mark.parametrize("stop", ["restart", "kill -9", "unload"])
def test_offsets_and_message_ids_go_on_after_retention_deleted_every_ledger(broker, stop):
    from confluent_kafka import TopicPartition

    confluent_produce(broker.bootstrap, TOPIC, [b"r%d" % i for i in range(RECORDS)])
    consumer = _consumer(broker)
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, RECORDS)], asynchronous=False)
    consumer.close()
    assert _committed(broker) == RECORDS
    used = _ledger_ids(broker)
    assert used, "the records are in ledgers"
    if stop == "kill -9":
        broker.kill()
        broker.start()
    elif stop == "unload":
        wait_for(lambda: not _loaded(broker), "the idle topic to unload")
    else:
        broker.restart()
    # Loading the topic seals its last ledger; retention then deletes every one.
    assert _watermarks(broker)[1] == RECORDS
    wait_for(lambda: _ledger_ids(broker) == [], "retention to delete every ledger")
    assert _watermarks(broker) == (RECORDS, RECORDS)
    assert _committed(broker) == RECORDS
    assert _read_from_committed(broker, 0) == []  # no error at the old end

    assert _produce_one(broker, b"kafka") == RECORDS
    with stableline.Client(broker.service_url) as client:
        message_id = client.create_producer(TOPIC).send(b"sdk")
    assert message_id.ledger_id > max(used)
    assert _read_from_committed(broker, 2) == [(RECORDS, b"kafka"), (RECORDS + 1, b"sdk")]

    broker.restart()
    assert _watermarks(broker)[1] == RECORDS + 2
    assert _committed(broker) == RECORDS
