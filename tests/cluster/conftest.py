"""A real cluster for the tests of this directory: one etcd and three broker processes.

The etcd is tests/metadata's; each test module shares one cluster (its own cluster
name, data dirs and ports), restarting what a test killed. A module that stops etcd
starts its own (etcd_binary_or_skip, cluster_brokers), so no other module sees it go.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline import testing
from stableline.metadata import open_metadata_store
from stableline.testing import BrokerProcess
from tests.metadata.conftest import (
    ONE_COPY_ENV,
    SHORT_SESSION_TIMEOUT_S,
    EtcdServer,
    _find_etcd,
    _install_etcd,
)

_clusters = itertools.count()

BALANCER_OFF_ENV = {"STABLELINE_LOAD_BALANCER_ENABLED": "false"}


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
    """`count` brokers of cluster `name` on `etcd`, not started (stableline.testing's).
    Fewer than 3 keep one copy of each topic (ONE_COPY_ENV): 3, the default ensemble,
    could not be placed."""
    persistence = ONE_COPY_ENV if count < 3 else {}
    # The tests pin where their topics are (and busy ones would trip the balancer):
    # off, unless a test turns it on (test_load_balancing.py).
    env = {**persistence, **BALANCER_OFF_ENV}
    return testing.cluster_brokers(etcd.url, name, root, count, session_timeout_s, env)


@contextlib.contextmanager
def running_cluster(
    etcd: EtcdServer,
    root: Path,
    count: int = 3,
    session_timeout_s: float = SHORT_SESSION_TIMEOUT_S,
    kafka: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """A new cluster of `count` started brokers on `etcd` (their Kafka ports open with
    `kafka`, `env` added to their environments), stopped after (those still running)."""
    name = new_cluster_name()
    brokers = cluster_brokers(etcd, name, root, count, session_timeout_s)
    for broker in brokers:
        if kafka:
            broker.kafka_port = 0
        broker.env = {**broker.env, **(env or {})}
    try:
        for broker in brokers:
            broker.start()
        yield Cluster(etcd, name, brokers)
    finally:
        for broker in brokers:
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)  # a test may have paused it
                broker.stop()


@contextlib.contextmanager
def own_etcd(root: Path) -> Iterator[EtcdServer]:
    """An etcd of the module's own, for a module that pauses or stops it (the shared
    one, cluster_etcd, must stay up for every other module)."""
    etcd = EtcdServer(etcd_binary_or_skip(), root)
    etcd.start()
    try:
        yield etcd
    finally:
        if etcd.process is not None:
            os.kill(etcd.process.pid, signal.SIGCONT)
        etcd.stop()


_one_copy = itertools.count()


def one_copy_namespace(broker: BrokerProcess) -> str:
    """A fresh namespace whose topics keep one copy, on their owner's disk (1/1/1):
    for the promises of topics that do not move (replicated ones fail over)."""
    namespace = f"public/one-copy-{os.getpid()}-{next(_one_copy)}"
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/namespaces/{namespace}/persistence",
        json.dumps(
            {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1}
        ).encode(),
        {"Content-Type": "application/json", "X-Stableline-Request": "test"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    return namespace


class Cluster:
    def __init__(self, etcd: EtcdServer, name: str, brokers: list[BrokerProcess]):
        self.etcd = etcd
        self.name = name
        self.brokers = brokers

    def by_id(self, broker_id: str) -> BrokerProcess:
        (broker,) = [b for b in self.brokers if f"127.0.0.1:{b.grpc_port}" == broker_id]
        return broker

    def read_record(self, path: str) -> dict | None:
        """The JSON value at `path` in the cluster's etcd, None if there is none."""

        async def read() -> dict | None:
            store = await open_metadata_store(self.etcd.url)
            try:
                result = await store.get(path)
                return None if result is None else json.loads(result.value)
            finally:
                await store.close()

        return asyncio.run(read())

    def topic_leader(self, topic: str) -> str:
        """The broker id that leads `topic` (a full name), from its ownership record."""
        local = topic.removeprefix("persistent://")
        record = self.read_record(f"/stableline/ownership/{self.name}/topics/{local}")
        assert record is not None, f"no ownership record for {topic}"
        return record["leader"]

    def shard_leader(self, shard: int) -> str:
        """The broker id that leads transaction coordinator shard `shard`."""
        record = self.read_record(f"/stableline/ownership/{self.name}/coordinators/{shard}")
        assert record is not None, f"no record for coordinator shard {shard}"
        return record["leader"]


@pytest.fixture(scope="module")
def cluster(
    cluster_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    with running_cluster(cluster_etcd, tmp_path_factory.mktemp("cluster")) as started:
        yield started
