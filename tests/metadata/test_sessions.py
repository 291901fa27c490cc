"""Sessions: ephemeral keys outlive neither a killed owner nor its lease; the session
state follows etcd going away and coming back; an unreachable URL fails at once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stableline.metadata import (
    MetadataStoreUnavailable,
    Notification,
    NotificationType,
    SessionEvent,
    SessionState,
    open_metadata_store,
)

from .conftest import SHORT_SESSION_TIMEOUT_S, _free_port

WRITER = Path(__file__).with_name("ephemeral_writer.py")


def _start_writer(url: str, embedded_dir: Path, path: str) -> subprocess.Popen:
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(embedded_dir), path, str(SHORT_SESSION_TIMEOUT_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = writer.stdout.readline()
    assert line.strip() == "written", writer.stderr.read()
    return writer


async def test_ephemeral_key_of_a_killed_process_lapses_with_its_lease(etcd, root, tmp_path):
    path = f"{root}/holder"
    writer = _start_writer(etcd.url, tmp_path, path)
    async with await open_metadata_store(etcd.url) as reader:
        watch = await reader.watch(path)
        assert (await reader.get(path)).stat.ephemeral
        killed_at = time.monotonic()
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        deleted = await asyncio.wait_for(anext(watch), SHORT_SESSION_TIMEOUT_S * 4)
        assert deleted == Notification(NotificationType.DELETED, path)
        assert time.monotonic() - killed_at >= SHORT_SESSION_TIMEOUT_S * 5 / 6 - 0.5
        assert await reader.get(path) is None


def test_ephemeral_keys_of_a_killed_process_go_at_the_next_open_of_the_embedded_store(
    tmp_path,
):
    writer = _start_writer("", tmp_path / "metadata", "/held")
    writer.send_signal(signal.SIGKILL)
    writer.wait()

    async def check() -> None:
        async with await open_metadata_store("", embedded_dir=tmp_path / "metadata") as store:
            assert await store.get("/held") is None

    asyncio.run(check())


async def test_a_second_open_of_one_embedded_directory_is_refused(tmp_path):
    async with await open_metadata_store("", embedded_dir=tmp_path / "m"):
        with pytest.raises(MetadataStoreUnavailable, match="open in another process"):
            await open_metadata_store("", embedded_dir=tmp_path / "m")


async def test_an_unreachable_etcd_fails_at_open_naming_its_url():
    url = f"etcd://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(MetadataStoreUnavailable, match=f"etcd at {url} is unreachable"):
        await open_metadata_store(url)
    assert time.monotonic() - started < 3.0


async def test_session_is_lost_when_etcd_stops_and_reestablished_when_it_returns(own_etcd, root):
    events: list[SessionEvent] = []
    store = await open_metadata_store(own_etcd.url, session_timeout_s=SHORT_SESSION_TIMEOUT_S)
    try:
        store.add_session_listener(events.append)
        watch = await store.watch(root)
        await store.put(f"{root}/mine", b"1", ephemeral=True)

        own_etcd.stop()
        await store.wait_for_session(SessionState.SUSPENDED, timeout_s=SHORT_SESSION_TIMEOUT_S)
        with pytest.raises(MetadataStoreUnavailable, match="unreachable"):
            await store.get(f"{root}/mine")
        await store.wait_for_session(SessionState.LOST, timeout_s=SHORT_SESSION_TIMEOUT_S)
        with pytest.raises(MetadataStoreUnavailable, match="session is lost"):
            await store.put(f"{root}/mine", b"2", ephemeral=True)

        own_etcd.start()
        await store.wait_for_session(SessionState.CONNECTED, timeout_s=10)
        assert events == [
            SessionEvent.CONNECTION_LOST,
            SessionEvent.SESSION_LOST,
            SessionEvent.SESSION_REESTABLISHED,
        ]
        # The old lease is revoked: its key went; a new ephemeral key goes in.
        assert await store.get(f"{root}/mine") is None
        assert (await store.put(f"{root}/mine", b"3", -1, ephemeral=True)).ephemeral
        # The watch resumed where it broke: it saw the old key's deletion and the new put.
        seen = [await asyncio.wait_for(anext(watch), 5) for _ in range(3)]
        assert seen == [
            Notification(NotificationType.CREATED, f"{root}/mine"),
            Notification(NotificationType.DELETED, f"{root}/mine"),
            Notification(NotificationType.CREATED, f"{root}/mine"),
        ]
    finally:
        await store.close()


async def test_a_session_whose_etcd_stops_answering_is_lost_before_its_lease_can_expire(
    own_etcd, root
):
    # A frozen etcd (SIGSTOP) accepts connections and answers nothing: keep-alives
    # hang instead of failing. LOST must still come before the lease could expire.
    ttl_s = 3.0
    store = await open_metadata_store(own_etcd.url, session_timeout_s=ttl_s)
    lost: list[tuple[float, float, bool]] = []

    def on_event(event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            lost.append((time.monotonic(), store.lease_deadline, store.session_holds()))

    store.add_session_listener(on_event)
    try:
        await store.put(f"{root}/held", b"", ephemeral=True)
        own_etcd.process.send_signal(signal.SIGSTOP)
        try:
            await store.wait_for_session(SessionState.LOST, timeout_s=ttl_s * 2)
        finally:
            own_etcd.process.send_signal(signal.SIGCONT)
        ((lost_at, lease_deadline, holds),) = lost
        assert lost_at < lease_deadline, f"LOST {lost_at - lease_deadline:.3f} s after expiry"
        assert not holds and not store.session_holds()
        await store.wait_for_session(SessionState.CONNECTED, timeout_s=10)
        assert store.session_holds()
    finally:
        await store.close()


async def test_session_reconnects_with_its_keys_when_etcd_returns_within_the_lease(own_etcd, root):
    events: list[SessionEvent] = []
    store = await open_metadata_store(own_etcd.url, session_timeout_s=6)
    try:
        store.add_session_listener(events.append)
        await store.put(f"{root}/kept", b"1", ephemeral=True)
        own_etcd.stop()
        await store.wait_for_session(SessionState.SUSPENDED, timeout_s=3)
        own_etcd.start()
        await store.wait_for_session(SessionState.CONNECTED, timeout_s=5)
        assert events == [SessionEvent.CONNECTION_LOST, SessionEvent.RECONNECTED]
        assert (await store.get(f"{root}/kept")).stat.ephemeral
    finally:
        await store.close()


async def test_user_and_password_in_the_url_authenticate_and_a_wrong_one_is_refused(own_etcd, root):
    import grpc
    from aetcd import rpc

    async with grpc.aio.insecure_channel(own_etcd.endpoint) as channel:
        auth = rpc.AuthStub(channel)
        await auth.RoleAdd(rpc.AuthRoleAddRequest(name="root"))
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password="s3cret"))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(rpc.AuthEnableRequest())
    host_port = own_etcd.url.removeprefix("etcd://")
    with pytest.raises(MetadataStoreUnavailable, match="refused the credentials"):
        await open_metadata_store(f"etcd://root:wrong@{host_port}")
    with pytest.raises(MetadataStoreUnavailable, match="refused the credentials"):
        await open_metadata_store(own_etcd.url)  # no credentials at all
    async with await open_metadata_store(f"etcd://root:s3cret@{host_port}") as store:
        assert store.description == f"etcd://root:***@{host_port}"
        watch = await store.watch(root)
        await store.put(f"{root}/k", b"v", -1, ephemeral=True)
        assert (await store.get(f"{root}/k")).value == b"v"
        change = await asyncio.wait_for(anext(watch), 5)
        assert change == Notification(NotificationType.CREATED, f"{root}/k")


async def test_tls_with_a_client_certificate_from_the_url(etcd_binary, tmp_path, root):
    from stableline.broker.security.certificates import CertificateAuthority

    from .conftest import EtcdServer

    authority = CertificateAuthority("etcd test CA")
    server, client = authority.issue_server(("localhost", "127.0.0.1")), authority.issue_client("b")
    files = {"ca": authority.cert_pem, "cert": server.cert_pem, "key": server.key_pem,
             "client_cert": client.cert_pem, "client_key": client.key_pem}  # fmt: skip
    for name, data in files.items():
        (tmp_path / f"{name}.pem").write_bytes(data)
    tls = {name: tmp_path / f"{name}.pem" for name in files}
    etcd = EtcdServer(etcd_binary, tmp_path, tls)
    etcd.start()
    try:
        base = f"etcd://{etcd.endpoint}?tls_trust_certs_file={tls['ca']}"
        with pytest.raises(MetadataStoreUnavailable, match="unreachable"):
            await open_metadata_store(base, connect_timeout_s=2)  # no client certificate
        url = f"{base}&tls_cert_file={tls['client_cert']}&tls_key_file={tls['client_key']}"
        async with await open_metadata_store(url) as store:
            await store.put(f"{root}/k", b"over TLS", -1, ephemeral=True)
            assert (await store.get(f"{root}/k")).value == b"over TLS"
    finally:
        etcd.stop()
