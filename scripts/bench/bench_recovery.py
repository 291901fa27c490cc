"""Transaction-buffer recovery: from a snapshot against a full replay of the log, same run.

Builds one topic in process (a real ManagedLedger, fsync off: this measures
recovery, not the disk) of `--entries` entries (default 1,000,000): transactions
of four data entries and a marker, interleaved 500 at a time, every other one
aborted (100,000 aborted transactions). The buffer snapshots by its default
policy while the log is written; the size and write time of those snapshots are
sampled as the aborted set grows (they should stay flat: a snapshot writes what
changed). Then, on the same files:
- with snapshot: reopen the ledger, recover the buffer (loads the snapshot,
  replays only the log after it);
- full replay: the snapshot deleted, the same again.
Both must end in the same state. Goal: READY in < 1 s with the snapshot and
>= 20x faster than the full replay.

    python scripts/bench/bench_recovery.py [--entries N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from managed_ledger import EntryHeader, LocalStore, ManagedLedger, ManagedLedgerConfig, TxnId
from txnbuffer import TransactionBuffer

REPO = Path(__file__).resolve().parents[2]
TOPIC = "persistent://public/default/recovery-bench"
ENTRIES_PER_TXN = 5  # four data entries and the marker
TXNS_IN_FLIGHT = 500
PAYLOAD = b"x" * 100
GOAL_SNAPSHOT_S = 1.0
GOAL_SPEEDUP = 20.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


async def build(directory: Path, store: LocalStore, entries: int) -> dict:
    """Write the topic; returns the snapshot samples and the live state to compare with."""
    ledger = await ManagedLedger.open(TOPIC, directory, store, ManagedLedgerConfig(fsync=False))
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    txns = entries // ENTRIES_PER_TXN
    samples = []
    seen_snapshots = 0
    next_report = 0
    for first in range(1, txns + 1, TXNS_IN_FLIGHT):
        batch = [
            TxnId(1, sequence) for sequence in range(first, min(first + TXNS_IN_FLIGHT, txns + 1))
        ]
        appends = [
            ledger.append(EntryHeader(num_messages=1, txn_id=txn_id), PAYLOAD)
            for _ in range(ENTRIES_PER_TXN - 1)
            for txn_id in batch
        ]
        await asyncio.gather(*appends)
        watermark = batch[0].least_bits - 1  # every earlier transaction has ended
        await asyncio.gather(
            *(buffer.end(t, commit=t.least_bits % 2 == 0, low_watermark=watermark) for t in batch)
        )
        if buffer.snapshots_taken > seen_snapshots:
            seen_snapshots = buffer.snapshots_taken
            samples.append(
                {
                    "aborted": len(buffer.aborted),
                    "bytes": buffer.last_snapshot_bytes,
                    "write_ms": round(buffer.last_snapshot_write_ms, 3),
                }
            )
        if first >= next_report:
            progress(
                f"build: {first * ENTRIES_PER_TXN:>9,} entries, {len(buffer.aborted):,} aborted"
            )
            next_report += txns // 10
    live = state(buffer)
    buffer.close()  # the clean-close snapshot
    await ledger.close()
    return {"samples": samples, "live": live, "ledgers": len(ledger.ledger_ids())}


def state(buffer: TransactionBuffer) -> dict:
    return {
        "max_read_position": str(buffer.max_read_position),
        "ongoing": len(buffer.ongoing),
        "aborted": len(buffer.aborted),
        "abort_index": len(buffer.abort_index),
    }


async def recover(directory: Path, store: LocalStore) -> dict:
    # A restarted broker starts on a clean heap: collect what building left behind,
    # or the first recovery timed pays for that garbage.
    gc.collect()
    started = time.perf_counter()
    ledger = await ManagedLedger.open(TOPIC, directory, store, ManagedLedgerConfig(fsync=False))
    opened = time.perf_counter()
    buffer = TransactionBuffer(ledger)
    await buffer.recover()
    ready = time.perf_counter()
    result = {
        "ledger_open_s": round(opened - started, 3),
        "buffer_recovery_s": round(ready - opened, 3),
        "to_ready_s": round(ready - started, 3),
        "replayed_entries": buffer.replayed_entries,
        "from_snapshot": buffer.recovered_from_snapshot,
        "state": state(buffer),
    }
    buffer.close(snapshot=False)
    await ledger.close()
    return result


async def run(entries: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=REPO / "bench-results"))
    store = LocalStore(root / "metadata")
    try:
        progress(f"build: {entries:,} entries, {entries // ENTRIES_PER_TXN // 2:,} aborted txns")
        built = await build(root / "topic", store, entries)
        progress("recovery with the snapshot")
        with_snapshot = await recover(root / "topic", store)
        progress(f"  READY in {with_snapshot['to_ready_s']} s")
        ledger = await ManagedLedger.open(TOPIC, root / "topic", store)
        TransactionBuffer(ledger).delete_snapshots()
        await ledger.close()
        progress("full replay (snapshot deleted)")
        full = await recover(root / "topic", store)
        progress(f"  READY in {full['to_ready_s']} s")
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    assert with_snapshot["from_snapshot"] and not full["from_snapshot"]
    assert with_snapshot["state"] == full["state"] == built["live"], (with_snapshot, full, built)
    return {"entries": entries, "built": built, "with_snapshot": with_snapshot, "full_replay": full}


def report(result: dict) -> bool:
    snap, full = result["with_snapshot"], result["full_replay"]
    speedup = full["to_ready_s"] / max(snap["to_ready_s"], 1e-9)
    live = result["built"]["live"]
    print(
        f"\n{result['entries']:,} entries in {result['built']['ledgers']} ledgers, "
        f"{live['aborted']:,} aborted transactions\n"
    )
    print("| recovery | to READY s | ledger open s | buffer s | entries replayed |")
    print("|---|---:|---:|---:|---:|")
    for name, row in (("with snapshot", snap), ("full replay", full)):
        print(
            f"| {name} | {row['to_ready_s']} | {row['ledger_open_s']} | "
            f"{row['buffer_recovery_s']} | {row['replayed_entries']:,} |"
        )
    samples = result["built"]["samples"]
    picks = [samples[int(i * (len(samples) - 1) / 4)] for i in range(5)] if samples else []
    print("\n| snapshot taken with aborted set of | bytes written | write ms |")
    print("|---:|---:|---:|")
    for sample in picks:
        print(f"| {sample['aborted']:,} | {sample['bytes']:,} | {sample['write_ms']} |")
    met = snap["to_ready_s"] < GOAL_SNAPSHOT_S and speedup >= GOAL_SPEEDUP
    print(
        f"\nspeed-up {speedup:.1f}x; goal: < {GOAL_SNAPSHOT_S:g} s with snapshot and "
        f">= {GOAL_SPEEDUP:g}x: {'met' if met else 'NOT met'}"
    )
    result["speedup"] = round(speedup, 1)
    result["goal_met"] = met
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    if args.entries < ENTRIES_PER_TXN * TXNS_IN_FLIGHT:
        parser.error(f"--entries must be >= {ENTRIES_PER_TXN * TXNS_IN_FLIGHT}")
    (REPO / "bench-results").mkdir(exist_ok=True)
    result = asyncio.run(run(args.entries))
    report(result)
    print(f"total {time.perf_counter() - _STARTED:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
