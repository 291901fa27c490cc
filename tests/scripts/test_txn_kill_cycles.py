"""scripts/txn_kill_cycles.py, a few cycles: SIGKILL under a transactional load, checked
after every restart (the script's own checks; 100 cycles is the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "txn_kill_cycles.py"
CYCLES = 4
SEED = 3  # its cycles include kills mid-commit and after a finished commit


@pytest.mark.slow
def test_sigkill_under_transactional_load_breaks_no_promise(tmp_path):
    rows_path = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--cycles", str(CYCLES), "--seed", str(SEED),
         "--json", str(rows_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{CYCLES} cycles, 0 with violations" in run.stdout
    rows = json.loads(rows_path.read_text())
    assert len(rows) == CYCLES
    assert {row["mid_commit"] for row in rows} == {True, False}
    assert rows[-1]["committed"] > 0 and rows[-1]["aborted"] > 0
