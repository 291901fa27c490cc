"""The kill/restart/check loop of the kill-cycle tools (chaos.py, txn_kill_cycles.py).

A tool brings its load and its checks as one coroutine per cycle; this module owns
the rest, written once: the command line (--cycles, --seed, --json), a broker on a
data dir under bench-results/ (snapshots every 50 changes, so recoveries mix
snapshot and tail replay) that is kept, logs and all, when a cycle finds a
violation, the SIGKILL with each topic's maxReadPosition read just before it, the
restart, the check that no maxReadPosition went back, a table row per cycle, the
JSON rows, and the exit status (1 on any violation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from managed_ledger import Position
from stableline.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_EVERY_CHANGES = 50


# ---------------------------------------------------------------- the broker's view


def buffer_stats(broker: BrokerProcess, topic: str) -> dict:
    """The topic's transactionBufferStats document (short topic name, public/default)."""
    return broker.admin(f"/admin/v3/transactions/transactionBufferStats/public/default/{topic}")


def settled(broker: BrokerProcess, topics: Sequence[str]) -> bool:
    """Every topic's buffer READY with nothing open: each transaction of a kill has ended."""
    try:
        stats = [buffer_stats(broker, topic) for topic in topics]
    except OSError:
        return False
    return all(s["state"] == "Ready" and s["ongoingTxnSize"] == 0 for s in stats)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)


# ---------------------------------------------------------------- the loop


def parse_args(doc: str, configure: Callable[[argparse.ArgumentParser], None] | None = None):
    """--cycles, --seed and --json, plus what `configure` adds."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the rows to this file")
    if configure is not None:
        configure(parser)
    args = parser.parse_args()
    if args.cycles < 1:
        parser.error("--cycles must be >= 1")
    return args


@dataclass
class KillCycles:
    """One run: the broker, its topics, and the table's columns."""

    broker: BrokerProcess
    topics: tuple[str, ...]
    columns: tuple[str, ...]

    def kill(self) -> dict[str, str]:
        """SIGKILL the broker; returns each topic's maxReadPosition just before."""
        before = {
            topic: buffer_stats(self.broker, topic)["maxReadPosition"] for topic in self.topics
        }
        self.broker.kill()
        return before

    def restart(self) -> float:
        """Start the broker again on the same data dir and ports; returns when (monotonic)."""
        started = time.monotonic()
        self.broker.start()
        return started

    def wait_settled(self, timeout_s: float) -> None:
        wait_until(lambda: settled(self.broker, self.topics), timeout_s, "settled buffers")

    def positions_gone_back(self, before_kill: dict[str, str]) -> list[str]:
        """A violation for each topic whose maxReadPosition is behind where it was."""
        violations = []
        for topic, position in before_kill.items():
            now = buffer_stats(self.broker, topic)["maxReadPosition"]
            if Position.parse(now) < Position.parse(position):
                violations.append(f"{topic}: maxReadPosition back from {position} to {now}")
        return violations

    async def cycles(self, count: int, cycle: Callable[[int], Awaitable[dict]]) -> list[dict]:
        """Run `cycle(number)` `count` times, a table row as each ends (its columns and
        its "violations")."""
        print("| " + " | ".join(self.columns) + " | violations |")
        print("|" + "---|" * (len(self.columns) + 1), flush=True)
        rows = []
        for number in range(count):
            row = await cycle(number)
            rows.append(row)
            cells = [str(row[column]) for column in self.columns]
            print(f"| {' | '.join(cells)} | {'; '.join(row['violations']) or 0} |", flush=True)
        return rows


def run(
    name: str,
    args: argparse.Namespace,
    topics: tuple[str, ...],
    columns: tuple[str, ...],
    drive: Callable[[KillCycles], Awaitable[list[dict]]],
) -> int:
    """Start a broker, `drive` it (which runs `cycles`), stop it, report; the exit status."""
    (REPO / "bench-results").mkdir(exist_ok=True)  # git-ignored; absent in a fresh clone
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=REPO / "bench-results"))
    broker = BrokerProcess(
        directory / "data",
        env={
            "STABLELINE_TXN_SNAPSHOT_EVERY_CHANGES": str(SNAPSHOT_EVERY_CHANGES),
            "STABLELINE_TXN_SNAPSHOT_INTERVAL_S": "1",
        },
    )
    print(f"{name}: {args.cycles} cycles, seed {args.seed}, data in {directory}", flush=True)
    try:
        broker.start()
        rows = asyncio.run(drive(KillCycles(broker, topics, columns)))
    finally:
        broker.stop()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    failed = sum(bool(row["violations"]) for row in rows)
    print(f"{len(rows)} cycles, {failed} with violations")
    if failed:
        print(f"data and broker logs kept in {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return 1 if failed else 0
