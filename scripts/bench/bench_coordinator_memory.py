"""What the transaction coordinator holds in memory per open and per ended transaction,
and whether it stays flat once ended ones are forgotten.

In process: one TransactionCoordinator over a real LocalStore (LMDB) with a
participant that ends nothing (this measures the coordinator, not the topics) and
fsync off (not the disk either). Each transaction writes one topic and one
transactional ack, as a consume-transform-produce step does.
- per open: Python memory (tracemalloc) held for `--open` open transactions;
- per ended: held for `--max-ended` ended ones, all still remembered;
- flat: held after `--rounds` x `--max-ended` more have ended at the bound
  `max_ended_transactions` = `--max-ended`, each end forgetting the oldest. Goal:
  within 1.25x of the memory at the bound (the baseline of the same run);
- CPU per transaction (open, topic, ack, commit) below the bound and at it, where
  every end also forgets one and deletes its records (without tracemalloc).

    python scripts/bench/bench_coordinator_memory.py [--open N] [--max-ended N] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from results_file import finish  # scripts/ is on the path of a script

from managed_ledger import LocalStore, TxnId
from txnbuffer import TransactionCoordinator, TransactionLimits, TxnAck

GATHER = 500  # ends under way at once, as from concurrent clients
TIMEOUT_MS = 3_600_000
# The table of remembered transactions churns: a dict resized as it does may hold
# room for some more than it keeps, but never for all that passed through.
GOAL_FLAT = 1.25
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


class IdleParticipant:
    """Ends nothing: the topics' and subscriptions' side is not measured here."""

    async def end_on_topic(self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int):
        return None

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        return None


def open_one(coordinator: TransactionCoordinator, index: int) -> TxnId:
    txn_id = coordinator.new_transaction(TIMEOUT_MS, owner=f"client-{index % 64}")
    coordinator.add_topic(txn_id, f"persistent://public/default/out-{index % 16}")
    coordinator.add_ack(
        txn_id, f"persistent://public/default/in-{index % 16}", "job", [(3, index, -1)]
    )
    return txn_id


async def run_transactions(coordinator: TransactionCoordinator, count: int) -> None:
    """count transactions opened, written and committed, GATHER at a time."""
    for start in range(0, count, GATHER):
        batch = [open_one(coordinator, start + i) for i in range(min(GATHER, count - start))]
        await asyncio.gather(*(coordinator.end(t, commit=True) for t in batch))


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def fresh_coordinator(directory: Path, args: argparse.Namespace):
    store = LocalStore(directory)
    store.sync = lambda: None  # the coordinator's cost, not the disk's
    limits = TransactionLimits(max_open=args.open + GATHER, max_ended=args.max_ended)
    coordinator = TransactionCoordinator(1, store, IdleParticipant(), limits)
    await coordinator.recover()
    return store, coordinator


async def measure_memory(args: argparse.Namespace, directory: Path) -> dict:
    store, coordinator = await fresh_coordinator(directory, args)
    tracemalloc.start()
    try:
        base = held()
        await run_transactions(coordinator, args.max_ended)
        at_bound = held() - base
        per_ended = at_bound / args.max_ended
        progress(f"{args.max_ended:,} ended, all remembered: {per_ended:,.0f} B each")
        opened = [open_one(coordinator, i) for i in range(args.open)]
        per_open = (held() - base - at_bound) / args.open
        progress(f"{args.open:,} open besides: {per_open:,.0f} B each")
        for start in range(0, len(opened), GATHER):
            await asyncio.gather(
                *(coordinator.end(t, commit=True) for t in opened[start : start + GATHER])
            )
        del opened
        for round_ in range(args.rounds):
            await run_transactions(coordinator, args.max_ended)
            progress(f"round {round_ + 1}/{args.rounds}: {held() - base:,} B")
        after = held() - base
        stats = coordinator.stats()
        ended_total = args.max_ended * (args.rounds + 1) + args.open
        assert stats["committedCount"] == ended_total, stats
        assert (stats["endedTxns"], stats["openTxns"]) == (args.max_ended, 0), stats
        records = sum(1 for _ in store.scan_prefix(b"coordinator", "txn:"))
    finally:
        tracemalloc.stop()
        await coordinator.close()
        store.close()
    return {
        "open": args.open,
        "max_ended": args.max_ended,
        "ended_total": ended_total,
        "bytes_per_open": round(per_open),
        "bytes_per_ended": round(per_ended),
        "bytes_at_bound": at_bound,
        "bytes_after_rounds": after,
        "growth_after_rounds": round(after / at_bound, 3),
        # Forgotten records wait for a batch of deletions, at most DELETE_BATCH.
        "records_in_log": records,
    }


async def measure_cpu(args: argparse.Namespace, directory: Path) -> dict:
    """CPU per transaction below the bound, then at it (each end forgets one)."""
    store, coordinator = await fresh_coordinator(directory, args)
    try:
        started = time.process_time()
        await run_transactions(coordinator, args.max_ended)
        below_us = (time.process_time() - started) * 1e6 / args.max_ended
        started = time.process_time()
        await run_transactions(coordinator, args.max_ended)
        at_bound_us = (time.process_time() - started) * 1e6 / args.max_ended
    finally:
        await coordinator.close()
        store.close()
    progress(f"CPU per transaction: {below_us:.1f} us below the bound, {at_bound_us:.1f} at it")
    return {
        "cpu_us_per_txn_below_bound": round(below_us, 1),
        "cpu_us_per_txn_at_bound": round(at_bound_us, 1),
    }


async def measure(args: argparse.Namespace, directory: Path) -> dict:
    result = await measure_memory(args, directory / "memory")
    result.update(await measure_cpu(args, directory / "cpu"))
    result["goal_growth"] = GOAL_FLAT
    result["goal_met"] = result["growth_after_rounds"] <= GOAL_FLAT
    return result


def main() -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--open", type=int, default=10_000)
    parser.add_argument("--max-ended", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    if min(args.open, args.max_ended, args.rounds) < 1:
        parser.error("--open, --max-ended and --rounds must be >= 1")
    directory = Path(tempfile.mkdtemp(prefix="bench-coordinator-"))
    try:
        result = asyncio.run(measure(args, directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(
        f"\nper open transaction: {result['bytes_per_open']:,} B; per ended (remembered): "
        f"{result['bytes_per_ended']:,} B; after {result['ended_total']:,} ended at "
        f"max_ended {result['max_ended']:,}: {result['bytes_after_rounds']:,} B, "
        f"{result['growth_after_rounds']}x the memory at the bound (goal <= {GOAL_FLAT}x: "
        f"{'met' if result['goal_met'] else 'NOT met'}); {result['records_in_log']:,} records "
        f"in the log; CPU per transaction {result['cpu_us_per_txn_below_bound']} us below the "
        f"bound, {result['cpu_us_per_txn_at_bound']} us at it"
    )
    return finish(result, started, args.json)


if __name__ == "__main__":
    sys.exit(main())
