"""scripts/bench/bench_replication.py at toy sizes on a real etcd and three real brokers:
its JSON has every figure bench_all reads, and every row made from it has a baseline."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from tests.metadata.conftest import _find_etcd

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "bench"
KILLS = 2


@pytest.fixture
def bench_all(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("bench_all")


@pytest.mark.slow
def test_quick_run_measures_both_policies_and_every_kill_with_a_baseline_for_each_row(
    tmp_path, run_script, bench_all
):
    if _find_etcd() is None:
        pytest.skip("no etcd on PATH")
    out = tmp_path / "replication.json"
    in_memory_before = set(Path("/dev/shm").glob("bench-replication-*"))
    run = run_script(
        "bench/bench_replication.py",
        "--seconds", 0.5, "--rounds", 1, "--latency-seconds", 1.5, "--latency-rounds", 1,
        "--kills", KILLS,
        "--shard-kills", KILLS,
        "--dir", tmp_path, "--json", out,
        timeout=300,
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["etcd"] is True
    assert result["policies"] == {"replicated": "3/3/2", "one_copy": "1/1/1"}
    for kind in ("publish", "e2e"):
        for policy in ("replicated", "one_copy"):
            summary = result["throughput"][kind][policy]
            assert summary["msgs_per_s"] > 0, (kind, policy)
            assert len(summary["runs"]) == 1
            assert len(summary["broker_cpu_us_per_msg"]) == 3  # each broker's
            assert summary["broker_cpu_us_per_msg_total"] > 0
    latency = result["latency"]
    assert latency["rate"] == result["throughput"]["publish"]["replicated"]["msgs_per_s"] // 2
    in_memory = result["latency_in_memory"]
    assert (in_memory is not None) == Path("/dev/shm").is_dir()
    for measured in (latency, in_memory) if in_memory else (latency,):
        assert measured["rate"] == latency["rate"]
        for policy in ("replicated", "one_copy"):
            assert 0 < measured[policy]["p50_ms"] <= measured[policy]["p99_ms"], policy
            assert len(measured[policy]["runs"]) == 1
    # The memory-backed brokers' data dirs are gone with them.
    assert set(Path("/dev/shm").glob("bench-replication-*")) <= in_memory_before
    failover = result["failover"]
    assert failover["kills"] == KILLS and len(failover["samples_s"]) == KILLS
    assert sum(failover["kills_per_broker"].values()) == KILLS
    # Nothing is served again before the killed owner's session (4 s) can lapse.
    assert min(failover["samples_s"]) > 0
    assert failover["kill_to_first_ack"]["count"] == KILLS
    assert failover["fresh_client_first_send"]["count"] == KILLS
    assert f"failover {KILLS}/{KILLS}: killed" in run.stderr  # progress while it runs

    shard = result["shard_failover"]
    assert shard["kills"] == KILLS and len(shard["samples_s"]) == KILLS
    assert sum(shard["kills_per_broker"].values()) == KILLS
    assert len(shard["shards"]) == KILLS and len(shard["baseline_samples_s"]) == KILLS
    # A shard's new leader decides only after the killed leader's session can lapse.
    assert min(shard["samples_s"]) > 0
    assert shard["kill_to_decided"]["count"] == KILLS
    # Another broker took every killed leader's shard (seen by polling etcd, so it may
    # be seen a poll after the commit it answered).
    assert len(shard["taken_samples_s"]) == KILLS and min(shard["taken_samples_s"]) > 0
    assert shard["commit_nothing_killed"]["count"] == KILLS
    assert f"shard failover {KILLS}/{KILLS}: killed" in run.stderr

    rows = bench_all.replication_rows(result)
    assert len(rows) == 9 + 2 * (in_memory is not None)  # p50 and p99 in memory
    for row in rows:
        assert row.value is not None and row.value >= 0, row
        assert row.baseline_label and row.baseline is not None, row
        if row.goal:
            assert row.met in (True, False), row
