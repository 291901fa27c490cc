"""A real cluster for the tests of this directory: one etcd and three broker processes.

The etcd is tests/metadata's; each test module shares one cluster (its own cluster
name, data dirs and ports), restarting what a test killed. A module that stops etcd
starts its own (etcd_binary_or_skip, cluster_brokers), so no other module sees it go.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline.testing import BrokerProcess
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer, _find_etcd, _install_etcd

_clusters = itertools.count()


def new_cluster_name() -> str:
    return f"c{os.getpid()}-{next(_clusters)}"


def etcd_binary_or_skip() -> str:
    binary = _find_etcd()
    if binary is None:
        _install_etcd()
        binary = _find_etcd()
    if binary is None:
        pytest.skip("no etcd on PATH and cannot apt-get install etcd-server (not root?)")
    return binary


@pytest.fixture(scope="session")
def cluster_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(etcd_binary_or_skip(), tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


def cluster_brokers(
    etcd: EtcdServer, name: str, root: Path, count: int, session_timeout_s: float
) -> list[BrokerProcess]:
    """`count` brokers of cluster `name` on `etcd`, not started, each in a directory of
    its own under `root` (its data dir, and beside it its logs)."""
    return [
        BrokerProcess(
            root / f"broker-{i}" / "data",
            extra_args=["--metadata-store", etcd.url, "--cluster", name],
            env={"STABLELINE_METADATA_SESSION_TIMEOUT_S": str(session_timeout_s)},
        )
        for i in range(count)
    ]


class Cluster:
    def __init__(self, etcd: EtcdServer, name: str, brokers: list[BrokerProcess]):
        self.etcd = etcd
        self.name = name
        self.brokers = brokers

    def by_id(self, broker_id: str) -> BrokerProcess:
        (broker,) = [b for b in self.brokers if f"127.0.0.1:{b.grpc_port}" == broker_id]
        return broker


@pytest.fixture(scope="module")
def cluster(
    cluster_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    name = new_cluster_name()
    root = tmp_path_factory.mktemp("cluster")
    brokers = cluster_brokers(cluster_etcd, name, root, 3, SHORT_SESSION_TIMEOUT_S)
    try:
        for broker in brokers:
            broker.start()
        yield Cluster(cluster_etcd, name, brokers)
    finally:
        for broker in brokers:
            broker.stop()
