"""Membership drives the write gate (stableline/broker/cluster/membership.py), on a real etcd
of the test's own: in a cluster, writes open once the broker is registered, close at
the instant its session is LOST, stay closed after a new session until it is
registered again, and close when it stops. Standalone they never close."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stableline.broker.cluster.lookup import BrokerAddresses
from stableline.broker.cluster.membership import Membership
from stableline.broker.config import load_config
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.metadata import SessionEvent, SessionState, list_brokers
from tests.cluster.conftest import etcd_binary_or_skip
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer

ADDRESSES = BrokerAddresses("127.0.0.1:6650", "127.0.0.1:8080", False)
_clusters = itertools.count()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(etcd_binary_or_skip(), tmp_path / "etcd")
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()


async def test_in_a_cluster_writes_follow_registration_and_the_session(own_etcd, tmp_path):
    cluster = f"m{os.getpid()}-{next(_clusters)}"
    config = load_config(
        None,
        {
            "data_dir": tmp_path / "data",
            "metadata_store_url": own_etcd.url,
            "cluster_name": cluster,
            "metadata_session_timeout_s": SHORT_SESSION_TIMEOUT_S,
        },
    )
    membership = await Membership.open(config)
    gate, store = membership.write_gate, membership.store
    try:
        with pytest.raises(BrokerFencedError, match=f"not registered in cluster {cluster} yet"):
            gate.admit("orders")
        # What the gate was when each session event reached a listener added after
        # Membership's: closed by the time anyone hears of LOST.
        seen: list[tuple[SessionEvent, bool]] = []
        store.add_session_listener(lambda event: seen.append((event, gate.is_open)))
        await membership.register(ADDRESSES, "test", lambda: ({}, {}))
        assert gate.is_open

        own_etcd.stop()
        await store.wait_for_session(SessionState.LOST, timeout_s=SHORT_SESSION_TIMEOUT_S * 2)
        assert (SessionEvent.SESSION_LOST, False) in seen
        with pytest.raises(BrokerFencedError) as refused:
            gate.admit("orders")
        message = str(refused.value)
        assert f"broker {ADDRESSES.grpc_address} is fenced" in message
        assert f"metadata session with {own_etcd.url} was lost at" in message

        own_etcd.start()
        await asyncio.wait_for(gate.wait_open(), 10)
        # A new session alone did not open it: the registration written again did.
        assert (SessionEvent.SESSION_REESTABLISHED, False) in seen
        assert [b.broker_id for b in await list_brokers(store, cluster)] == [ADDRESSES.grpc_address]
        gate.admit("orders")
    finally:
        await membership.close()
    assert (
        not gate.is_open and gate.closed_because == f"broker {ADDRESSES.grpc_address} is stopping"
    )


async def test_standalone_writes_never_close(tmp_path):
    membership = await Membership.open(load_config(None, {"data_dir": tmp_path / "data"}))
    assert membership.write_gate.is_open
    await membership.register(ADDRESSES, "test", lambda: ({}, {}))
    await membership.close()
    assert membership.write_gate.is_open
