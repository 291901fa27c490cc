"""The sink's transaction end follows its coordinator shard, on three real brokers
(one real etcd): asked of a broker that does not lead the shard, it goes where that
broker says; with the shard's leader killed after the transaction opened, it is ended
by the broker that takes the shard over. No SparkSession: Transaction is the value
the driver keeps and ends."""

from __future__ import annotations

import pytest

from stableline.spark._connection import Connection
from stableline.spark._write import Transaction
from tests.cluster import conftest as cluster_fixtures
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_transactions import _broker_id

cluster_etcd = cluster_fixtures.cluster_etcd


def _connection(cluster: Cluster, first: int = 0) -> Connection:
    seeds = [_broker_id(b) for b in cluster.brokers]
    seeds = seeds[first:] + seeds[:first]
    return Connection(target=seeds[0], seeds=tuple(seeds))


@pytest.mark.slow
def test_an_end_asked_elsewhere_follows_the_leader_and_outlives_the_leaders_kill(
    cluster_etcd, tmp_path
):
    with running_cluster(cluster_etcd, tmp_path) as cluster:
        # Asked of a broker that does not lead its shard: the end goes to the leader.
        opened = Transaction.open(_connection(cluster), timeout_ms=120_000)
        leader = cluster.shard_leader(opened.id[0])
        elsewhere = next(_broker_id(b) for b in cluster.brokers if _broker_id(b) != leader)
        asked_elsewhere = Transaction(opened.connection.to(elsewhere), opened.id)
        assert asked_elsewhere.end(commit=True) == "COMMITTED"
        # Asked again (its answer lost, say): the record says how it ended.
        assert asked_elsewhere.end(commit=True) == "COMMITTED"

        # The leader killed while the transaction is open: its successor aborts it.
        second = Transaction.open(_connection(cluster, first=1), timeout_ms=120_000)
        killed = cluster.by_id(cluster.shard_leader(second.id[0]))
        assert second.connection.target == _broker_id(killed)
        killed.kill()
        assert second.end(commit=False, deadline_s=30.0) == "ABORTED"
