"""What the in-process transaction-buffer benchmarks share: a fresh topic (a real
ManagedLedger, fsync off, and its READY buffer) and a command line over checkpoints."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from results_file import finish

from managed_ledger import LocalStore, ManagedLedger, ManagedLedgerConfig
from txnbuffer import TransactionBuffer

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


@contextlib.asynccontextmanager
async def fresh_topic(name: str) -> AsyncIterator[tuple[ManagedLedger, TransactionBuffer]]:
    """A topic in a temporary directory under bench-results/, removed afterwards.
    Fsync is off: these benchmarks measure the buffer, not the disk."""
    RESULTS.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=RESULTS))
    store = LocalStore(root / "metadata")
    try:
        ledger = await ManagedLedger.open(
            f"persistent://public/default/{name}",
            root / "ledger",
            store,
            ManagedLedgerConfig(fsync=False),
        )
        buffer = TransactionBuffer(ledger)
        await buffer.recover()
        yield ledger, buffer
        buffer.close(snapshot=False)
        await ledger.close()
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def checkpoints_main(
    description: str,
    default: str,
    minimum: int,
    run: Callable[[list[int]], Awaitable[list[dict]]],
    report: Callable[[list[dict]], dict],
) -> int:
    """`--checkpoints A,B,...` (two or more, each >= minimum) and `--json PATH`: runs,
    prints the report, and writes it with the total time."""
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--checkpoints", default=default)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",")})
    if checkpoints[0] < minimum or len(checkpoints) < 2:
        parser.error(f"--checkpoints: two or more sizes >= {minimum}")
    result = report(asyncio.run(run(checkpoints)))
    return finish(result, started, args.json)
