"""scripts/load_test.py, tiny: 20 topics, 100 subscriptions, 10 clients, 10 s (the full
run is 1,000 topics, 10,000 subscriptions, 200 clients; its figures are in README)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "load_test.py"


@pytest.mark.slow
def test_tiny_load_loses_nothing_and_stays_within_its_memory_bound(tmp_path):
    figures_path = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--topics", "20", "--subscriptions-per-topic", "5",
         "--clients", "10", "--processes", "2", "--seconds", "10", "--max-rss-mb", "400",
         "--json", str(figures_path), "--data-parent", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
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
