"""A real etcd for the metadata store's tests, and stores of both kinds.

`etcd` is found on PATH (Debian's `etcd-server` puts it at /usr/bin/etcd); when it is
missing and we are root, `apt-get install etcd-server` installs it (as `make test`
does through scripts/dev/install_test_servers.sh); otherwise the etcd tests skip and say
why. Each server listens on free 127.0.0.1 ports with a temporary data dir and is
ready once its /health says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from stableline.local_cluster.etcd import EtcdProcess, find_etcd, free_port
from stableline.metadata import ClusterMetadataStore, open_metadata_store

# etcd's shortest lease with its default election timeout (it raises shorter ones).
SHORT_SESSION_TIMEOUT_S = 2.0
# For brokers of a cluster of fewer than 3 (etcd's default ensemble): one copy of
# each topic, the leader's, as such a test's topics had before ensembles were placed.
ONE_COPY_ENV = {"STABLELINE_DEFAULT_ENSEMBLE_SIZE": "1"}

# The tests' etcd is the one `stableline cluster up` runs.
EtcdServer = EtcdProcess
_find_etcd = find_etcd
_free_port = free_port


def _install_etcd() -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "etcd-server"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(install, env=env, capture_output=True)


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
    opened: list[ClusterMetadataStore] = []
    url = request.getfixturevalue("etcd").url if request.param == "etcd" else ""

    async def open_one(**options) -> ClusterMetadataStore:
        store = await open_metadata_store(url, embedded_dir=tmp_path / "metadata", **options)
        opened.append(store)
        return store

    open_one.kind = request.param
    yield open_one
    for store in opened:
        with contextlib.suppress(Exception):
            await store.close()
