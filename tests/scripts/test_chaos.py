"""scripts/chaos.py, ten cycles: SIGKILL under a mixed load with clients reconnecting on
their own, every promise checked after every restart (100 cycles is the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "chaos.py"
CYCLES = 10


@pytest.mark.slow
def test_sigkill_under_a_mixed_load_breaks_no_promise(tmp_path):
    rows_path = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--cycles", str(CYCLES), "--seed", "7",
         "--json", str(rows_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert f"{CYCLES} cycles, 0 with violations" in run.stdout
    rows = json.loads(rows_path.read_text())
    assert len(rows) == CYCLES
    assert sum(row["sent_acked"] for row in rows) > 0
    assert sum(row["commits"] for row in rows) > 0 and sum(row["aborts"] for row in rows) > 0
