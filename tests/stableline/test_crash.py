"""kill -9 of the broker while producers send: nothing acknowledged is lost or duplicated."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stableline
from stableline import MessageId

CYCLES = 3
PRODUCER = Path(__file__).with_name("crash_producer.py")


def _read_all(service_url: str, topic: str) -> list[bytes]:
    with stableline.Client(service_url) as client:
        reader = client.create_reader(
            topic, MessageId.earliest, stableline.IsolationLevel.READ_UNCOMMITTED
        )
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        return values


def _last_ledger_file(data_dir: Path) -> Path:
    files = sorted((data_dir / "ledgers" / "public" / "default" / "crash").glob("*.log"))
    return max((f for f in files if f.stat().st_size > 0), key=lambda f: f.name)


@pytest.mark.slow
def test_sigkill_while_producing_loses_no_acknowledged_message(broker):
    rng = random.Random(int(os.environ.get("CRASH_SEED", "7")))
    acknowledged: dict[int, str] = {}
    for cycle in range(CYCLES):
        # Each cycle sends its own values: written-but-unacknowledged ones stay unique.
        child = subprocess.Popen(
            [sys.executable, str(PRODUCER), broker.service_url, "crash", str(cycle * 10_000_000)],
            stdout=subprocess.PIPE,
            text=True,
        )
        wanted = rng.randint(300, 3000)
        seen = 0
        deadline = time.monotonic() + 30
        while seen < wanted and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            index, message_id = line.split()
            acknowledged[int(index)] = message_id
            seen += 1
        assert seen == wanted, f"cycle {cycle}: only {seen} acks before the deadline"
        broker.kill()
        for line in child.stdout:  # acks that raced the kill still count
            index, message_id = line.split()
            acknowledged[int(index)] = message_id
        child.wait(timeout=30)
        if cycle == CYCLES - 1:
            # A torn write: half a frame at the end of the last ledger.
            with open(_last_ledger_file(broker.data_dir), "ab") as handle:
                handle.write(b"\x40\x00\x00\x00\xde\xad")
        broker.start()
        values = _read_all(broker.service_url, "crash")
        assert len(values) == len(set(values)), f"cycle {cycle}: duplicates after restart"
        positions = {int(v.decode().split("-")[1]): i for i, v in enumerate(values)}
        missing = sorted(set(acknowledged) - set(positions))
        assert not missing, f"cycle {cycle}: acknowledged messages lost: {missing[:10]}"
        ordered = [positions[i] for i in sorted(acknowledged)]
        assert ordered == sorted(ordered), f"cycle {cycle}: order not kept"
    assert "torn tail" in broker.log()
