"""What open transactions cost the transaction buffer: 1 -> 10,000 open at once.

In process, one topic (a real ManagedLedger, fsync off: this measures the buffer,
not the disk). At each checkpoint (1, 100, 1,000, 10,000 open by default) the
buffer holds that many ongoing transactions, each with entries in the log, and a
fixed amount of work runs against it, so that only the open count changes:
- commit: the oldest open transaction commits (marker, stable position moved on,
  low watermark raised) and a new one takes its place with its first entry, one
  after another, 2,000 times: CPU microseconds per commit, the snapshots its
  default policy takes included (a snapshot holds every open transaction);
- transactional append: 10,000 entries spread over the open transactions, in
  gathers of 100, as concurrent producers write them (us per entry);
- plain append: 10,000 entries with no transaction, the same way (us per entry);
- memory: deep size of the buffer's per-open-transaction structures.
The open set never changes size during a checkpoint, and every checkpoint does the
same number of commits: what grows is the cost of the open set, not the commit rate.
Each figure is the fastest of 3 runs of a third of that work, as CPU of the whole
operation and as time inside the buffer's handling of the new entries (snapshots
included). Goal: flat, i.e. the buffer's share at the largest open count within
2x of that at the smallest.

    python scripts/bench/bench_open_txns.py [--checkpoints 1,100,1000,10000] [--json PATH]
"""

from __future__ import annotations

import asyncio
import collections
import gc
import sys
import time

from bench_txn import deep_size  # scripts/ is on the path of a script
from in_process_buffer import checkpoints_main, fresh_topic

from managed_ledger import EntryHeader, ManagedLedger, TxnId
from txnbuffer import TransactionBuffer

PAYLOAD = b"x" * 100
COORDINATOR = 1
COMMITS = 2_000
APPENDS = 10_000
GATHER = 100  # appends in flight at once, as from concurrent producers
OPEN_BATCH = 1_000  # transactions opened concurrently while the set grows
REPEATS = 3
GOAL_GROWTH = 2.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


class OpenSet:
    """The open transactions of one coordinator, oldest first, and how they are written."""

    def __init__(self, ledger: ManagedLedger, buffer: TransactionBuffer):
        self.ledger = ledger
        self.buffer = buffer
        self.open: collections.deque[TxnId] = collections.deque()
        self.next_sequence = 1
        # The buffer's own share: wall time inside its handling of each new entry
        # (snapshots included), apart from the ledger's write and the event loop.
        self.apply_ns = 0
        apply = buffer._apply

        def timed_apply(entry) -> None:
            started = time.perf_counter_ns()
            apply(entry)
            self.apply_ns += time.perf_counter_ns() - started

        buffer._apply = timed_apply

    async def append(self, txn_id: TxnId | None) -> None:
        """One entry, admitted as the broker admits it."""
        header = EntryHeader(num_messages=1, txn_id=txn_id)
        if txn_id is None:
            await self.ledger.append(header, PAYLOAD)
            return
        await self.buffer.before_append(txn_id)
        try:
            await self.ledger.append(header, PAYLOAD)
        finally:
            self.buffer.after_append(txn_id)

    async def grow_to(self, count: int) -> None:
        while len(self.open) < count:
            batch = min(OPEN_BATCH, count - len(self.open))
            txn_ids = [TxnId(COORDINATOR, self.next_sequence + i) for i in range(batch)]
            self.next_sequence += batch
            await asyncio.gather(*(self.append(t) for t in txn_ids))
            self.open.extend(txn_ids)
        assert len(self.buffer.ongoing) == count, (len(self.buffer.ongoing), count)

    async def commit_oldest(self) -> None:
        """The oldest commits; a new transaction opens with its first entry."""
        oldest = self.open.popleft()
        # Every transaction below the oldest still open has ended at its coordinator.
        await self.buffer.end(oldest, commit=True, low_watermark=oldest.least_bits - 1)
        opened = TxnId(COORDINATOR, self.next_sequence)
        self.next_sequence += 1
        await self.append(opened)
        self.open.append(opened)

    async def append_spread(self, count: int, transactional: bool) -> None:
        """count entries in gathers of GATHER, spread round-robin over the open set."""
        open_now = list(self.open)
        for start in range(0, count, GATHER):
            if transactional:
                targets = [open_now[(start + i) % len(open_now)] for i in range(GATHER)]
            else:
                targets = [None] * GATHER
            await asyncio.gather(*(self.append(t) for t in targets))


async def cost_per_operation(open_set: OpenSet, operation, count: int) -> tuple[float, float]:
    """CPU us per operation in all, and us of it inside the buffer: the fastest of
    REPEATS runs of count // REPEATS (the machine is shared; slower runs measure
    its neighbours)."""
    runs, in_buffer = [], []
    each = count // REPEATS
    for _ in range(REPEATS):
        open_set.apply_ns = 0
        started = time.process_time()
        await operation(each)
        runs.append((time.process_time() - started) * 1e6 / each)
        in_buffer.append(open_set.apply_ns / 1000 / each)
    return round(min(runs), 2), round(min(in_buffer), 2)


async def measure(open_set: OpenSet) -> dict:
    buffer = open_set.buffer
    snapshots_before = buffer.snapshots_taken

    async def commits(count: int) -> None:
        for _ in range(count):
            await open_set.commit_oldest()

    commit_us, commit_buffer_us = await cost_per_operation(open_set, commits, COMMITS)
    snapshots = buffer.snapshots_taken - snapshots_before
    assert len(buffer.ongoing) == len(open_set.open)
    # The stable position sits just before the oldest open transaction's first entry.
    assert buffer.max_read_position < buffer.ongoing[open_set.open[0]]
    txn_append_us, txn_append_buffer_us = await cost_per_operation(
        open_set, lambda count: open_set.append_spread(count, transactional=True), APPENDS
    )
    plain_append_us, plain_append_buffer_us = await cost_per_operation(
        open_set, lambda count: open_set.append_spread(count, transactional=False), APPENDS
    )
    memory = deep_size([buffer.ongoing, buffer._ongoing_ids, buffer._in_flight])
    return {
        "open": len(buffer.ongoing),
        "commit_cpu_us": commit_us,
        "commit_buffer_us": commit_buffer_us,
        "snapshots_during_commits": snapshots,
        "snapshot_bytes": buffer.last_snapshot_bytes,
        "snapshot_ms": round(buffer.last_snapshot_write_ms, 3),
        "txn_append_cpu_us": txn_append_us,
        "txn_append_buffer_us": txn_append_buffer_us,
        "plain_append_cpu_us": plain_append_us,
        "plain_append_buffer_us": plain_append_buffer_us,
        "memory_bytes": memory,
        "memory_bytes_per_open": round(memory / len(buffer.ongoing), 1),
    }


async def run(checkpoints: list[int]) -> list[dict]:
    rows = []
    async with fresh_topic("open-txns") as (ledger, buffer):
        open_set = OpenSet(ledger, buffer)
        for target in checkpoints:
            await open_set.grow_to(target)
            gc.collect()
            gc.disable()  # a collection pass is the process's cost, not the buffer's
            try:
                row = await measure(open_set)
            finally:
                gc.enable()
            rows.append(row)
            progress(
                f"open {row['open']:>7,}: commit {row['commit_cpu_us']} us "
                f"({row['commit_buffer_us']} in the buffer; {row['snapshots_during_commits']} "
                f"snapshots, last {row['snapshot_bytes']:,} B {row['snapshot_ms']} ms), "
                f"txn append {row['txn_append_cpu_us']} us ({row['txn_append_buffer_us']}), "
                f"plain append {row['plain_append_cpu_us']} us "
                f"({row['plain_append_buffer_us']}), memory {row['memory_bytes']:,} B"
            )
    return rows


# The goal is on the buffer's own share: the whole operation's CPU is mostly the
# ledger's write and the event loop, which the open count does not touch, and it
# varies by more than the buffer's share on a shared machine.
GROWTH_KEYS = ("commit_buffer_us", "txn_append_buffer_us", "plain_append_buffer_us")
INFO_KEYS = ("commit_cpu_us", "txn_append_cpu_us", "plain_append_cpu_us")


def report(rows: list[dict]) -> dict:
    first, last = rows[0], rows[-1]
    growth = {key: round(last[key] / first[key], 2) for key in GROWTH_KEYS + INFO_KEYS}
    print(
        "\n| open txns | commit us (in buffer) | snapshot B / ms | txn append us (in buffer) "
        "| plain append us (in buffer) | memory B/open |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['open']:,} | {row['commit_cpu_us']} ({row['commit_buffer_us']}) "
            f"| {row['snapshot_bytes']:,} / {row['snapshot_ms']} "
            f"| {row['txn_append_cpu_us']} ({row['txn_append_buffer_us']}) "
            f"| {row['plain_append_cpu_us']} ({row['plain_append_buffer_us']}) "
            f"| {row['memory_bytes_per_open']} |"
        )
    met = all(growth[key] <= GOAL_GROWTH for key in GROWTH_KEYS)
    print(
        f"\ngrowth {first['open']:,} -> {last['open']:,} open: {growth}; goal: the buffer's "
        f"share <= {GOAL_GROWTH}x: {'met' if met else 'NOT met'}"
    )
    return {"checkpoints": rows, "growth": growth, "goal_growth": GOAL_GROWTH, "goal_met": met}


def main() -> int:
    description = __doc__.split("\n\n")[0]
    return checkpoints_main(description, "1,100,1000,10000", 1, run, report)


if __name__ == "__main__":
    sys.exit(main())
