"""Brokers register in their cluster (stableline/metadata/brokers.py), through real
broker processes: on one real etcd they list each other, a killed one leaves the list
when its lease lapses, a taken address or data dir is refused, an unreachable etcd
stops the start with one line."""

from __future__ import annotations

import itertools
import os
import time
import urllib.error
from pathlib import Path

import pytest
from click.testing import CliRunner

from stableline.cli.main import main
from stableline.testing import BrokerExited, BrokerProcess

from .conftest import ONE_COPY_ENV, SHORT_SESSION_TIMEOUT_S, _free_port

_clusters = itertools.count()


@pytest.fixture
def cluster() -> str:
    return f"c{os.getpid()}-{next(_clusters)}"


def _cluster_broker(tmp_path: Path, name: str, url: str, cluster: str, **env: str) -> BrokerProcess:
    return BrokerProcess(
        tmp_path / name / "data",
        extra_args=["--metadata-store", url, "--cluster", cluster],
        # Clusters of one or two brokers here: one copy of each topic.
        env={
            "STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S),
            **ONE_COPY_ENV,
            **env,
        },
    )


@pytest.fixture
def brokers(tmp_path: Path):
    started: list[BrokerProcess] = []
    yield started
    for broker in started:
        broker.stop()


def _listed(broker: BrokerProcess, cluster: str) -> list[str]:
    return broker.admin(f"/admin/v2/brokers/{cluster}")


def test_two_brokers_on_one_etcd_list_each_other(etcd, cluster, tmp_path, brokers):
    first = _cluster_broker(tmp_path, "a", etcd.url, cluster)
    second = _cluster_broker(tmp_path, "b", etcd.url, cluster)
    for broker in (first, second):
        broker.start()
        brokers.append(broker)
    expected = sorted(f"127.0.0.1:{b.grpc_port}" for b in (first, second))
    assert sorted(_listed(first, cluster)) == expected
    assert sorted(_listed(second, cluster)) == expected
    assert cluster in first.admin("/admin/v2/clusters")

    listed = CliRunner().invoke(
        main, ["admin", "brokers", "list", cluster, "--admin-url", second.http_url]
    )
    assert listed.exit_code == 0, listed.output
    assert sorted(listed.output.split()) == expected

    second.stop()  # a clean stop leaves the list at once
    assert _listed(first, cluster) == [f"127.0.0.1:{first.grpc_port}"]


def test_a_killed_broker_leaves_the_list_when_its_lease_lapses(etcd, cluster, tmp_path, brokers):
    survivor = _cluster_broker(tmp_path, "a", etcd.url, cluster)
    victim = _cluster_broker(tmp_path, "b", etcd.url, cluster)
    for broker in (survivor, victim):
        broker.start()
        brokers.append(broker)
    assert len(_listed(survivor, cluster)) == 2
    victim.kill()
    killed_at = time.monotonic()
    deadline = killed_at + SHORT_SESSION_TIMEOUT_S * 5
    while len(_listed(survivor, cluster)) == 2:
        assert time.monotonic() < deadline, "the killed broker is still listed"
        time.sleep(0.1)
    assert _listed(survivor, cluster) == [f"127.0.0.1:{survivor.grpc_port}"]
    assert time.monotonic() - killed_at > SHORT_SESSION_TIMEOUT_S / 2


def test_a_broker_restarted_after_kill_replaces_the_registration_it_left(
    etcd, cluster, tmp_path, brokers
):
    # A long session: the restart must not wait for the dead run's lease.
    broker = _cluster_broker(
        tmp_path, "a", etcd.url, cluster, STABLELINE_METADATA_SESSION_TIMEOUT_S="60"
    )
    broker.start()
    brokers.append(broker)
    broker.kill()
    broker.start()
    assert _listed(broker, cluster) == [f"127.0.0.1:{broker.grpc_port}"]


def test_a_second_broker_advertising_a_taken_address_is_refused(etcd, cluster, tmp_path, brokers):
    first = _cluster_broker(tmp_path, "a", etcd.url, cluster)
    first.start()
    brokers.append(first)
    taken = f"127.0.0.1:{first.grpc_port}"
    second = _cluster_broker(tmp_path, "b", etcd.url, cluster, STABLELINE_ADVERTISED_ADDRESS=taken)
    with pytest.raises(BrokerExited) as refused:
        second.start()
    assert refused.value.returncode != 0
    last_line = second.log().strip().splitlines()[-1]
    assert f"broker {taken} is already registered in cluster {cluster}" in last_line
    assert _listed(first, cluster) == [taken]


def test_an_unreachable_metadata_store_stops_the_start_in_one_line(tmp_path):
    url = f"etcd://127.0.0.1:{_free_port()}"
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--metadata-store", url], env=ONE_COPY_ENV
    )
    started = time.monotonic()
    with pytest.raises(BrokerExited) as refused:
        broker.start()
    assert refused.value.returncode != 0
    (line,) = broker.log().strip().splitlines()  # one line, no traceback
    assert line.startswith("Error: cannot open the cluster metadata store: ")
    assert f"etcd at {url} is unreachable" in line
    assert time.monotonic() - started < 10


def test_a_second_broker_on_a_data_dir_in_use_is_refused_before_it_touches_the_cluster(
    etcd, cluster, tmp_path, brokers
):
    first = _cluster_broker(tmp_path, "a", etcd.url, cluster)
    first.start()
    brokers.append(first)
    # The same data dir under another name (a symlink), its logs beside the link.
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "data").symlink_to(first.data_dir)
    second = _cluster_broker(tmp_path, "b", etcd.url, cluster)
    with pytest.raises(BrokerExited) as refused:
        second.start()
    assert refused.value.returncode != 0
    (line,) = second.log().strip().splitlines()
    assert line == (
        f"Error: data dir {first.data_dir.resolve()} is in use by pid {first.process.pid}; "
        f"stop that broker or pass another --data-dir"
    )
    assert _listed(first, cluster) == [f"127.0.0.1:{first.grpc_port}"]


def test_a_standalone_broker_lists_itself_from_its_embedded_store(broker):
    assert broker.admin("/admin/v2/clusters") == ["standalone"]
    assert broker.admin("/admin/v2/brokers/standalone") == [f"127.0.0.1:{broker.grpc_port}"]
    with pytest.raises(urllib.error.HTTPError) as unknown:
        broker.admin("/admin/v2/brokers/elsewhere")
    assert unknown.value.code == 404
