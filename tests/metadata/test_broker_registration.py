"""BrokerRegistration in process, on both stores: load updates, a taken id, a dead
run's leftover, and registering again after etcd gave the session back."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from stableline.metadata import (
    BrokerAlreadyRegistered,
    BrokerInfo,
    BrokerRegistration,
    SessionState,
    WatchOverflow,
    list_brokers,
    open_metadata_store,
)
from stableline.metadata import store as store_module

from .conftest import SHORT_SESSION_TIMEOUT_S


def _info(instance: str = "run-1", pid: int | None = None) -> BrokerInfo:
    return BrokerInfo(
        broker_id="127.0.0.1:6650",
        grpc_address="127.0.0.1:6650",
        http_url="http://127.0.0.1:8080",
        version="test",
        started_ms=int(time.time() * 1000),
        hostname=socket.gethostname(),
        pid=os.getpid() if pid is None else pid,
        instance=instance,
        load={"topics": 0},
    )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_registration_lists_the_broker_and_publishes_its_load(open_store, root):
    store = await open_store()
    cluster = root.strip("/")
    registration = BrokerRegistration(store, cluster, _info())
    await registration.register()
    await registration.update_load({"topics": 7})
    (listed,) = await list_brokers(store, cluster)
    assert listed.load == {"topics": 7} and listed.instance == "run-1"
    await registration.unregister()
    assert await list_brokers(store, cluster) == []


async def test_an_id_a_live_broker_holds_is_refused_and_a_dead_runs_leftover_replaced(
    open_store, root
):
    store = await open_store()
    cluster = root.strip("/")
    await BrokerRegistration(store, cluster, _info("live")).register()
    with pytest.raises(BrokerAlreadyRegistered, match="already registered in cluster"):
        await BrokerRegistration(store, cluster, _info("second")).register()

    other = root.strip("/") + "-b"
    await BrokerRegistration(store, other, _info("dead", pid=_dead_pid())).register()
    await BrokerRegistration(store, other, _info("restarted")).register()
    (listed,) = await list_brokers(store, other)
    assert listed.instance == "restarted"


async def test_a_reader_too_far_behind_gets_watch_overflow(open_store, root, monkeypatch):
    monkeypatch.setattr(store_module, "MAX_PENDING_NOTIFICATIONS", 3)
    store = await open_store()
    watch = await store.watch(root)
    for i in range(4):
        await store.put(f"{root}/{i}", b"")
    deadline = time.monotonic() + 5
    while not watch.ended:  # etcd's notifications arrive a little after the puts return
        assert time.monotonic() < deadline, f"no overflow; {watch.pending} held"
        await asyncio.sleep(0.01)
    assert watch.pending == 3
    for _ in range(3):
        await anext(watch)
    with pytest.raises(WatchOverflow, match="re-read what it covers"):
        await anext(watch)


async def test_registration_is_written_again_after_the_session_is_reestablished(own_etcd):
    store = await open_metadata_store(own_etcd.url, session_timeout_s=SHORT_SESSION_TIMEOUT_S)
    try:
        registration = BrokerRegistration(store, "c", _info())
        written_again = asyncio.Event()
        registration.on_registered.append(written_again.set)
        await registration.register()
        own_etcd.stop()
        await store.wait_for_session(SessionState.LOST, timeout_s=SHORT_SESSION_TIMEOUT_S * 2)
        assert not written_again.is_set()  # the first registration does not call it
        own_etcd.start()
        await store.wait_for_session(SessionState.CONNECTED, timeout_s=10)
        await asyncio.wait_for(written_again.wait(), 5)
        (listed,) = await list_brokers(store, "c")
        assert listed == replace(_info(), started_ms=listed.started_ms)
    finally:
        await store.close()
