"""Load reports and load-aware placement on real brokers and a real etcd: a producer's
traffic shows in every broker's `admin brokers load`, and a broker that joins takes
the next topics placed, by itself."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from click.testing import CliRunner

import stableline
from stableline.cli.main import main
from stableline.testing import BrokerProcess
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer

from .conftest import Cluster, running_cluster

# Reports every second, so the tests wait little for them.
FAST_REPORTS = {"STABLELINE_LOAD_REPORT_INTERVAL_S": "1"}
DEADLINE_S = 30.0


def _id(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _service(brokers: list[BrokerProcess]) -> str:
    return ",".join(_id(broker) for broker in brokers)


def _load(broker: BrokerProcess) -> dict[str, dict]:
    """GET /admin/v2/brokers/load asked of `broker`: broker id -> its report."""
    with urllib.request.urlopen(broker.http_url + "/admin/v2/brokers/load", timeout=10) as answer:
        return {report["brokerId"]: report for report in json.loads(answer.read())}


def test_a_producers_traffic_shows_in_admin_brokers_load_on_every_broker(
    cluster_etcd: EtcdServer, tmp_path: Path
):
    with running_cluster(cluster_etcd, tmp_path, env=FAST_REPORTS) as cluster:
        topic = "persistent://public/default/load-reported"
        with stableline.Client(_service(cluster.brokers)) as client:
            producer = client.create_producer(topic)
            leader = cluster.topic_leader(topic)
            asked = next(broker for broker in cluster.brokers if _id(broker) != leader)
            deadline = time.monotonic() + DEADLINE_S
            while True:
                for _ in range(50):
                    producer.send(b"x" * 100)
                reports = _load(asked)
                load = reports[leader]["load"]
                if load.get("msgRateIn", 0) > 0 and topic in reports[leader]["busiestTopics"]:
                    break
                assert time.monotonic() < deadline, f"no traffic reported: {reports}"
        assert set(reports) == {_id(broker) for broker in cluster.brokers}
        assert load["msgThroughputIn"] > 0 and load["loadScore"] > 0
        assert load["rssBytes"] > 0 and load["topicsLed"] >= 1
        for figure in ("msgRateOut", "msgThroughputOut", "cpu", "connections"):
            assert figure in load
        assert reports[_id(asked)]["thisBroker"] and not reports[leader]["thisBroker"]

        result = CliRunner().invoke(
            main, ["admin", "brokers", "load", "--admin-url", asked.http_url]
        )
        assert result.exit_code == 0, result.output
        header, *rows = result.output.splitlines()
        assert header.split()[:2] == ["BROKER", "TOPICS"]
        assert len(rows) == 3
        (leader_row,) = [row for row in rows if row.startswith(leader)]
        assert float(leader_row.split()[2]) > 0  # msgs/s in


def test_a_broker_that_joins_takes_the_next_topics_placed(cluster_etcd: EtcdServer, tmp_path: Path):
    with running_cluster(cluster_etcd, tmp_path, env=FAST_REPORTS) as cluster:
        with stableline.Client(_service(cluster.brokers)) as client:
            for i in range(6):
                client.lookup_topic(f"persistent://public/default/before-{i}")
        joiner = _fourth_broker(cluster, tmp_path)
        joiner.start()
        try:
            brokers = [*cluster.brokers, joiner]
            # Every broker must have seen it join (its watch: what placement reads).
            deadline = time.monotonic() + DEADLINE_S
            while not all(_id(joiner) in _live_seen_by(broker, cluster) for broker in brokers):
                assert time.monotonic() < deadline, "the fourth broker never showed up"
                time.sleep(0.1)
            placed = []
            with stableline.Client(_service(cluster.brokers)) as client:
                for i in range(2):
                    topic = f"persistent://public/default/after-{i}"
                    client.lookup_topic(topic)
                    placed.append(cluster.topic_leader(topic))
            # It led nothing; the others led two each: it takes both, no operator action.
            assert placed == [_id(joiner)] * 2
        finally:
            joiner.stop()


def _live_seen_by(broker: BrokerProcess, cluster: Cluster) -> set[str]:
    path = f"/admin/v2/clusters/{cluster.name}/brokers"
    return {document["brokerId"] for document in broker.admin(path) if document["live"]}


def _fourth_broker(cluster: Cluster, root: Path) -> BrokerProcess:
    return BrokerProcess(
        root / "broker-joiner" / "data",
        extra_args=["--metadata-store", cluster.etcd.url, "--cluster", cluster.name],
        env={
            "STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S),
            **FAST_REPORTS,
        },
    )
