"""scripts/bench/load_test.py, tiny: 20 topics, 100 subscriptions, 10 clients, 10 s (the full
run is 1,000 topics, 10,000 subscriptions, 200 clients; its figures are in docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_tiny_load_loses_nothing_and_stays_within_its_memory_bound(tmp_path, run_script):
    figures_path = tmp_path / "figures.json"
    run = run_script(
        "bench/load_test.py", "--topics", 20, "--subscriptions-per-topic", 5, "--clients", 10,
        "--processes", 2, "--seconds", 10, "--max-rss-mb", 400, "--json", figures_path,
        "--data-parent", tmp_path, timeout=300,
    )  # fmt: skip
    assert "load test passed" in run.stdout
    figures = json.loads(figures_path.read_text())
    assert figures["subscriptions"] == 100 and figures["clients"] == 10
    assert figures["lost"] == 0 and figures["failures"] == []
    assert figures["messages_acknowledged"] > 0
    # Every acknowledged message reached each of its topic's 5 subscriptions.
    assert figures["deliveries_expected"] == 5 * figures["messages_acknowledged"]
    assert figures["deliveries"] >= figures["deliveries_expected"]
    assert 0 < figures["rss_peak_mb"] <= 400
    assert figures["restart_load_s"] > 0
