"""A broker does not trust its etcd blindly: an etcd open to anyone is a loud WARNING
(a refusal to start under --secure), credentials come from a file and never from the
command line, and a coordinator shard count changed in etcd is refused, not adopted.
Real brokers on real etcd servers."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from stableline.local_cluster import etcd_auth
from stableline.metadata import MetadataStoreUnavailable, open_metadata_store
from stableline.metadata.layout import cluster_path
from stableline.testing import BrokerExited, BrokerProcess

from .conftest import ONE_COPY_ENV, EtcdServer, etcd_binary_or_skip, new_cluster_name


@pytest.fixture(scope="module")
def secured_etcd(tmp_path_factory) -> Iterator[tuple[EtcdServer, Path]]:
    """An etcd with authentication on, as `cluster up` runs it: (server, its dir)."""
    directory = tmp_path_factory.mktemp("secured-etcd")
    server = EtcdServer(etcd_binary_or_skip(), directory)
    server.start()
    etcd_auth.enable(server.endpoint, directory)
    try:
        yield server, directory
    finally:
        server.stop()


def _broker(root: Path, *args: str, env: dict | None = None) -> BrokerProcess:
    # One or two brokers a test here: one copy of each topic.
    return BrokerProcess(root / "data", extra_args=list(args), env={**ONE_COPY_ENV, **(env or {})})


def _cmdline(broker: BrokerProcess) -> bytes:
    return Path(f"/proc/{broker.process.pid}/cmdline").read_bytes()


def test_a_broker_on_an_open_etcd_warns_loudly(cluster_etcd, tmp_path):
    broker = _broker(
        tmp_path, "--metadata-store", cluster_etcd.url, "--cluster", new_cluster_name()
    )
    with broker.running():
        log = broker.log()
    assert "WARNING" in log and "SECURITY:" in log
    assert "answers clients that give no credentials" in log


def test_a_secure_broker_refuses_an_open_etcd(cluster_etcd, tmp_path):
    name = new_cluster_name()
    broker = _broker(tmp_path, "--metadata-store", cluster_etcd.url, "--cluster", name, "--secure")
    with pytest.raises(BrokerExited) as exited:
        broker.start()
    assert exited.value.returncode == 2
    assert "answers clients that give no credentials" in broker.log()
    assert "refused" in broker.log()


def test_a_secure_broker_on_an_authenticated_etcd_reads_its_password_from_a_file(
    secured_etcd, tmp_path
):
    etcd, directory = secured_etcd
    password_file = etcd_auth.password_file(directory, etcd_auth.BROKER_USER)
    password = password_file.read_text().strip()
    url = f"etcd://{etcd_auth.BROKER_USER}@{etcd.endpoint}"
    broker = _broker(
        tmp_path,
        "--metadata-store", url, "--metadata-store-password-file", str(password_file),
        "--cluster", new_cluster_name(), "--secure",
    )  # fmt: skip
    with broker.running():
        assert password.encode() not in _cmdline(broker)
        assert b"etcd://stableline-broker@" in _cmdline(broker)
        assert "SECURITY:" not in broker.log()
        assert password not in broker.log()

    # Without credentials nobody reads or writes the cluster's keys (a grant of
    # their own, say).
    async def anonymous_write() -> None:
        store = await open_metadata_store(etcd.url)
        await store.put("/stableline/permissions/x", b"{}")

    with pytest.raises(MetadataStoreUnavailable, match="refused the credentials"):
        asyncio.run(anonymous_write())


def test_the_password_may_come_from_the_environment(secured_etcd, tmp_path):
    etcd, directory = secured_etcd
    password = etcd_auth.password_file(directory, etcd_auth.BROKER_USER).read_text().strip()
    broker = _broker(
        tmp_path,
        "--metadata-store", f"etcd://{etcd_auth.BROKER_USER}@{etcd.endpoint}",
        "--cluster", new_cluster_name(),
        env={"STABLELINE_METADATA_STORE_PASSWORD": password},
    )  # fmt: skip
    with broker.running(), stableline.Client(broker.service_url) as client:
        client.create_producer("from-env").send(b"x")
        assert password.encode() not in _cmdline(broker)


def test_a_password_in_the_url_still_works_with_a_warning(secured_etcd, tmp_path):
    etcd, directory = secured_etcd
    password = etcd_auth.password_file(directory, etcd_auth.BROKER_USER).read_text().strip()
    url = f"etcd://{etcd_auth.BROKER_USER}:{password}@{etcd.endpoint}"
    broker = _broker(tmp_path, "--metadata-store", url, "--cluster", new_cluster_name())
    with broker.running():
        log = broker.log()
    assert "the etcd password is in the metadata store URL" in log
    assert password not in log


def test_a_user_without_a_password_is_refused_with_a_hint(secured_etcd, tmp_path):
    etcd, _ = secured_etcd
    url = f"etcd://{etcd_auth.BROKER_USER}@{etcd.endpoint}"
    broker = _broker(tmp_path, "--metadata-store", url, "--cluster", new_cluster_name())
    with pytest.raises(BrokerExited):
        broker.start()
    assert "--metadata-store-password-file" in broker.log()


def test_a_changed_shard_count_is_refused_not_adopted(cluster_etcd, tmp_path):
    name = new_cluster_name()
    broker = _broker(tmp_path, "--metadata-store", cluster_etcd.url, "--cluster", name)
    with broker.running():
        pass
    record = json.loads(_read(cluster_etcd, cluster_path(name)))
    assert record["transaction_coordinator_shards"] == 4
    _write(
        cluster_etcd,
        cluster_path(name),
        json.dumps({**record, "transaction_coordinator_shards": 9}),
    )
    with pytest.raises(BrokerExited) as exited:
        broker.start()
    assert exited.value.returncode == 2
    assert "now says 9 transaction coordinator shards, but this broker ran with 4" in broker.log()
    # A count no broker writes is refused as such, even by a broker new to the cluster.
    _write(cluster_etcd, cluster_path(name), json.dumps({"transaction_coordinator_shards": -1}))
    fresh = _broker(tmp_path / "fresh", "--metadata-store", cluster_etcd.url, "--cluster", name)
    with pytest.raises(BrokerExited):
        fresh.start()
    assert "which no broker writes" in fresh.log()
    # Put back, the broker starts again.
    _write(cluster_etcd, cluster_path(name), json.dumps(record))
    with broker.running():
        pass


def test_a_config_asking_for_another_shard_count_is_refused(cluster_etcd, tmp_path):
    name = new_cluster_name()
    first = _broker(tmp_path / "a", "--metadata-store", cluster_etcd.url, "--cluster", name)
    with first.running():
        other = _broker(
            tmp_path / "b", "--metadata-store", cluster_etcd.url, "--cluster", name,
            env={"STABLELINE_TRANSACTION_COORDINATOR_SHARDS": "2"},
        )  # fmt: skip
        with pytest.raises(BrokerExited):
            other.start()
    assert "asks for 2 transaction coordinator shards but cluster" in other.log()


def _read(etcd: EtcdServer, path: str) -> bytes:
    async def read() -> bytes:
        async with await open_metadata_store(etcd.url) as store:
            return (await store.get(path)).value

    return asyncio.run(read())


def _write(etcd: EtcdServer, path: str, value: str) -> None:
    async def write() -> None:
        async with await open_metadata_store(etcd.url) as store:
            await store.put(path, value.encode())

    asyncio.run(write())


def test_password_files_are_private(secured_etcd):
    _, directory = secured_etcd
    for user in (etcd_auth.ROOT_USER, etcd_auth.BROKER_USER):
        assert os.stat(etcd_auth.password_file(directory, user)).st_mode & 0o077 == 0


def test_a_broker_finding_the_count_gone_writes_back_the_one_it_ran_with(cluster_etcd, tmp_path):
    name = new_cluster_name()
    store_args = ("--metadata-store", cluster_etcd.url, "--cluster", name)
    first = _broker(tmp_path, *store_args, env={"STABLELINE_TRANSACTION_COORDINATOR_SHARDS": "2"})
    with first.running():
        pass
    _delete(cluster_etcd, cluster_path(name))
    again = _broker(tmp_path, *store_args)  # the same data dir; the config leaves it open
    with again.running():
        assert (
            json.loads(_read(cluster_etcd, cluster_path(name)))["transaction_coordinator_shards"]
            == 2
        )


def _delete(etcd: EtcdServer, path: str) -> None:
    async def delete() -> None:
        async with await open_metadata_store(etcd.url) as store:
            await store.delete(path)

    asyncio.run(delete())
