"""scripts/bench/bench_moves.py at toy size on a real etcd and three real brokers: every
move is timed with its baseline, no send fails, every acknowledged payload reads back
in order, and bench_all makes its rows from the JSON."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from tests.metadata.conftest import _find_etcd

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "bench"
MOVES = 3


@pytest.fixture
def bench_all(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("bench_all")


@pytest.mark.slow
def test_quick_run_times_every_move_fails_no_send_and_makes_rows_with_baselines(
    tmp_path, run_script, bench_all
):
    if _find_etcd() is None:
        pytest.skip("no etcd on PATH")
    out = tmp_path / "moves.json"
    run = run_script(
        "bench/bench_moves.py",
        "--moves", MOVES, "--baseline-seconds", 0.5, "--sends-between", 5,
        "--dir", tmp_path, "--json", out,
        timeout=300,
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["etcd"] is True
    assert result["unavailability"]["count"] == MOVES == len(result["samples_s"])
    assert min(result["samples_s"]) > 0
    assert result["baseline_longest_gap"]["count"] > 0
    assert result["failed_sends"] == 0, result["failures"]
    assert result["read_back_in_order"] is True
    assert f"move {MOVES}/{MOVES}:" in run.stderr  # progress while it runs
    rows = bench_all.moves_rows(result)
    assert len(rows) == 2  # p50 and p99
    for row in rows:
        assert row.value > 0 and row.baseline is not None and row.baseline_label, row
        assert row.met in (True, False), row
