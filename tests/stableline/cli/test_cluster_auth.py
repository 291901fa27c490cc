"""`stableline cluster up` runs its etcd with TLS and authentication: its brokers get a
user, a password file (never the password on their command line) and a client
certificate, and a client with no credentials can neither read nor write the
cluster's keys (a grant of its own)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

import stableline
from stableline.local_cluster import etcd_auth
from stableline.metadata import MetadataStoreUnavailable, open_metadata_store
from tests.metadata.conftest import etcd_binary  # noqa: F401 - the fixture
from tests.stableline.cli.test_cluster import FREE_PORTS, ClusterUp

pytestmark = pytest.mark.usefixtures("etcd_binary")


def _anonymous_grant(url: str) -> None:
    async def write() -> None:
        store = await open_metadata_store(url, connect_timeout_s=3)
        await store.put("/stableline/permissions/mallory", b'{"produce": true}')

    asyncio.run(write())


def test_cluster_up_runs_etcd_with_authentication(tmp_path: Path):
    base = tmp_path / "cluster"
    up = ClusterUp(base, "--brokers", "1", *FREE_PORTS)
    try:
        up.wait_for(r"^etcd: ready in .* TLS and authentication on \(user stableline-broker")
        up.wait_for(r"metadata in etcd://stableline-broker@127\.0\.0\.1:\d+")
        service_url = up.wait_for(r"^service URL for clients: (\S+)$").group(1)
        layout = json.loads((base / "cluster.json").read_text())
        endpoint = f"127.0.0.1:{layout['etcd']['clientPort']}"
        password_file = etcd_auth.password_file(base / "etcd", etcd_auth.BROKER_USER)
        assert os.stat(password_file).st_mode & 0o077 == 0
        password = password_file.read_text().strip()

        # Neither in plaintext nor over TLS without a client certificate.
        with pytest.raises(MetadataStoreUnavailable):
            _anonymous_grant(f"etcd://{endpoint}")
        ca = base / "etcd" / "tls" / "ca.pem"
        with pytest.raises(MetadataStoreUnavailable):
            _anonymous_grant(f"etcd://{endpoint}?tls_trust_certs_file={ca}")
        # What the brokers use works: the user, its password, the client certificate.
        tls = f"{ca}&tls_cert_file={ca.parent / 'client-cert.pem'}"
        tls += f"&tls_key_file={ca.parent / 'client-key.pem'}"
        user = f"etcd://{etcd_auth.BROKER_USER}:{password}@{endpoint}?tls_trust_certs_file={tls}"

        async def read_as_broker() -> list[str]:
            async with await open_metadata_store(user) as store:
                return await store.children("/stableline")

        assert "brokers" in asyncio.run(read_as_broker())
        for key in ("key.pem", "client-key.pem"):
            assert os.stat(base / "etcd" / "tls" / key).st_mode & 0o077 == 0

        broker_pids = [
            pid
            for pid in up.children()
            if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]
        assert len(broker_pids) == 1
        cmdline = Path(f"/proc/{broker_pids[0]}/cmdline").read_bytes()
        assert password.encode() not in cmdline
        assert str(password_file).encode() in cmdline

        with stableline.Client(service_url) as client:
            client.create_producer("through-auth").send(b"x")
            reader = client.create_reader("through-auth", stableline.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"x"
    finally:
        code = up.interrupt()
    assert code == 0, "\n".join(up.output)
    assert "SECURITY:" not in (base / "broker-0" / "broker.log").read_text()
