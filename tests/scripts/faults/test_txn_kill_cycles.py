"""scripts/faults/txn_kill_cycles.py, a few cycles: SIGKILL under a transactional load, checked
after every restart (the script's own checks; 100 cycles is the full run)."""

from __future__ import annotations

import json

import pytest

CYCLES = 4
SEED = 3  # its cycles include kills mid-commit and after a finished commit


@pytest.mark.slow
def test_sigkill_under_transactional_load_breaks_no_promise(tmp_path, run_script):
    rows_path = tmp_path / "rows.json"
    run = run_script(
        "faults/txn_kill_cycles.py", "--cycles", CYCLES, "--seed", SEED, "--json", rows_path,
        timeout=300,
    )  # fmt: skip
    assert f"{CYCLES} cycles, 0 with violations" in run.stdout
    rows = json.loads(rows_path.read_text())
    assert len(rows) == CYCLES
    assert {row["mid_commit"] for row in rows} == {True, False}
    assert rows[-1]["committed"] > 0 and rows[-1]["aborted"] > 0
