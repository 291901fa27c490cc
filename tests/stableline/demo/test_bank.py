"""`stableline demo bank` end to end: its own broker, Spark, both isolation levels."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.mark.slow
def test_the_committed_total_equals_deposits_minus_withdrawals():
    run = subprocess.run(
        [sys.executable, "-m", "stableline", "demo", "bank", "--requests", "300", "--seed", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # The head of stderr holds what a JVM or broker said first; the tail, the traceback.
    assert run.returncode == 0, run.stdout + run.stderr[:3000] + "\n...\n" + run.stderr[-3000:]

    def total(label: str) -> int:
        match = re.search(rf"\| {re.escape(label)} \| (-?[\d,]+) \|", run.stdout)
        assert match, f"no {label!r} row in\n{run.stdout}"
        return int(match.group(1).replace(",", ""))

    expected = total("deposits - withdrawals")
    assert total("balances job (READ_COMMITTED)") == expected
    lost = int(re.search(r"their ([\d,]+) debited", run.stdout).group(1).replace(",", ""))
    assert total("monitor (READ_UNCOMMITTED)") == expected - lost
    assert "committed total equals deposits - withdrawals: yes" in run.stdout
