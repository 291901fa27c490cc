"""scripts/faults/chaos.py, ten cycles: SIGKILL under a mixed load with clients reconnecting on
their own, every promise checked after every restart (100 cycles is the full run)."""

from __future__ import annotations

import json

import pytest

CYCLES = 10


@pytest.mark.slow
def test_sigkill_under_a_mixed_load_breaks_no_promise(tmp_path, run_script):
    rows_path = tmp_path / "rows.json"
    run = run_script(
        "faults/chaos.py", "--cycles", CYCLES, "--seed", 7, "--json", rows_path, timeout=600
    )
    assert f"{CYCLES} cycles, 0 with violations" in run.stdout
    rows = json.loads(rows_path.read_text())
    assert len(rows) == CYCLES
    assert sum(row["sent_acked"] for row in rows) > 0
    assert sum(row["commits"] for row in rows) > 0 and sum(row["aborts"] for row in rows) > 0
