"""The `stableline` command against a real broker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading


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


def _lines_of(process: subprocess.Popen) -> list[str]:
    """Lines the process prints, collected as they come (read by a thread)."""
    lines: list[str] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def _unbuffered_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stableline", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _consumed(broker, topic: str, count: int) -> list[str]:
    result = _cli(
        "consume", topic, "-s", "check", "-n", str(count), "-p", "earliest", "--timeout", "10",
        "--service-url", broker.service_url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [line.split("\t")[1] for line in result.stdout.splitlines()]


def test_produce_sends_each_line_of_a_file_or_of_stdin(broker, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("first\nsecond line\n\nlast without newline")
    result = _cli("produce", "from-file", "-f", str(lines), "--service-url", broker.service_url)
    assert result.returncode == 0, result.stderr
    assert "4 message(s) produced" in result.stdout
    assert _consumed(broker, "from-file", 4) == ["first", "second line", "", "last without newline"]
    result = subprocess.run(
        [sys.executable, "-m", "stableline", "produce", "from-stdin", "-f", "-", "-m", "flag",
         "--service-url", broker.service_url],
        input="a\nb\n", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _consumed(broker, "from-stdin", 3) == ["flag", "a", "b"]


def test_produce_needs_something_to_send_and_counts_must_not_be_negative(broker):
    for args, text in [
        (("produce", "t"), "give messages with -m TEXT or -f FILE"),
        (("produce", "t", "-m", "x", "-n", "-1"), "-1 is not in the range x>=1"),
        (("produce", "t", "-f", "-", "-n", "2"), "the lines of -f are sent once"),
        (("consume", "t", "-s", "s", "-n", "-1"), "-1 is not in the range x>=0"),
        (("perf", "consume", "t", "-n", "-1"), "-1 is not in the range x>=0"),
    ]:
        result = _cli(*args, "--service-url", broker.service_url)
        assert result.returncode == 2, (args, result.stderr)
        assert text in result.stderr, (args, result.stderr)


def test_ctrl_c_in_consume_reports_what_was_consumed(broker, client, wait):
    process = _unbuffered_cli(
        "consume", "interrupted", "-s", "s", "-n", "0", "--service-url", broker.service_url
    )
    lines = _lines_of(process)
    # The consumer subscribes (Latest) before anything is sent: wait for its subscription.
    wait(
        lambda: "s" in _cli("admin", "subscriptions", "list", "interrupted",
                            "--admin-url", broker.http_url).stdout.split(),
        30, "the CLI consumer to subscribe",
    )  # fmt: skip
    producer = client.create_producer("interrupted")
    for index in range(3):
        producer.send(f"m{index}".encode())
    wait(lambda: len(lines) >= 3, 30, "three messages printed")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 130
    stderr = process.stderr.read()
    # SIGINT may land between printing the third message and its acknowledgement.
    assert re.search(
        r"^3 message\(s\) consumed(, [23] acknowledged)? \(interrupted\)$", stderr, re.M
    )
    assert "Traceback" not in stderr


def test_an_unreachable_broker_is_explained_without_a_tls_hint_when_nothing_listens():
    result = _cli("consume", "t", "-s", "s", "--service-url", "127.0.0.1:1")
    assert result.returncode == 1
    assert "connection refused" in result.stderr and "is the broker running" in result.stderr
    assert "TLS" not in result.stderr and "tls_trust_certs_file_path" not in result.stderr
    result = _cli("admin", "topics", "list", "--admin-url", "http://127.0.0.1:1")
    assert result.returncode == 1
    assert "is the broker running" in result.stderr and "TLS" not in result.stderr
