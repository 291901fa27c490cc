"""scripts/bench/bench_cluster.py's bookkeeping: the order of its runs and their mean (its
measuring runs in bench_all --quick, tests/scripts/test_bench_all.py)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "bench"


@pytest.fixture
def bench_cluster(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("bench_cluster")


def test_runs_go_forth_and_back_so_drift_falls_on_every_configuration_alike(bench_cluster):
    assert bench_cluster.in_turn(["a", "b", "c"], 1) == ["a", "b", "c"]
    assert bench_cluster.in_turn(["a", "b", "c"], 3) == list("abccbaabc")


def test_the_mean_of_runs_goes_field_by_field_and_keeps_what_is_not_a_number(bench_cluster):
    runs = [
        {"brokers": 3, "msgs_per_s": 900_000, "cpu": {"each": [0.4, 0.5]}, "p99": None},
        {"brokers": 3, "msgs_per_s": 1_000_001, "cpu": {"each": [0.6, 0.5]}, "p99": 2.0},
    ]
    assert bench_cluster.mean_of(runs) == {
        "brokers": 3,  # the same in every run: kept as it is, an int
        "msgs_per_s": 950_000,  # a count: a whole number
        "cpu": {"each": [0.5, 0.5]},
        "p99": None,  # not a number in the first run: the first run's
    }
    assert bench_cluster.mean_of([{"etcd": 1}, {"etcd": 2}]) == {"etcd": 1.5}
