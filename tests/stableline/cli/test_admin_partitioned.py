"""`stableline admin topics` partitioned-topic commands against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys

from stableline import InitialPosition, IsolationLevel


def _admin(broker, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "stableline", "admin", "topics", *args]
    return subprocess.run(
        [*command, "--admin-url", broker.http_url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_partitioned_topics_are_created_grown_described_and_deleted(broker, client):
    assert "with 3 partitions" in _ok(_admin(broker, "create-partitioned-topic", "cli", "-p", "3"))
    metadata = json.loads(_ok(_admin(broker, "get-partitioned-topic-metadata", "cli")))
    assert metadata == {"partitions": 3}
    _ok(_admin(broker, "update-partitioned-topic", "cli", "-p", "4"))
    assert json.loads(_ok(_admin(broker, "get-partitioned-topic-metadata", "cli"))) == {
        "partitions": 4
    }
    client.subscribe(
        "cli",
        "audit",
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
        initial_position=InitialPosition.Earliest,
    ).close()
    producer = client.create_producer("cli")
    producer.send(b"m", partition_key="k")
    stats = json.loads(_ok(_admin(broker, "partitioned-stats", "cli")))
    assert stats["msgInCounter"] == 1 and len(stats["partitions"]) == 4
    assert {
        p["subscriptions"]["audit"]["subscriptionIsolationLevel"]
        for p in stats["partitions"].values()
    } == {"READ_UNCOMMITTED"}
    in_use = _admin(broker, "delete-partitioned-topic", "cli")
    assert in_use.returncode == 1 and "connected producer" in in_use.stderr
    producer.close()
    assert "deleted cli" in _ok(_admin(broker, "delete-partitioned-topic", "cli"))
    assert json.loads(_ok(_admin(broker, "get-partitioned-topic-metadata", "cli"))) == {
        "partitions": 0
    }


def test_bad_counts_and_clashes_are_refused_with_the_reason(broker):
    for count, says in (("0", "400"), ("-2", "400"), ("5000", "max_num_partitions")):
        result = _admin(broker, "create-partitioned-topic", "bad", "-p", count)
        assert result.returncode == 1 and says in result.stderr
    _ok(_admin(broker, "create-partitioned-topic", "twice", "-p", "2"))
    again = _admin(broker, "create-partitioned-topic", "twice", "-p", "2")
    assert again.returncode == 1 and "409" in again.stderr and "already exists" in again.stderr
    shrink = _admin(broker, "update-partitioned-topic", "twice", "-p", "1")
    assert shrink.returncode == 1 and "only grows" in shrink.stderr
    missing = _admin(broker, "partitioned-stats", "never")
    assert missing.returncode == 1 and "404" in missing.stderr
