"""scripts/bench/bench_all.py --quick: every figure of the suite runs (toy sizes) and lands in
one markdown table and one JSON file, each row with its same-run baseline."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from tests.metadata.conftest import _find_etcd

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "bench"

GROUPS = (
    "E2E publish",
    "Publish latency",
    "Transactions",
    "RC vs RU",
    "Many subscriptions",
    "Scaling: producer processes",
    "Scaling: open transactions, each committed after 1 s",
    "Scaling: open transactions at a fixed commit rate",
    "Scaling: aborted-set size",
    "Ledger append",
    "Recovery",
    "Publish latency histogram",
    "MessageId parts",
    "Partitioned topic producer",
    "Reloaded topic's drain",
    "Kafka port",
    "Metadata store",
)
# The cluster scripts' rows (bench_cluster, bench_replication, bench_moves,
# bench_rereplication, bench_balancer), made only where an etcd can be started.
CLUSTER_GROUPS = (
    "Cluster on one machine: e2e",
    "Cluster: 1-message transactions",
    "Cluster: finding a topic's owner",
    "Replication: 3/3/2 against 1/1/1",
    "Replication: publish latency",
    "Replication: kill -9 of a 3/3/2 topic's owner",
    "Replication: kill -9 of a coordinator shard's leader",
    "Topic moves: a 3/3/2 topic",
    "Re-replication: a 2/2/1 topic's copy",
    "Load balancing: 6 busy 3/3/2 topics",
)


@pytest.mark.slow
def test_quick_suite_writes_one_table_with_a_baseline_for_every_figure(
    tmp_path, run_script, bench_all
):
    run = run_script("bench/bench_all.py", "--quick", "--out", tmp_path, timeout=600)
    results = json.loads((tmp_path / "results.json").read_text())
    rows = results["rows"]
    for group in GROUPS + (CLUSTER_GROUPS if _find_etcd() else ()):
        assert any(row["figure"].startswith(group) for row in rows), group
    for row in rows:
        assert row["value"] is not None, row
        assert row["signed"] or row["value"] >= 0, row
        assert row["baseline_label"] and row["baseline"] is not None, row
        if row["goal"]:
            assert row["met"] in (True, False), row
    assert results["quick"] is True
    assert set(results["seconds_per_figure"]) == set(bench_all.FIGURES)
    table = (tmp_path / "RESULTS.md").read_text()
    assert table.count("\n| ") == len(rows) + 1  # the header and a line per row
    assert "| figure | metric | value | baseline (same run) | ratio | goal | met |" in table
    assert "=== e2e" in run.stderr  # progress while it runs
    for produced in (
        "aborted-set.json",
        "open-txns.json",
        "rpc-cost.json",
        "recovery.json",
        "ledger-100b-entries.json",
        "message-id.json",
        "partitioned.json",
        "reload.json",
        "kafka.json",
        "metadata.json",
        "cluster.json",
        "replication.json",
        "moves.json",
        "rereplication.json",
        "balancer.json",
    ):
        assert (tmp_path / produced).exists(), produced


@pytest.fixture
def bench_all(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("bench_all")


def test_a_rows_goal_text_and_its_met_check_come_from_the_same_bounds(bench_all):
    Row, Bound = bench_all.Row, bench_all.Bound
    goal = (Bound("value", "<", 1), Bound("ratio", "<=", 0.05))
    fast = Row("Recovery", "to READY", 0.4, "s", "full replay", 10.0, goal=goal)
    slow = Row("Recovery", "to READY", 0.8, "s", "full replay", 10.0, goal=goal)
    assert fast.goal_text == slow.goal_text == "< 1 s, ratio <= 0.05"
    assert fast.met is True and slow.met is False  # 0.08 of the baseline: not 20x faster
    record = slow.record()
    assert record["goal"] == "< 1 s, ratio <= 0.05" and record["met"] is False
    assert record["ratio"] == 0.08 and record["note"] == ""


def test_a_row_without_a_goal_is_neither_met_nor_missed(bench_all):
    row = bench_all.Row("Scaling", "2 processes", 1200.0, "msgs/s", "1 process", 1000.0)
    assert row.goal_text == "" and row.met is None
    assert row.record()["ratio"] == 1.2


def test_a_bound_on_the_ratio_without_a_baseline_is_not_met(bench_all):
    Row, Bound = bench_all.Row, bench_all.Bound
    row = Row("Ledger", "appends/s", 5.0, "appends/s", goal=(Bound("ratio", ">=", 0.7),))
    assert row.met is False


def test_a_coordinator_shards_failover_is_two_rows_against_commits_with_nothing_killed(
    bench_all,
):
    result = {
        "session_timeout_s": 4.0,
        "shard_failover": {
            "kills": 3,
            "kill_to_decided": {"count": 3, "p50_ms": 4100.0, "p99_ms": 6200.0, "max_ms": 6200.0},
            "commit_nothing_killed": {"count": 3, "p50_ms": 8.0, "p99_ms": 20.0, "max_ms": 20.0},
            "kill_to_shard_taken": {
                "count": 3,
                "p50_ms": 3900.0,
                "p99_ms": 4400.0,
                "max_ms": 4400.0,
            },
            "killed_topic_owner_too": 1,
        },
    }
    p50, p99 = bench_all.shard_failover_rows(result)
    assert p50.figure == p99.figure
    assert p50.figure.startswith("Replication: kill -9 of a coordinator shard's leader")
    assert "3 kills, 4 s session" in p50.figure
    assert (p50.value, p50.baseline, p50.unit) == (4.1, 0.008, "s")
    assert p50.goal == () and p50.met is None
    assert (p99.value, p99.baseline) == (6.2, 0.02)
    assert p99.goal_text == "< 5 s" and p99.met is False
    assert "taken by another broker 3.90 s after" in p50.note
    assert "taken by another broker 4.40 s after" in p99.note
    assert "max 6.20 s" in p99.note and "topic in 1 of 3" in p99.note


def test_the_docs_page_gets_the_run_s_table_and_keeps_the_rest(bench_all, tmp_path):
    committed = (SCRIPTS.parents[1] / "docs" / "benchmarks.md").read_text()
    page = tmp_path / "benchmarks.md"
    page.write_text(committed)
    row = bench_all.Row("E2E publish", "1 topic", 1_500_000.0, "msgs/s", "raw stream", 9e6)
    header = {"cores": 2, "python": "3.11", "grpcio": "1", "date": "today", "total_seconds": 9}
    table = bench_all.markdown([row], header)
    bench_all.refresh_docs_page(page, table)
    refreshed = page.read_text()
    before, _, after = committed.partition(bench_all.RESULTS_BEGIN)
    assert refreshed.startswith(before + bench_all.RESULTS_BEGIN)
    assert refreshed.endswith(after[after.index(bench_all.RESULTS_END) :])
    assert "| E2E publish | 1 topic | 1,500,000 msgs/s |" in refreshed
    assert "# stableline benchmark results" not in refreshed  # the page keeps its own title
    bench_all.refresh_docs_page(page, table)  # again: the same page
    assert page.read_text() == refreshed


def test_a_page_without_the_results_markers_is_refused(bench_all, tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# no results section\n")
    with pytest.raises(ValueError, match="results"):
        bench_all.refresh_docs_page(page, "table\n")


def test_re_replication_is_two_rows_against_its_throttle_and_clients_alone(bench_all):
    result = {
        "policy": "2/2/1",
        "rate_limit_bytes_per_s": 20 * 1024 * 1024,
        "copied_bytes": 100_000_000,
        "copy_seconds": 4.5,
        "copy_mb_per_s": 22.2,
        "client_msgs_per_s_alone": 400_000,
        "client_msgs_per_s_during": 300_000,
    }
    copy, clients = bench_all.rereplication_rows(result)
    assert copy.figure == clients.figure and copy.figure.startswith("Re-replication: a 2/2/1")
    assert (copy.value, copy.unit, copy.baseline) == (22.2, "MB/s", 20.97)
    assert (clients.value, clients.baseline) == (300_000, 400_000)
    assert clients.record()["ratio"] == 0.75


def test_the_balancer_is_a_row_per_skewed_start_against_the_even_one(bench_all):
    result = {
        "topics": 6,
        "msgs_per_s": {
            "even": 100_000,
            "skewed_balancer_off": 80_000,
            "skewed_balancer_on": 95_000,
        },
        "runs": {
            "even": [{"moves": 0}],
            "skewed_balancer_off": [{"moves": 0}],
            "skewed_balancer_on": [{"moves": 4}],
        },
    }
    on, off = bench_all.balancer_rows(result)
    assert on.figure.startswith("Load balancing: 6 busy 3/3/2 topics")
    assert (on.value, on.baseline, on.record()["ratio"]) == (95_000, 100_000, 0.95)
    assert "[4]" in on.note and (off.value, off.baseline) == (80_000, 100_000)
