"""scripts/bench_all.py --quick: every figure of the suite runs (toy sizes) and lands in
one markdown table and one JSON file, each row with its same-run baseline."""

from __future__ import annotations

import json

import pytest

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
)


@pytest.mark.slow
def test_quick_suite_writes_one_table_with_a_baseline_for_every_figure(tmp_path, run_script):
    run = run_script("bench_all.py", "--quick", "--out", tmp_path, timeout=600)
    results = json.loads((tmp_path / "results.json").read_text())
    rows = results["rows"]
    for group in GROUPS:
        assert any(row["figure"].startswith(group) for row in rows), group
    for row in rows:
        assert row["value"] is not None and row["value"] >= 0, row
        assert row["baseline_label"] and row["baseline"] is not None, row
        if row["goal"]:
            assert row["met"] in (True, False), row
    assert results["quick"] is True
    assert set(results["seconds_per_figure"]) == {
        "e2e", "latency", "txn", "rc_ru", "subscriptions", "scaling", "scripts"
    }  # fmt: skip
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
    ):
        assert (tmp_path / produced).exists(), produced
