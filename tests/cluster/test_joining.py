"""A broker that ran standalone joins a cluster (stableline/broker/cluster/shared_metadata/
joining.py): its partitioned topics are imported and served from its data through
any broker; its grants and namespace policies are left out, and it says so."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request

import pytest

import stableline
from stableline.metadata import open_metadata_store
from stableline.testing import BrokerProcess
from tests.metadata.conftest import ONE_COPY_ENV, SHORT_SESSION_TIMEOUT_S, EtcdServer

TOPIC = "persistent://public/default/brought-along"


def _call(broker: BrokerProcess, method: str, path: str, body: object) -> None:
    request = urllib.request.Request(
        broker.http_url + path,
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204


def _leader(etcd: EtcdServer, cluster: str, topic: str) -> str | None:
    async def read() -> str | None:
        store = await open_metadata_store(etcd.url)
        try:
            local = topic.removeprefix("persistent://")
            result = await store.get(f"/stableline/ownership/{cluster}/topics/{local}")
            return json.loads(result.value)["leader"] if result else None
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.mark.slow
def test_a_standalone_broker_joining_a_cluster_brings_its_partitioned_topics(
    cluster_etcd: EtcdServer, tmp_path
):
    standalone = BrokerProcess(tmp_path / "joiner")
    standalone.start()
    try:
        _call(standalone, "PUT", "/admin/v2/persistent/public/default/brought-along/partitions", 2)
        _call(
            standalone, "POST", "/admin/v2/namespaces/public/default/permissions/alice", ["produce"]
        )
        client = stableline.Client(standalone.service_url)
        try:
            producer = client.create_producer(TOPIC)
            for key in ("a", "b", "c", "d"):
                producer.send(key.encode(), partition_key=key)
        finally:
            client.close()
    finally:
        assert standalone.stop() == 0

    cluster = f"join{os.getpid()}"
    in_cluster = {
        "extra_args": ["--metadata-store", cluster_etcd.url, "--cluster", cluster],
        # Two brokers: one copy of each topic.
        "env": {
            "STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S),
            **ONE_COPY_ENV,
        },
    }
    peer = BrokerProcess(tmp_path / "peer", **in_cluster)
    joiner = BrokerProcess(tmp_path / "joiner", **in_cluster)
    peer.start()
    try:
        joiner.start()
        try:
            assert "not in force in the cluster" in joiner.log()
            joiner_id = f"127.0.0.1:{joiner.grpc_port}"
            for index in range(2):
                assert _leader(cluster_etcd, cluster, f"{TOPIC}-partition-{index}") == joiner_id
            # A client given only the other broker's address reads what was there.
            client = stableline.Client(peer.service_url)
            try:
                assert len(client.get_topic_partitions(TOPIC)) == 2
                consumer = client.subscribe(
                    TOPIC, "after-join", initial_position=stableline.InitialPosition.Earliest
                )
                received = sorted(consumer.receive(timeout_millis=10_000).data() for _ in range(4))
                assert received == [b"a", b"b", b"c", b"d"]
            finally:
                client.close()
        finally:
            joiner.stop()
    finally:
        peer.stop()
