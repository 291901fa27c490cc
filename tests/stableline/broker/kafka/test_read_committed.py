"""Transactions written through the stableline SDK, read by Kafka clients.

Each SDK transaction appears to Kafka as a producer of its own (its id derived
from the TxnId), its markers as control batches. A read_committed client gets
records only below the last stable offset and drops aborted ones itself from
the aborted_transactions list of each Fetch; read_uncommitted gets all.
"""

from __future__ import annotations

import pytest

import stableline
from tests.stableline.broker.kafka.conftest import (
    confluent_consume,
    end_offset,
    kafka_python_consume,
)

TOPIC = "payments"


def write_mixed_log(service_url: str) -> tuple[list[bytes], list[bytes]]:
    """Plain, committed and aborted records interleaved; (everything, committed view)."""
    everything: list[bytes] = []
    committed: list[bytes] = []
    with stableline.Client(service_url) as client:
        producer = client.create_producer(TOPIC)
        for round_ in range(4):
            plain = f"plain-{round_}".encode()
            producer.send(plain)
            everything.append(plain)
            committed.append(plain)
            kept = client.new_transaction(timeout_ms=60_000)
            dropped = client.new_transaction(timeout_ms=60_000)
            for index in range(3):
                good, bad = f"c-{round_}-{index}".encode(), f"a-{round_}-{index}".encode()
                producer.send(good, txn=kept)
                producer.send(bad, txn=dropped)
                everything += [good, bad]
                committed.append(good)
            dropped.abort()
            kept.commit()
    return everything, committed


CONSUMERS = {"confluent-kafka": confluent_consume, "kafka-python": kafka_python_consume}


@pytest.mark.parametrize("client", list(CONSUMERS))
def test_read_committed_sees_only_committed_records_in_order(kafka_broker, client):
    everything, committed = write_mixed_log(kafka_broker.service_url)
    consume = CONSUMERS[client]
    got = consume(kafka_broker.bootstrap, TOPIC, len(committed), "read_committed")
    assert [value for _, value in got] == committed
    offsets = [offset for offset, _ in got]
    assert offsets == sorted(offsets)
    # read_uncommitted: every record, at consecutive offsets but for the markers'.
    got = consume(kafka_broker.bootstrap, TOPIC, len(everything), "read_uncommitted")
    assert [value for _, value in got] == everything
    # 4 rounds, 2 markers each: the log end is every record plus every marker.
    assert end_offset(kafka_broker.bootstrap, TOPIC) == len(everything) + 8


def test_an_open_transaction_holds_read_committed_at_its_first_record(kafka_broker):
    with stableline.Client(kafka_broker.service_url) as client:
        producer = client.create_producer(TOPIC)
        producer.send(b"before")
        open_txn = client.new_transaction(timeout_ms=60_000)
        producer.send(b"undecided", txn=open_txn)
        producer.send(b"after")
        bootstrap = kafka_broker.bootstrap
        assert end_offset(bootstrap, TOPIC, "read_committed") == 1
        assert end_offset(bootstrap, TOPIC, "read_uncommitted") == 3
        got = confluent_consume(bootstrap, TOPIC, 1, "read_committed")
        assert got == [(0, b"before")]
        open_txn.commit()
    got = confluent_consume(kafka_broker.bootstrap, TOPIC, 3, "read_committed")
    assert [value for _, value in got] == [b"before", b"undecided", b"after"]
    assert end_offset(kafka_broker.bootstrap, TOPIC, "read_committed") == 4  # + the marker
