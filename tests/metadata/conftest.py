"""A real etcd for the metadata store's tests, and stores of both kinds.

`etcd` is found on PATH (Debian's `etcd-server` puts it at /usr/bin/etcd); when it is
missing and we are root, `apt-get install etcd-server` installs it (as `make test`
does through scripts/install_test_servers.sh); otherwise the etcd tests skip and say
why. Each server listens on free 127.0.0.1 ports with a temporary data dir and is
ready once its /health says so.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from stableline.metadata import MetadataStore, open_metadata_store

ETCD_READY_TIMEOUT_S = 15.0
# etcd's shortest lease with its default election timeout (it raises shorter ones).
SHORT_SESSION_TIMEOUT_S = 2.0


def _find_etcd() -> str | None:
    return shutil.which("etcd") or (
        "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None
    )


def _install_etcd() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "etcd-server"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(install, env=env, capture_output=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class EtcdServer:
    """One etcd member on 127.0.0.1; stop() and start() again keep its data and ports."""

    def __init__(self, binary: str, directory: Path, tls: dict[str, Path] | None = None):
        """`tls`: {"ca", "cert", "key", "client_cert", "client_key"} files; clients then
        need TLS and a certificate the CA signed."""
        self.binary = binary
        self.directory = directory
        self.tls = tls
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def _client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        client = self._client_url
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            self.binary,
            "--name=test",
            f"--data-dir={self.directory / 'data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            "--logger=zap",
            "--log-level=warn",
        ]
        if self.tls:
            command += [
                f"--cert-file={self.tls['cert']}",
                f"--key-file={self.tls['key']}",
                f"--trusted-ca-file={self.tls['ca']}",
                "--client-cert-auth",
            ]
        log = open(self.directory / "etcd.log", "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + ETCD_READY_TIMEOUT_S
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"etcd did not become healthy:\n{(self.directory / 'etcd.log').read_text()}"
                )
            time.sleep(0.05)

    def _healthy(self) -> bool:
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=str(self.tls["ca"]))
            context.load_cert_chain(self.tls["client_cert"], self.tls["client_key"])
        try:
            with urllib.request.urlopen(
                f"{self._client_url}/health", timeout=1, context=context
            ) as reply:
                return json.loads(reply.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@pytest.fixture(scope="session")
def etcd_binary() -> str:
    binary = _find_etcd()
    if binary is None:
        _install_etcd()
        binary = _find_etcd()
    if binary is None:
        pytest.skip("no etcd on PATH and cannot apt-get install etcd-server (not root?)")
    return binary


@pytest.fixture(scope="session")
def etcd(etcd_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for the session; tests keep apart by writing under their own root."""
    server = EtcdServer(etcd_binary, tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_etcd(etcd_binary: str, tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of the test's own, to stop and restart."""
    server = EtcdServer(etcd_binary, tmp_path)
    server.start()
    yield server
    server.stop()


_roots = itertools.count()


@pytest.fixture
def root() -> str:
    """A path no other test of this session writes under."""
    return f"/test-{os.getpid()}-{next(_roots)}"


@pytest.fixture(params=["embedded", "etcd"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator:
    """`await open_store(**options)`: a new store (session) of the parametrized kind.

    Embedded stores share one directory, so a second one opens only after the first
    closed; etcd stores are sessions of one etcd. All still open are closed after.
    """
    opened: list[MetadataStore] = []
    url = request.getfixturevalue("etcd").url if request.param == "etcd" else ""

    async def open_one(**options) -> MetadataStore:
        store = await open_metadata_store(url, embedded_dir=tmp_path / "metadata", **options)
        opened.append(store)
        return store

    open_one.kind = request.param
    yield open_one
    for store in opened:
        with contextlib.suppress(Exception):
            await store.close()
