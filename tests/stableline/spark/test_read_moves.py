"""A Spark partition read while its topic moves, on three real brokers (one real etcd):
the range, planned on the owner, is read on from where it was on the broker the topic
moved to, every entry once and in order. No SparkSession: `_entries` is what an
executor runs for a partition."""

from __future__ import annotations

import itertools

import pytest

import stableline
from stableline import IsolationLevel
from stableline._types import ISOLATION_LEVEL_PROTO
from stableline.spark._connection import Connection
from stableline.spark._read import FETCH_MAX_ENTRIES, LedgerRange, _entries, topic_layout
from tests.cluster import conftest as cluster_fixtures
from tests.cluster.conftest import running_cluster
from tests.cluster.test_topic_moves import _admin, _other_members, _path, _service_url

cluster_etcd = cluster_fixtures.cluster_etcd

ENTRIES = 3 * FETCH_MAX_ENTRIES  # sent one at a time, each waited for: an entry each


@pytest.mark.slow
def test_a_range_read_while_its_topic_moves_twice_is_read_on_at_the_new_owner(
    cluster_etcd, tmp_path
):
    topic = "persistent://public/default/spark-read-moves"
    with running_cluster(cluster_etcd, tmp_path) as cluster:
        with stableline.Client(_service_url(cluster.brokers)) as client:
            producer = client.create_producer(topic)
            sent = [f"m{i}".encode() for i in range(ENTRIES)]
            for payload in sent:
                producer.send(payload)
        seeds = tuple(f"127.0.0.1:{b.grpc_port}" for b in cluster.brokers)
        layout = topic_layout(
            Connection(seeds[0], seeds=seeds), topic, IsolationLevel.READ_COMMITTED
        )
        assert layout.owner is not None
        ((ledger_id, count, _bytes),) = layout.ledgers
        part = LedgerRange(
            layout.owner,
            topic,
            ISOLATION_LEVEL_PROTO[IsolationLevel.READ_COMMITTED],
            ledger_id,
            0,
            count - 1,
        )
        entries = _entries(part)
        read = list(itertools.islice(entries, 10))
        # Moved once while the range is read, and once more (to the third member): the
        # read follows both.
        for _ in range(2):
            owner = cluster.by_id(cluster.topic_leader(topic))
            target = next(
                member for member in _other_members(cluster, topic) if member != layout.owner.target
            )
            status, body = _admin(owner, "POST", _path(topic) + f"/transfer?broker={target}")
            assert status == 200, body
            read += itertools.islice(entries, FETCH_MAX_ENTRIES)
        read += entries
        assert cluster.topic_leader(topic) != layout.owner.target
        assert [entry.entry_id for entry in read] == list(range(ENTRIES))
        assert all(payload in entry.payload for payload, entry in zip(sent, read, strict=True))
