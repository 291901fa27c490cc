"""What a large aborted set costs the transaction buffer: 0 -> 1,000,000 aborted transactions.

In process, one topic (a real ManagedLedger, fsync off: this measures the buffer,
not the disk) gets aborted transactions of one data entry each, through the same
path as the broker (append, then `TransactionBuffer.end`, which writes the marker
and snapshots by its default policy). At each checkpoint of the aborted-set size
(0, 10,000, 100,000, 1,000,000 by default) it measures, against the figures at 0:
- abort: CPU microseconds per aborted transaction while the set grew to here
  (data entry + marker + bookkeeping + the snapshots taken);
- RC filter: the READ_COMMITTED view's `should_skip` over 2,000 fresh entries,
  half of (1,000 more) aborted transactions, half plain (ns per entry);
- fetch: `aborted_overlapping` for a 1,000-entry range at the log's end (us);
- deep fetch: the same for 10 entries deep in the fullest ledger (5,000 before its
  end), where the aborts before the range are many and the ones in it few: the
  seek to the range is what this costs (us);
- snapshot: bytes and ms of the last snapshot (it writes what changed);
- memory: deep size of the buffer's structures (bytes per aborted transaction).
Goal: flat, i.e. the cost at 1M within 2x of the cost at 0 for the RC filter and
the abort; memory linear in retained aborts.

    python scripts/bench/bench_aborted_set.py [--checkpoints 0,10000,100000,1000000] [--json PATH]
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time

from bench_txn import deep_size  # scripts/ is on the path of a script
from in_process_buffer import checkpoints_main, fresh_topic

from dispatcher.read_view import CommittedReadView
from managed_ledger import EntryHeader, ManagedLedger, Position, TxnId
from txnbuffer import TransactionBuffer

PAYLOAD = b"x" * 100
BUILD_BATCH = 1000  # transactions appended and aborted concurrently
FILTER_ENTRIES = 2000
REPEATS = 5  # the fastest of these counts: the first pass warms caches
FETCH_RANGE = 1000
LEDGER_TAIL = 5000  # the deep fetch ends this many entries before its ledger's end
GOAL_GROWTH = 2.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


async def grow(ledger: ManagedLedger, buffer: TransactionBuffer, first: int, last: int) -> None:
    """Abort transactions first..last (sequences), each after one data entry."""
    for start in range(first, last + 1, BUILD_BATCH):
        txn_ids = [TxnId(1, s) for s in range(start, min(start + BUILD_BATCH, last + 1))]
        header = EntryHeader(num_messages=1)
        await asyncio.gather(
            *(ledger.append(EntryHeader(num_messages=1, txn_id=t), PAYLOAD) for t in txn_ids)
        )
        await asyncio.gather(
            *(buffer.end(t, commit=False, low_watermark=start - 1) for t in txn_ids)
        )
        await ledger.append(header, PAYLOAD)  # a plain entry between batches


async def filter_sample(ledger: ManagedLedger, buffer: TransactionBuffer, next_seq: int) -> list:
    """FILTER_ENTRIES fresh entries: half of (new) aborted transactions, half plain."""
    count = FILTER_ENTRIES // 2
    txn_ids = [TxnId(2, next_seq + i) for i in range(count)]
    positions = await asyncio.gather(
        *(ledger.append(EntryHeader(num_messages=1, txn_id=t), PAYLOAD) for t in txn_ids),
        *(ledger.append(EntryHeader(num_messages=1), PAYLOAD) for _ in range(count)),
    )
    await asyncio.gather(*(buffer.end(t, commit=False, low_watermark=0) for t in txn_ids))
    first, last = min(positions), max(positions)
    return ledger.read(first, FILTER_ENTRIES, last)


def fetch_time_us(buffer: TransactionBuffer, start: Position, end: Position) -> float:
    """us per `aborted_overlapping(start, end)`: the fastest of REPEATS rounds, so a
    garbage collection over a million live aborts does not land in one fetch's figure."""
    rounds = 200
    timings = []
    for _ in range(REPEATS):
        started = time.perf_counter_ns()
        for _ in range(rounds):
            buffer.aborted_overlapping(start, end)
        timings.append((time.perf_counter_ns() - started) / rounds / 1000)
    return min(timings)


def measure(ledger: ManagedLedger, buffer: TransactionBuffer, entries: list) -> dict:
    view = CommittedReadView(buffer)
    should_skip = view.should_skip
    timings = []
    for _ in range(REPEATS):
        started = time.perf_counter_ns()
        skipped = sum(1 for entry in entries if should_skip(entry))
        timings.append(time.perf_counter_ns() - started)
    filter_ns = min(timings) / len(entries)
    assert skipped == len(entries) // 2, (skipped, len(entries))
    end = ledger.last_confirmed
    start = Position(end.ledger_id, max(end.entry_id - FETCH_RANGE, 0))
    overlapping = buffer.aborted_overlapping(start, end)
    fetch_us = fetch_time_us(buffer, start, end)
    fullest = max(ledger.ledger_infos(), key=lambda info: info.entries)
    # Away from the ledger's end: transactions open across a ledger switch are in the
    # answer of a range there, and would hide what the seek costs.
    deep_end = Position(fullest.ledger_id, max(fullest.entries - 1 - LEDGER_TAIL, 0))
    deep_start = Position(fullest.ledger_id, max(deep_end.entry_id - 10, 0))
    deep_us = fetch_time_us(buffer, deep_start, deep_end)
    return {
        "rc_filter_ns_per_entry": round(filter_ns, 1),
        "fetch_overlapping_us": round(fetch_us, 2),
        "fetch_overlapping_found": len(overlapping),
        "fetch_deep_us": round(deep_us, 2),
    }


async def run(checkpoints: list[int]) -> list[dict]:
    rows = []
    async with fresh_topic("aborted-set") as (ledger, buffer):
        built = 0
        extra = 0  # aborts added by the filter samples
        for target in checkpoints:
            cpu = time.process_time()
            gc.disable()  # a collection pass over a million live objects is not the buffer's cost
            try:
                await grow(ledger, buffer, built + 1, target)
            finally:
                gc.enable()
            abort_us = (
                (time.process_time() - cpu) * 1e6 / (target - built) if target > built else None
            )
            built = target
            aborted = len(buffer.aborted)
            entries = await filter_sample(ledger, buffer, extra + 1)
            extra += FILTER_ENTRIES // 2
            row = {
                "aborted": aborted,
                "abort_cpu_us": round(abort_us, 2) if abort_us is not None else None,
                **measure(ledger, buffer, entries),
                "snapshot_bytes": buffer.last_snapshot_bytes,
                "snapshot_ms": round(buffer.last_snapshot_write_ms, 3),
            }
            size = deep_size([buffer.aborted, buffer.abort_index])
            row["memory_bytes"] = size
            row["memory_bytes_per_abort"] = round(size / max(len(buffer.aborted), 1), 1)
            rows.append(row)
            progress(
                f"aborted {row['aborted']:>9,}: abort {row['abort_cpu_us']} us, RC filter "
                f"{row['rc_filter_ns_per_entry']} ns/entry, fetch {row['fetch_overlapping_us']} us, "
                f"snapshot {row['snapshot_bytes']:,} B {row['snapshot_ms']} ms, "
                f"memory {row['memory_bytes']:,} B"
            )
    return rows


def report(rows: list[dict]) -> dict:
    first, last = rows[0], rows[-1]
    growth = {
        "rc_filter": round(last["rc_filter_ns_per_entry"] / first["rc_filter_ns_per_entry"], 2),
        "fetch_overlapping": round(last["fetch_overlapping_us"] / first["fetch_overlapping_us"], 2),
        "fetch_deep": round(last["fetch_deep_us"] / first["fetch_deep_us"], 2),
    }
    aborts = [row["abort_cpu_us"] for row in rows if row["abort_cpu_us"]]
    if len(aborts) >= 2:
        growth["abort"] = round(aborts[-1] / aborts[0], 2)
    print(
        "\n| aborted txns | abort CPU us | RC filter ns/entry | fetch us | deep fetch us | snapshot B / ms | memory B |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['aborted']:,} | {row['abort_cpu_us'] or '-'} | {row['rc_filter_ns_per_entry']} | "
            f"{row['fetch_overlapping_us']} | {row['fetch_deep_us']} | "
            f"{row['snapshot_bytes']:,} / {row['snapshot_ms']} | {row['memory_bytes']:,} |"
        )
    met = growth["rc_filter"] <= GOAL_GROWTH and growth.get("abort", 1.0) <= GOAL_GROWTH
    print(
        f"\ngrowth first -> last: {growth}; goal <= {GOAL_GROWTH}x: {'met' if met else 'NOT met'}"
    )
    return {"checkpoints": rows, "growth": growth, "goal_growth": GOAL_GROWTH, "goal_met": met}


def main() -> int:
    description = __doc__.split("\n\n")[0]
    return checkpoints_main(description, "0,10000,100000,1000000", 0, run, report)


if __name__ == "__main__":
    sys.exit(main())
