"""The layout `cluster up` records: a new dir gets what was asked, a recorded one starts
as recorded, grows but never shrinks, and a contradicting option is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from stableline.local_cluster.layout import (
    BrokerSlot,
    ClusterLayout,
    LayoutError,
    Requested,
    load,
    plan,
    save,
)


def _asked(
    brokers=3, grpc=6650, http=8080, cluster="local", etcd="", given=(), kafka=9092
) -> Requested:
    return Requested(brokers, grpc, http, kafka, cluster, etcd, frozenset(given))


def test_a_new_dir_gets_consecutive_ports_from_the_bases(tmp_path: Path):
    layout = plan(_asked(), None, tmp_path)
    assert [(b.name, b.grpc_port, b.http_port, b.kafka_port) for b in layout.brokers] == [
        ("broker-0", 6650, 8080, 9092),
        ("broker-1", 6651, 8081, 9093),
        ("broker-2", 6652, 8082, 9094),
    ]
    assert layout.etcd_client_port and layout.etcd_peer_port
    assert layout.metadata_store_url == f"etcd://127.0.0.1:{layout.etcd_client_port}"


def test_base_port_zero_leaves_ports_free_until_bound_ones_are_recorded(tmp_path: Path):
    layout = plan(_asked(brokers=2, grpc=0, http=0, kafka=0), None, tmp_path)
    assert {(b.grpc_port, b.http_port, b.kafka_port) for b in layout.brokers} == {(0, 0, 0)}
    bound = layout.with_bound_ports({0: (41000, 42000, 43000), 1: (41001, 42001, 43001)})
    save(tmp_path, bound)
    assert load(tmp_path) == bound


def test_an_external_etcd_is_recorded_by_url(tmp_path: Path):
    layout = plan(_asked(etcd="etcd://10.0.0.1:2379", given={"etcd"}), None, tmp_path)
    assert layout.metadata_store_url == "etcd://10.0.0.1:2379"
    save(tmp_path, layout)
    assert load(tmp_path) == layout


def _recorded(tmp_path: Path) -> ClusterLayout:
    layout = ClusterLayout(
        "prod", "", 2379, 2380, tuple(BrokerSlot(i, 7000 + i, 9000 + i, 5000 + i) for i in range(3))
    )
    save(tmp_path, layout)
    return load(tmp_path)


def test_a_recorded_cluster_starts_as_recorded_whatever_the_defaults(tmp_path: Path):
    recorded = _recorded(tmp_path)
    assert plan(_asked(brokers=1), recorded, tmp_path) == recorded


def test_more_brokers_grow_a_recorded_cluster_on_the_next_ports(tmp_path: Path):
    recorded = _recorded(tmp_path)
    asked = _asked(brokers=4, grpc=7000, http=9000, kafka=5000, given={"brokers"})
    grown = plan(asked, recorded, tmp_path)
    assert grown.brokers[:3] == recorded.brokers
    assert grown.brokers[3] == BrokerSlot(3, 7003, 9003, 5003)


def test_kafka_ports_move_when_asked_and_are_kept_otherwise(tmp_path: Path):
    recorded = _recorded(tmp_path)
    moved = plan(_asked(kafka=6000, given={"base_kafka_port"}), recorded, tmp_path)
    assert [b.kafka_port for b in moved.brokers] == [6000, 6001, 6002]
    assert [b.grpc_port for b in moved.brokers] == [7000, 7001, 7002]
    assert plan(_asked(kafka=6000), recorded, tmp_path) == recorded


def test_a_record_without_kafka_ports_gets_free_ones(tmp_path: Path):
    (tmp_path / "cluster.json").write_text(
        '{"cluster": "prod", "etcd": {"clientPort": 2379, "peerPort": 2380}, '
        '"brokers": [{"name": "broker-0", "grpcPort": 7000, "httpPort": 9000}]}'
    )
    assert load(tmp_path).brokers == (BrokerSlot(0, 7000, 9000, 0),)


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        (_asked(brokers=2, given={"brokers"}), "pass --brokers 3 or more"),
        (_asked(cluster="other", given={"cluster"}), "records cluster 'prod'"),
        (_asked(etcd="etcd://h:1", given={"etcd"}), "an etcd of its own"),
        (_asked(grpc=6650, given={"base_grpc_port"}), "broker-0 on port 7000, not 6650"),
    ],
)
def test_an_option_contradicting_the_record_is_refused_naming_the_file(
    tmp_path: Path, asked: Requested, says: str
):
    recorded = _recorded(tmp_path)
    with pytest.raises(LayoutError) as refused:
        plan(asked, recorded, tmp_path)
    assert says in str(refused.value)
    assert str(tmp_path / "cluster.json") in str(refused.value)


def test_an_unreadable_record_is_refused(tmp_path: Path):
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(LayoutError, match="is not a cluster layout"):
        load(tmp_path)


def test_an_etcd_password_given_in_the_url_reaches_brokers_by_the_environment(tmp_path):
    from stableline.local_cluster.broker_process import persistence_env
    from stableline.local_cluster.supervisor import LocalCluster

    layout = ClusterLayout(
        "c", "etcd://u:p%40ss@10.0.0.1:2379?tls=true", 0, 0, (BrokerSlot(0, 1, 2),)
    )
    cluster = LocalCluster(tmp_path, layout, None, [], print)
    (broker,) = cluster.brokers
    assert "p@ss" not in " ".join(broker.extra_args)
    assert "etcd://u@10.0.0.1:2379?tls=true" in broker.extra_args
    # And beside it only the persistence a one-broker cluster can hold.
    assert broker.env == {"STABLELINE_METADATA_STORE_PASSWORD": "p@ss", **persistence_env(1)}
