"""Running a script of scripts/ as its users do: its own process, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(name: str, *args: object, timeout: float) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run


@pytest.fixture
def run_script():
    """`run_script("faults/chaos.py", "--cycles", 10, timeout=600)`: the finished run, which
    must have exited 0 (else the assertion shows the end of its output)."""
    return _run
