"""`stableline perf ...` against a real broker: short runs, counts and consistency, no timing.

Each command runs as a user would run it (a subprocess of the CLI) with --json, and
the summary it writes is checked: what was published durable is what every
subscription received (READ_COMMITTED: only plain and committed messages), and the
rates and latency percentiles are present and ordered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

TIMEOUT_S = 180


def perf(broker, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"perf-{len(list(tmp_path.glob('perf-*.json')))}.json"
    # No warm-up unless a test asks for one: every latency is recorded and counted.
    command = [sys.executable, "-m", "stableline", "perf", args[0], "--warmup", "0", *args[1:]]
    command += ["--service-url", broker.service_url, "--json", str(out)]
    command += ["--broker-pid", str(broker.process.pid), "--interval", "0.5"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stdout + run.stderr
    return run, json.loads(out.read_text())


def assert_latency(summary: dict, count: int) -> None:
    assert summary["count"] == count
    assert 0 <= summary["min_ms"] <= summary["p50_ms"] <= summary["p99_ms"]
    assert summary["p99_ms"] <= summary["p99.9_ms"] <= summary["max_ms"]


def test_e2e_delivers_every_published_message_once_with_rates_and_latencies(broker, tmp_path):
    run, result = perf(broker, tmp_path, "e2e", "e2e-topic", "-n", "20000", "-d", "60")
    produced, consumed = result["produced"], result["consumed"]
    assert produced["messages"] == consumed["messages"] == 20_000
    assert consumed["by_level"] == {"READ_COMMITTED": 20_000, "READ_UNCOMMITTED": 0}
    assert produced["msgs_per_s"] > 0 and consumed["mb_per_s"] > 0
    assert_latency(produced["publish_latency"], 20_000)
    assert_latency(consumed["e2e_latency"], 20_000)
    assert set(result["cpu_us_per_msg"]) == {"producers", "consumers", "broker"}
    assert result["checks"] == {
        "rc_received_aborted": 0,
        "ru_received_aborted": 0,
        "wrong_size": 0,
        "drain_timed_out": False,
        "expected_deliveries": 20_000,
        "missing": 0,
        "duplicates": 0,
        "ok": True,
    }
    assert "p99.9" in run.stdout and "checks" in run.stdout
    assert "transactions" not in result


def test_latencies_of_the_warm_up_are_left_out_and_its_messages_still_count(broker, tmp_path):
    _run, result = perf(broker, tmp_path, "e2e", "warm-topic", "-n", "5000", "--warmup", "600")
    assert result["produced"]["messages"] == result["consumed"]["messages"] == 5_000
    assert result["produced"]["publish_latency"]["count"] == 0
    assert result["consumed"]["e2e_latency"]["count"] == 0
    assert result["checks"]["ok"]


def test_txn_with_aborts_read_committed_gets_only_committed_and_uncommitted_gets_all(
    broker, tmp_path
):
    # 20 transactions of 1,000 messages, every 4th aborted; one RC and one RU subscription.
    _run, result = perf(
        broker, tmp_path, "txn", "txn-topic", "-n", "20000", "-d", "60", "--txn-size", "1000",
        "--abort-ratio", "0.25", "--subscriptions", "2", "--isolation", "mixed",
    )  # fmt: skip
    txns = result["transactions"]
    assert (txns["committed"], txns["aborted"]) == (15, 5)
    assert result["produced"]["messages"] == 20_000
    assert result["produced"]["visible_to_read_committed"] == 15_000
    assert result["consumed"]["by_level"] == {
        "READ_COMMITTED": 15_000,
        "READ_UNCOMMITTED": 20_000,
    }
    checks = result["checks"]
    assert checks["ok"] and checks["missing"] == checks["duplicates"] == 0
    assert checks["rc_received_aborted"] == 0
    assert checks["ru_received_aborted"] == 5_000
    assert checks["rc_visible_before_commit"] == 0
    assert_latency(txns["end_latency"], 20)
    assert_latency(txns["commit_to_visible"], 15)


def test_consume_receives_what_produce_published(broker, tmp_path):
    _run, produced = perf(broker, tmp_path, "produce", "backlog", "-n", "15000", "-d", "60")
    assert produced["produced"]["messages"] == 15_000
    assert "consumed" not in produced
    _run, consumed = perf(
        broker, tmp_path, "consume", "backlog", "-n", "15000", "-d", "60", "-p", "Earliest"
    )
    assert consumed["consumed"]["messages"] == 15_000
    assert "produced" not in consumed
    assert_latency(consumed["consumed"]["e2e_latency"], 15_000)


def test_processes_topics_and_shared_consumers_add_up(broker, tmp_path):
    # 2 topics x 2 producers over 2 processes; 2 subscriptions a topic, 2 consumers each.
    _run, result = perf(
        broker, tmp_path, "e2e", "spread", "-n", "8000", "-d", "60", "--topics", "2",
        "--producers", "2", "--processes", "2", "--subscriptions", "2", "--consumers", "2",
        "--batch-max-messages", "100",
    )  # fmt: skip
    assert result["produced"]["messages"] == 8_000
    assert result["consumed"]["messages"] == 2 * 8_000
    assert result["checks"]["ok"]


def test_bad_options_and_an_unreachable_broker_get_a_clear_error(tmp_path):
    base = [sys.executable, "-m", "stableline", "perf"]
    bad = subprocess.run([*base, "e2e", "--size", "5"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "--size must be >= 17" in bad.stderr
    unreachable = subprocess.run(
        [*base, "produce", "-n", "10", "--service-url", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert "BrokerUnavailable" in unreachable.stderr and "Traceback" not in unreachable.stderr


def test_choices_are_case_insensitive(broker, tmp_path):
    perf(broker, tmp_path, "produce", "cases", "-n", "200", "-d", "60")
    _run, consumed = perf(
        broker, tmp_path, "consume", "cases", "-n", "200", "-d", "60", "-p", "earliest",
        "--subscription-type", "keyshared", "--isolation", "READ_COMMITTED",
    )  # fmt: skip
    assert consumed["consumed"]["messages"] == 200
    assert consumed["workload"]["initial_position"] == "Earliest"
    assert consumed["workload"]["subscription_type"] == "KeyShared"


def test_ctrl_c_prints_what_was_done_and_exits_130(broker, tmp_path):
    out = tmp_path / "interrupted.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "stableline", "perf", "e2e", "stopped", "-d", "600", "--rate",
         "500", "--interval", "0.2", "--service-url", broker.service_url, "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()
    # Progress lines ("[  0.2s] pub ...") start once the workers run.
    deadline = time.monotonic() + TIMEOUT_S
    while not any(line.startswith("[") for line in lines):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "no progress line"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # to the parent, as a terminal's Ctrl-C reaches it first
    assert process.wait(timeout=TIMEOUT_S) == 130, process.stderr.read()
    summary = json.loads(out.read_text())
    assert summary["interrupted"] is True
    assert summary["produced"]["messages"] > 0
    assert any("interrupted after" in line for line in lines)
    assert "Traceback" not in process.stderr.read()
