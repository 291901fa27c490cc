"""A real cluster for the tests of this directory: one etcd and three broker processes.

The etcd is tests/metadata's; each test module shares one cluster (its own cluster
name, data dirs and ports), restarting what a test killed.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from stableline.testing import BrokerProcess
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer, _find_etcd, _install_etcd

_clusters = itertools.count()


@pytest.fixture(scope="session")
def cluster_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    binary = _find_etcd()
    if binary is None:
        _install_etcd()
        binary = _find_etcd()
    if binary is None:
        pytest.skip("no etcd on PATH and cannot apt-get install etcd-server (not root?)")
    server = EtcdServer(binary, tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


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
    name = f"c{os.getpid()}-{next(_clusters)}"
    root = tmp_path_factory.mktemp("cluster")
    brokers = [
        BrokerProcess(
            root / f"broker-{i}",
            extra_args=["--metadata-store", cluster_etcd.url, "--cluster", name],
            env={"STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S)},
        )
        for i in range(3)
    ]
    try:
        for broker in brokers:
            broker.start()
        yield Cluster(cluster_etcd, name, brokers)
    finally:
        for broker in brokers:
            broker.stop()
