"""`stableline cluster up` runs its etcd with authentication: its brokers get a user
and a password file (never the password on their command line), and a client with
no credentials can neither read nor write the cluster's keys (a grant of its own)."""

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
from tests.stableline.test_cli_cluster import FREE_PORTS, ClusterUp

pytestmark = pytest.mark.usefixtures("etcd_binary")


def _anonymous_grant(endpoint: str) -> None:
    async def write() -> None:
        store = await open_metadata_store(f"etcd://{endpoint}")
        await store.put("/stableline/permissions/mallory", b'{"produce": true}')

    asyncio.run(write())


def test_cluster_up_runs_etcd_with_authentication(tmp_path: Path):
    base = tmp_path / "cluster"
    up = ClusterUp(base, "--brokers", "1", *FREE_PORTS)
    try:
        up.wait_for(r"^etcd: ready in .* authentication on \(user stableline-broker")
        up.wait_for(r"metadata in etcd://stableline-broker@127\.0\.0\.1:\d+")
        service_url = up.wait_for(r"^service URL for clients: (\S+)$").group(1)
        layout = json.loads((base / "cluster.json").read_text())
        endpoint = f"127.0.0.1:{layout['etcd']['clientPort']}"
        password_file = etcd_auth.password_file(base / "etcd", etcd_auth.BROKER_USER)
        assert os.stat(password_file).st_mode & 0o077 == 0
        password = password_file.read_text().strip()

        with pytest.raises(MetadataStoreUnavailable, match="refused the credentials"):
            _anonymous_grant(endpoint)

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
