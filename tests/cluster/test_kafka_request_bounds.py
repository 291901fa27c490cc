"""A Kafka request on a cluster broker reads etcd once per topic it names, not once
per partition: a Fetch naming thousands of partitions of a plain topic (none but 0
exists) costs a handful of etcd reads, counted by etcd's own range counter."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest

from stableline.broker.kafka.protocol import messages as m
from stableline.testing import BrokerProcess
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S
from tests.stableline.broker.kafka.conftest import RawKafka
from tests.stableline.broker.kafka.raw_requests import RawConnection, fetch_body

from .conftest import cluster_brokers, new_cluster_name

PARTITIONS_NAMED = 3000


def _etcd_ranges(etcd) -> int:
    """The reads (ranges) etcd has served so far."""
    with urllib.request.urlopen(f"http://{etcd.endpoint}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("etcd_mvcc_range_total "):
                return int(float(line.split()[1]))
    raise AssertionError("etcd reports no etcd_mvcc_range_total")


@pytest.fixture(scope="module")
def kafka_member(cluster_etcd, tmp_path_factory) -> Iterator[BrokerProcess]:
    (broker,) = cluster_brokers(
        cluster_etcd,
        new_cluster_name(),
        tmp_path_factory.mktemp("bounds"),
        1,
        SHORT_SESSION_TIMEOUT_S,
    )
    broker.kafka_port = 0
    with broker.running():
        yield broker


def test_naming_many_partitions_of_a_plain_topic_reads_etcd_once(cluster_etcd, kafka_member):
    client = RawKafka(kafka_member.kafka_port)
    try:
        assert client.metadata(["plain"], auto_create=True) == {"plain": 0}
    finally:
        client.close()
    body = fetch_body([("plain", range(1, PARTITIONS_NAMED + 1))], 1 << 20, 1 << 20)
    with RawConnection(kafka_member.kafka_port) as connection:
        connection.call(body)  # warm: what a first request loads once
        # etcd's background reads in a quiet moment as long as the request takes.
        idle_start = _etcd_ranges(cluster_etcd)
        started = time.monotonic()
        frame = connection.call(body)
        took = time.monotonic() - started
        during = _etcd_ranges(cluster_etcd) - idle_start
    assert frame is not None
    from kafka.protocol.consumer import FetchResponse

    answered = FetchResponse.decode(frame[4:], version=4).responses[0].partitions
    assert len(answered) == PARTITIONS_NAMED
    assert {p.error_code for p in answered} == {m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert during < 50, f"{during} etcd reads for one request ({took:.2f} s)"
    assert took < 5.0
