"""The `stableline` command against three real brokers: client commands given every
broker's address reach topics whichever broker owns them, admin commands sent to a
broker that does not own a topic reach its owner, and `perf` loads topics spread
over the three."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import stableline
from stableline.cli.main import main

from .conftest import Cluster


def _id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _service(cluster: Cluster) -> str:
    return ",".join(_id(b) for b in cluster.brokers)


def _one_topic_per_broker(cluster: Cluster, prefix: str) -> dict[str, str]:
    """Broker id -> a topic it owns, placed by lookups."""
    owned: dict[str, str] = {}
    with stableline.Client(_service(cluster)) as client:
        for i in range(30):
            topic = f"persistent://public/default/{prefix}-{i}"
            owned.setdefault(client.lookup_topic(topic).grpc_address, topic)
            if len(owned) == 3:
                return owned
    raise AssertionError(f"placement left a broker without a topic: {owned}")


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_produce_and_consume_given_every_broker_reach_topics_on_all_three(cluster: Cluster):
    for owner, topic in _one_topic_per_broker(cluster, "cli-pc").items():
        service = ["--service-url", _service(cluster)]
        produced = _cli("produce", topic, "-m", f"on {owner}", "-n", "3", *service)
        assert "3 message(s) produced" in produced
        consumed = _cli(
            "consume", topic, "-s", "cli", "-n", "3", "-p", "Earliest", "--timeout", "10", *service
        )
        assert [line.split("\t")[1] for line in consumed.splitlines()[:3]] == [f"on {owner}"] * 3


def test_txn_produce_given_every_broker_commits_on_the_first(cluster: Cluster):
    # A transaction lives on the first broker's coordinator until transactions span
    # brokers: a topic that broker owns.
    topic = _one_topic_per_broker(cluster, "cli-txn")[_id(cluster.brokers[0])]
    output = _cli("txn", "produce", topic, "-m", "a", "-m", "b", "--service-url", _service(cluster))
    assert "COMMITTED: 2 message(s)" in output
    with stableline.Client(_service(cluster)) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(2)] == [b"a", b"b"]


def test_admin_commands_sent_to_any_broker_reach_the_topic_s_owner(cluster: Cluster):
    owned = _one_topic_per_broker(cluster, "cli-admin")
    owner_id, topic = next(
        (owner, topic) for owner, topic in owned.items() if owner != _id(cluster.brokers[0])
    )
    owner = cluster.by_id(owner_id)
    elsewhere = ["--admin-url", cluster.brokers[0].http_url]

    lookup = _cli("admin", "topics", "lookup", topic, *elsewhere)
    assert lookup.splitlines() == [f"stableline://{owner_id}", owner.http_url]

    # GET, PUT and DELETE each answered by the owner, through a redirect.
    _cli("admin", "topics", "create", topic, *elsewhere)
    created = _cli("admin", "subscriptions", "create", topic, "-s", "audit", *elsewhere)
    assert "created subscription audit" in created
    stats = json.loads(_cli("admin", "topics", "stats", topic, *elsewhere))
    assert stats["subscriptions"]["audit"]["subscriptionIsolationLevel"] == "READ_COMMITTED"
    _cli("admin", "topics", "delete", topic, *elsewhere)
    assert topic not in _cli("admin", "topics", "list", "--admin-url", owner.http_url)

    listed = _cli("admin", "brokers", "list", cluster.name, *elsewhere).split()
    assert sorted(listed) == sorted(_id(b) for b in cluster.brokers)


def test_perf_given_every_broker_loads_topics_spread_over_all_three(
    cluster: Cluster, tmp_path: Path
):
    out = tmp_path / "perf.json"
    command = [sys.executable, "-m", "stableline", "perf", "e2e", "cli-perf", "--topics", "3"]
    command += ["-n", "3000", "-d", "60", "--warmup", "0", "--interval", "0.5"]
    command += ["--service-url", _service(cluster), "--json", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["produced"]["messages"] == result["consumed"]["messages"] == 3000
    assert result["checks"]["ok"]
    with stableline.Client(_service(cluster)) as client:
        owners = {client.lookup_topic(f"cli-perf-{i}").grpc_address for i in range(3)}
    assert len(owners) > 1, "the perf topics are spread over the brokers"
