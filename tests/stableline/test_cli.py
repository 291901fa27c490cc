"""The `stableline` command against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stableline", *args], capture_output=True, text=True, timeout=timeout
    )


def test_produce_then_consume_and_admin_commands(broker):
    result = _cli(
        "produce",
        "cli-topic",
        "-m",
        "hello",
        "-m",
        "world",
        "-n",
        "2",
        "--service-url",
        broker.service_url,
    )
    assert result.returncode == 0, result.stderr
    assert "4 message(s) produced" in result.stdout
    result = _cli(
        "consume",
        "cli-topic",
        "-s",
        "cli-sub",
        "-n",
        "4",
        "-p",
        "Earliest",
        "--isolation",
        "read_uncommitted",
        "-t",
        "Shared",
        "--timeout",
        "10",
        "--service-url",
        broker.service_url,
    )
    assert result.returncode == 0, result.stderr
    assert [line.split("\t")[1] for line in result.stdout.splitlines()] == [
        "hello",
        "world",
        "hello",
        "world",
    ]
    result = _cli("admin", "topics", "list", "--admin-url", broker.http_url)
    assert result.stdout.split() == ["persistent://public/default/cli-topic"]
    stats = json.loads(
        _cli("admin", "topics", "stats", "cli-topic", "--admin-url", broker.http_url).stdout
    )
    assert stats["subscriptions"]["cli-sub"]["subscriptionIsolationLevel"] == "READ_UNCOMMITTED"
    internal = json.loads(
        _cli(
            "admin", "topics", "internal-stats", "cli-topic", "--admin-url", broker.http_url
        ).stdout
    )
    assert internal["numberOfEntries"] >= 1


def test_cli_errors_are_clear(broker):
    result = _cli(
        "consume", "t", "-s", "s", "--isolation", "dirty", "--service-url", broker.service_url
    )
    assert result.returncode != 0
    assert "unknown isolation level" in result.stderr
    result = _cli("admin", "topics", "stats", "missing", "--admin-url", broker.http_url)
    assert result.returncode != 0
    assert "404" in result.stderr and "does not exist" in result.stderr
    result = _cli("admin", "topics", "list", "--admin-url", "http://127.0.0.1:1")
    assert result.returncode != 0
    assert "cannot reach" in result.stderr


def test_transaction_commands(broker):
    result = _cli(
        "txn", "produce", "cli-txn", "-m", "a", "-m", "b", "--service-url", broker.service_url
    )
    assert result.returncode == 0, result.stderr
    assert "COMMITTED: 2 message(s)" in result.stdout
    result = _cli(
        "txn", "produce", "cli-txn", "-m", "c", "--abort", "--service-url", broker.service_url
    )
    assert "ABORTED" in result.stdout
    buffer = json.loads(
        _cli("admin", "txn-buffer", "cli-txn", "--admin-url", broker.http_url).stdout
    )
    assert buffer["abortedTxnSize"] == 1 and buffer["state"] == "Ready"
    listing = _cli("txn", "list", "--admin-url", broker.http_url).stdout
    assert "committed 1, aborted 1" in listing
    shown = json.loads(_cli("txn", "show", "0:1", "--admin-url", broker.http_url).stdout)
    assert shown["status"] == "COMMITTED"
    result = _cli(
        "consume",
        "cli-txn",
        "-s",
        "rc",
        "-n",
        "0",
        "-p",
        "Earliest",
        "--timeout",
        "1",
        "--service-url",
        broker.service_url,
    )
    assert [line.split("\t")[1] for line in result.stdout.splitlines()] == ["a", "b"]
