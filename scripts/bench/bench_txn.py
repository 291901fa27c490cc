"""Transactions benchmark: what the transaction buffer costs, measured in one run.

1. throughput: 100-byte messages from a batched aio producer, drained by a
   READ_COMMITTED consumer, with a transaction committed every 100 ms vs the same
   load without transactions (goal: ratio >= 0.98).
2. RC vs RU: a topic pre-filled in transactions of 100 messages, 10% aborted,
   drained from Earliest by a READ_COMMITTED and then a READ_UNCOMMITTED
   subscription (batch_receive + acknowledge lists). The goal (>= 0.95) is on
   the rate each drains the same log (log messages per second: how fast a
   subscription keeps up with the topic). RC delivers 10% fewer messages, so its
   delivered msgs/s is at most 0.9 x that ratio; it is reported beside it.
   The consumers' receiver queue (20,000) is deep enough that a drain is bound
   by CPU, not by the permit round trip: at 5,000 both levels wait on permits and
   RC, which reads 10% more entries per delivered message, falls below the goal.
3. latency: send 1 message in a transaction, wait for its receipt, t0, commit;
   when does the READ_COMMITTED consumer get it? (goal: p99 < 5 ms), and the
   commit RPC itself.
4. memory: in-process ManagedLedger + TransactionBuffer (fsync off), 1,000 open
   transactions interleaved over 1,000,000 entries; the deep size of the buffer's
   structures after 10, 100 and 1,000 messages per transaction (goal: < 1 MB, flat).

Usage: python scripts/bench/bench_txn.py [--quick] [--json PATH] [--only 1,2,3,4]
Scenarios 1-3 start their own broker (a temp data dir, default config: fsync on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import statistics
import sys
import tempfile
import time
import types
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from managed_ledger import (
    EntryHeader,
    LocalStore,
    ManagedLedger,
    ManagedLedgerConfig,
    TxnId,
)
from stableline.aio import Client, InitialPosition, IsolationLevel
from stableline.perf.consumer import AckWindow
from stableline.testing import BrokerProcess, temporary_broker
from txnbuffer import TransactionBuffer

REPO = Path(__file__).resolve().parents[2]

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
PAYLOAD = b"x" * 100


@dataclass(frozen=True)
class Sizes:
    # 1. throughput
    tput_messages: int = 3_000_000
    tput_rounds: int = 2
    txn_interval_s: float = 0.1
    # 2. RC vs RU
    prefill_messages: int = 500_000
    msgs_per_txn: int = 100
    abort_every: int = 10  # every 10th transaction aborts: 10%
    prefill_concurrency: int = 32
    # 3. latency
    latency_iterations: int = 500
    latency_warmup: int = 30
    # 4. memory
    mem_txns: int = 1000
    mem_msgs_per_txn: tuple[int, ...] = (10, 100, 1000)


# Scenario 1 holds producers back past this lag (10 MB of 100-byte messages, far
# inside the broker's 64 MB entry cache; a 100 ms transaction is ~30,000).
MAX_CONSUMER_LAG_MESSAGES = 100_000

QUICK = Sizes(
    tput_messages=50_000,
    tput_rounds=1,
    prefill_messages=50_000,
    latency_iterations=100,
    latency_warmup=10,
    mem_msgs_per_txn=(10, 100),
)


# ---------------------------------------------------------------- helpers

_STARTED = time.perf_counter()


def progress(message: str) -> None:
    """A progress line on stderr (stdout keeps the table), stamped with the elapsed time."""
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def running_broker() -> contextlib.AbstractContextManager[BrokerProcess]:
    """A fresh broker process (temporary data dir, default config: fsync on)."""
    return temporary_broker(REPO / "bench-results", "bench-txn-")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in [0, 1])."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """Columns as wide as their widest cell; numbers right-aligned."""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        raw = rows[index - 1] if index else headers
        parts = [
            cell.rjust(width) if isinstance(value, int | float) else cell.ljust(width)
            for cell, width, value in zip(row, widths, raw, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


class Progress:
    """Messages drained so far; producers wait on it to bound the consumer's lag."""

    def __init__(self) -> None:
        self.received = 0
        self.moved = asyncio.Event()

    def add(self, count: int) -> None:
        self.received += count
        self.moved.set()

    async def wait_for_lag_below(self, sent: int, max_lag: int) -> None:
        while sent - self.received > max_lag:
            self.moved.clear()
            await self.moved.wait()


async def drain(consumer, expected: int, progress: Progress | None = None) -> tuple[float, int]:
    """batch_receive + acknowledge(list) until `expected` messages; (seconds, bytes).

    Acknowledgements stay in flight while the next lists are received, as the perf
    consumer keeps them (waiting for each would time its round trip); the time
    includes the last ack, so the subscription has moved past everything drained.
    """
    received = 0
    size = 0
    acks = AckWindow()
    started = time.perf_counter()
    while received < expected:
        messages = await consumer.batch_receive(max_num_messages=1000, timeout_millis=100)
        if not messages:
            continue
        received += len(messages)
        size += sum(map(len, messages.values()))
        await acks.add(consumer.acknowledge(messages))
        if progress is not None:
            progress.add(len(messages))
    await acks.drain()
    elapsed = time.perf_counter() - started
    assert received == expected, (received, expected)
    return elapsed, size


# ---------------------------------------------------------------- 1. throughput


async def _produce(
    client, producer, total: int, txn_interval_s: float | None, progress: Progress
) -> int:
    """Send `total` messages as fast as the window allows; commit every interval.

    Returns the number of transactions committed. The next transaction is opened
    ahead of time and commits run in the background, so production never waits
    for a commit.
    """
    window: deque[asyncio.Future] = deque()
    commits: list[asyncio.Task] = []
    txn = await client.new_transaction(timeout_ms=60_000) if txn_interval_s else None
    upcoming = asyncio.create_task(client.new_transaction(timeout_ms=60_000)) if txn else None
    txn_started = time.perf_counter()
    sent = 0
    txn_first = 0  # the first message of the open transaction
    while sent < total:
        count = min(1000, total - sent)
        future = None
        for _ in range(count):
            future = producer.send_nowait(PAYLOAD, txn=txn)
        sent += count
        window.append(future)
        if len(window) > 50:  # at most ~50k messages unacknowledged
            await window.popleft()
        else:
            await asyncio.sleep(0)
        # A transaction ends after its interval, or sooner once it holds half the lag
        # allowed below: a READ_COMMITTED consumer sees none of it until the commit,
        # so on a fast machine waiting for the interval would wait on the lag forever.
        if txn is not None and (
            time.perf_counter() - txn_started >= txn_interval_s
            or sent - txn_first >= MAX_CONSUMER_LAG_MESSAGES // 2
        ):
            commits.append(asyncio.create_task(txn.commit()))
            txn = await upcoming
            upcoming = asyncio.create_task(client.new_transaction(timeout_ms=60_000))
            txn_started = time.perf_counter()
            txn_first = sent
        # Consumers keep up with producers, as they must in a steady state: the
        # consumer shares this process, and left alone it would fall behind until
        # it reads from disk instead of the entry cache, in both modes unequally.
        await progress.wait_for_lag_below(sent, MAX_CONSUMER_LAG_MESSAGES)
    if txn is not None:
        commits.append(asyncio.create_task(txn.commit()))
        unused = await upcoming  # opened ahead and never written to
        await unused.abort()
    await producer.flush()
    await asyncio.gather(*commits)
    return len(commits)


class Clock:
    """Wall time plus the CPU time of the broker process and of this (client) process."""

    def __init__(self, broker: BrokerProcess):
        self.broker = broker
        self.wall = time.perf_counter()
        self.broker_cpu = broker.cpu_seconds()
        self.client_cpu = time.process_time()

    def read(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self.wall,
            "broker_cpu_s": self.broker.cpu_seconds() - self.broker_cpu,
            "client_cpu_s": time.process_time() - self.client_cpu,
        }


def _per_message(total: dict[str, float], messages: int) -> dict[str, float]:
    return {
        "msgs_per_s": round(messages / total["seconds"]),
        "broker_cpu_us_per_msg": round(total["broker_cpu_s"] / messages * 1e6, 2),
        "client_cpu_us_per_msg": round(total["client_cpu_s"] / messages * 1e6, 2),
    }


def _sum(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: sum(run[key] for run in runs) for key in runs[0]}


async def _throughput_round(
    broker: BrokerProcess, client, topic: str, total: int, txn_interval_s: float | None
) -> dict:
    consumer = await client.subscribe(
        topic,
        "drain",
        initial_position=InitialPosition.Earliest,
        isolation_level=RC,
        receiver_queue_size=5000,
    )
    producer = await client.create_producer(
        topic, batching_max_messages=1000, batching_max_publish_delay_ms=1
    )
    clock = Clock(broker)
    progress = Progress()
    draining = asyncio.create_task(drain(consumer, total, progress))
    txns = await _produce(client, producer, total, txn_interval_s, progress)
    await draining
    result = clock.read()
    await producer.close()
    await consumer.close()
    return {**result, "txns": txns}


async def bench_throughput(sizes: Sizes) -> dict:
    progress("1. throughput: starting a broker")
    runs: dict[str, list[dict]] = {"plain": [], "txn": []}
    intervals = {"plain": None, "txn": sizes.txn_interval_s}
    # ABBA order, so a drift in machine load falls on both modes alike.
    order = [["plain", "txn"], ["txn", "plain"]] * sizes.tput_rounds
    order = [mode for pair in order[: sizes.tput_rounds] for mode in pair]
    with running_broker() as broker:
        async with Client(broker.target) as client:
            for mode, interval in intervals.items():  # warm-up: topic creation, channels
                await _throughput_round(broker, client, f"warmup-{mode}", 20_000, interval)
            for index, mode in enumerate(order):
                run = await _throughput_round(
                    broker, client, f"tput-{index}", sizes.tput_messages, intervals[mode]
                )
                runs[mode].append(run)
                progress(
                    f"1. run {index + 1}/{len(order)} {mode:5}: "
                    f"{sizes.tput_messages / run['seconds']:,.0f} msgs/s end to end "
                    f"({run['txns']} txns)"
                )
    summary: dict = {"messages_per_run": sizes.tput_messages}
    for mode, mode_runs in runs.items():
        messages = sizes.tput_messages * len(mode_runs)
        summary[mode] = {
            "messages": messages,
            "txns": sum(run["txns"] for run in mode_runs),
            "runs_msgs_per_s": [round(sizes.tput_messages / run["seconds"]) for run in mode_runs],
            **_per_message(_sum(mode_runs), messages),
        }
    summary["ratio"] = round(summary["txn"]["msgs_per_s"] / summary["plain"]["msgs_per_s"], 3)
    summary["goal"] = "ratio >= 0.98"
    return summary


# ---------------------------------------------------------------- 2. RC vs RU


async def _prefill(client, topic: str, sizes: Sizes) -> tuple[int, int]:
    """Transactions of msgs_per_txn messages, every abort_every-th aborted; (committed, aborted)."""
    producer = await client.create_producer(
        topic, batching_max_messages=sizes.msgs_per_txn, batching_max_publish_delay_ms=1
    )
    txns = sizes.prefill_messages // sizes.msgs_per_txn
    next_txn = iter(range(txns))
    counts = {"committed": 0, "aborted": 0}

    async def worker() -> None:
        for index in next_txn:
            txn = await client.new_transaction(timeout_ms=60_000)
            for _ in range(sizes.msgs_per_txn):
                producer.send_nowait(PAYLOAD, txn=txn)
            if index % sizes.abort_every == sizes.abort_every - 1:
                await txn.abort()
                counts["aborted"] += 1
            else:
                await txn.commit()
                counts["committed"] += 1
            if (index + 1) % (txns // 5) == 0:
                progress(f"2. prefill: {index + 1}/{txns} transactions")

    await asyncio.gather(*(worker() for _ in range(sizes.prefill_concurrency)))
    await producer.close()
    return counts["committed"], counts["aborted"]


RC_NAME, RU_NAME = RC.name, RU.name


async def bench_rc_vs_ru(sizes: Sizes) -> dict:
    progress("2. RC vs RU: starting a broker")
    topic = "rc-vs-ru"
    with running_broker() as broker:
        async with Client(broker.target) as client:
            started = time.perf_counter()
            committed, aborted = await _prefill(client, topic, sizes)
            prefill_s = time.perf_counter() - started
            progress(
                f"2. prefill: {committed} committed + {aborted} aborted transactions "
                f"in {prefill_s:.1f} s ({(committed + aborted) / prefill_s:,.0f} txns/s)"
            )
            last = await client.get_last_message_id(topic)
            assert last.ledger_id == 0, "the pre-filled log should fit in one ledger"
            entries = last.entry_id + 1  # data entries and markers
            log_messages = (committed + aborted) * sizes.msgs_per_txn
            levels = {
                "READ_COMMITTED": (RC, committed * sizes.msgs_per_txn),
                "READ_UNCOMMITTED": (RU, log_messages),
            }
            runs: dict[str, list[dict]] = {name: [] for name in levels}
            # Each drain is a new subscription from Earliest: one warm-up (the first
            # drain of a broker is slower), then ABBA BAAB so drift falls on both
            # alike; a drain takes well under a second, and single ones vary from
            # run to run.
            order = [RU_NAME, RC_NAME, RC_NAME, RU_NAME, RC_NAME, RU_NAME, RU_NAME, RC_NAME]
            for index, name in enumerate([RU_NAME, *order]):
                warm_up = index == 0
                level, expected = levels[name]
                consumer = await client.subscribe(
                    topic,
                    f"drain-{index}",
                    initial_position=InitialPosition.Earliest,
                    isolation_level=level,
                    receiver_queue_size=20000,
                )
                clock = Clock(broker)
                await drain(consumer, expected)
                run = clock.read()
                await consumer.close()
                if not warm_up:
                    runs[name].append(run)
                label = "warm-up" if warm_up else f"{index}/{len(order)} {name}"
                progress(
                    f"2. drain {label}: {expected:,} messages in "
                    f"{run['seconds']:.2f} s ({expected / run['seconds']:,.0f} delivered msgs/s)"
                )
    result: dict = {
        "transactions": {"committed": committed, "aborted": aborted},
        "prefill_seconds": round(prefill_s, 2),
        "log": {
            "messages": log_messages,
            "entries_incl_markers": entries,
            "payload_bytes": log_messages * len(PAYLOAD),
        },
    }
    for name, (_level, expected) in levels.items():
        total = _sum(runs[name])
        drains = len(runs[name])
        seconds = total["seconds"]
        result[name] = {
            "delivered_messages": expected,
            "drains": drains,
            "seconds": round(seconds, 3),
            "delivered_msgs_per_s": round(expected * drains / seconds),
            "log_msgs_scanned_per_s": round(log_messages * drains / seconds),
            "log_entries_scanned_per_s": round(entries * drains / seconds),
            "log_bytes_scanned_per_s": round(log_messages * len(PAYLOAD) * drains / seconds),
            "broker_cpu_us_per_delivered_msg": round(
                total["broker_cpu_s"] / (expected * drains) * 1e6, 2
            ),
            "client_cpu_us_per_delivered_msg": round(
                total["client_cpu_s"] / (expected * drains) * 1e6, 2
            ),
        }
    rc, ru = result["READ_COMMITTED"], result["READ_UNCOMMITTED"]
    result["ratio_delivered"] = round(rc["delivered_msgs_per_s"] / ru["delivered_msgs_per_s"], 3)
    result["ratio_scanned"] = round(rc["log_msgs_scanned_per_s"] / ru["log_msgs_scanned_per_s"], 3)
    result["goal"] = "log drained per second RC/RU >= 0.95"
    return result


# ---------------------------------------------------------------- 3. latency


async def bench_latency(sizes: Sizes, transactional: bool = True) -> dict:
    """Commit -> visible to READ_COMMITTED; or, not transactional (the baseline), a
    plain send -> visible, the send timed from before it is written."""
    progress("3. latency: starting a broker")
    topic = "commit-latency"
    total = sizes.latency_warmup + sizes.latency_iterations
    visible: list[float] = []
    commit_rpc: list[float] = []
    with running_broker() as broker:
        async with Client(broker.target) as client:
            consumer = await client.subscribe(
                topic, "latency", initial_position=InitialPosition.Latest, isolation_level=RC
            )
            producer = await client.create_producer(topic, batching_max_publish_delay_ms=0)
            arrivals: dict[int, float] = {}
            arrived = asyncio.Event()

            async def receive() -> None:
                while len(arrivals) < total:
                    message = await consumer.receive()
                    arrivals[int(message.data())] = time.perf_counter()
                    arrived.set()

            receiver = asyncio.create_task(receive())
            for index in range(total):
                if transactional:
                    txn = await client.new_transaction(timeout_ms=60_000)
                    await producer.send(str(index).encode(), txn=txn)
                    t0 = time.perf_counter()
                    await txn.commit()
                else:
                    t0 = time.perf_counter()
                    await producer.send(str(index).encode())
                committed = time.perf_counter()
                while index not in arrivals:
                    arrived.clear()
                    await asyncio.wait_for(arrived.wait(), 10)
                if index >= sizes.latency_warmup:
                    visible.append((arrivals[index] - t0) * 1000)
                    commit_rpc.append((committed - t0) * 1000)
                if (index + 1) % max(total // 4, 1) == 0:
                    progress(f"3. {index + 1}/{total} commits")
            await receiver
            await producer.close()
            await consumer.close()

    def summary(values: list[float]) -> dict:
        return {
            "p50_ms": round(percentile(values, 0.50), 3),
            "p99_ms": round(percentile(values, 0.99), 3),
            "max_ms": round(max(values), 3),
            "mean_ms": round(statistics.fmean(values), 3),
        }

    return {
        "iterations": sizes.latency_iterations,
        "transactional": transactional,
        "commit_to_visible": summary(visible),
        "commit_rpc": summary(commit_rpc),
        "goal": "commit_to_visible p99 < 5 ms",
    }


# ---------------------------------------------------------------- 4. memory

_NOT_OWNED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def deep_size(root: object) -> int:
    """sys.getsizeof over everything reachable from root (each object once)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _NOT_OWNED):
            continue
        assert not isinstance(obj, ManagedLedger | asyncio.AbstractEventLoop), type(obj)
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def buffer_sizes(buffer: TransactionBuffer) -> dict[str, int]:
    """Deep sizes of the buffer's per-transaction structures (all that can grow)."""
    parts = {
        "ongoing": buffer.ongoing,
        "aborted": buffer.aborted,
        "committed": buffer.committed,
        "abort_index": buffer.abort_index,
        "low_watermarks": buffer.low_watermarks,
        "late_positions": buffer.late_positions,
        "in_flight": buffer._in_flight,
        "ending": buffer._ending,
    }
    sizes = {name: deep_size(value) for name, value in parts.items()}
    sizes["total"] = deep_size(list(parts.values()))
    return sizes


async def bench_memory(sizes: Sizes) -> dict:
    """1,000 open transactions, their entries interleaved round-robin in the log."""
    checkpoints = sorted(sizes.mem_msgs_per_txn)
    txn_ids = [TxnId(0, sequence) for sequence in range(1, sizes.mem_txns + 1)]
    result: dict = {"txns": sizes.mem_txns, "per_checkpoint": []}
    with tempfile.TemporaryDirectory(prefix="stableline-bench-mem-") as tmp:
        store = LocalStore(Path(tmp) / "metadata")
        ledger = await ManagedLedger.open(
            "persistent://public/default/mem",
            Path(tmp) / "ledger",
            store,
            ManagedLedgerConfig(fsync=False),
        )
        buffer = TransactionBuffer(ledger)
        await buffer.recover()
        baseline = buffer_sizes(buffer)["total"]

        headers = [EntryHeader(num_messages=1, txn_id=txn_id) for txn_id in txn_ids]
        started = time.perf_counter()
        done_per_txn = 0
        gc.disable()  # a million live cache entries make every gen-2 pass slow
        try:
            for target in checkpoints:
                while done_per_txn < target:
                    # One entry of every transaction per round: the log interleaves them.
                    # Straight into the ledger (Topic.publish's before/after_append only
                    # count in-flight appends); the buffer sees every entry through the
                    # ledger's entry listener, as in the broker.
                    await asyncio.gather(*(ledger.append(h, PAYLOAD) for h in headers))
                    done_per_txn += 1
                entries = done_per_txn * sizes.mem_txns
                assert len(buffer.ongoing) == sizes.mem_txns
                sizes_now = buffer_sizes(buffer)
                result["per_checkpoint"].append(
                    {"msgs_per_txn": target, "entries": entries, "bytes": sizes_now}
                )
                elapsed = time.perf_counter() - started
                progress(
                    f"4. {sizes.mem_txns} txns x {target} msgs ({entries:,} entries, "
                    f"{entries / elapsed:,.0f} appends/s): buffer {sizes_now['total']:,} bytes"
                )
        finally:
            gc.enable()
        # End them all, 10% aborted: what stays is committed (until the low
        # watermark passes) and the aborted index.
        for index, txn_id in enumerate(txn_ids):
            await buffer.end(txn_id, commit=index % 10 != 9, low_watermark=0)
        result["after_end"] = buffer_sizes(buffer)
        result["after_end_state"] = {
            "ongoing": len(buffer.ongoing),
            "aborted": len(buffer.aborted),
            "committed": len(buffer.committed),
        }
        buffer.close()
        await ledger.close()
        store.close()
    result["empty_buffer_bytes"] = baseline
    totals = [c["bytes"]["total"] for c in result["per_checkpoint"]]
    result["growth_first_to_last"] = round(totals[-1] / totals[0], 3)
    result["goal"] = "< 1 MB and flat in messages per txn"
    return result


# ---------------------------------------------------------------- report


def report(results: dict) -> str:
    rows: list[list[object]] = []

    def add(scenario: str, metric: str, value: object, goal: str = "", ok: bool | None = None):
        verdict = "" if ok is None else ("ok" if ok else "MISSED")
        rows.append([scenario, metric, value, goal, verdict])

    if "throughput" in results:
        t = results["throughput"]
        for mode, label in (("plain", "no txn"), ("txn", "txn every 100 ms")):
            run = t[mode]
            add("1 throughput", f"{label}: msgs/s end to end", f"{run['msgs_per_s']:,}")
            add(
                "1 throughput",
                f"{label}: CPU us/msg broker / client",
                f"{run['broker_cpu_us_per_msg']} / {run['client_cpu_us_per_msg']}",
            )
        add(
            "1 throughput", "ratio txn / no txn (msgs/s)", t["ratio"], ">= 0.98", t["ratio"] >= 0.98
        )
    if "rc_vs_ru" in results:
        r = results["rc_vs_ru"]
        for name, short in (("READ_COMMITTED", "RC"), ("READ_UNCOMMITTED", "RU")):
            level = r[name]
            add("2 RC vs RU", f"{short}: delivered msgs/s", f"{level['delivered_msgs_per_s']:,}")
            add(
                "2 RC vs RU",
                f"{short}: log msgs / entries scanned/s",
                f"{level['log_msgs_scanned_per_s']:,} / {level['log_entries_scanned_per_s']:,}",
            )
            add(
                "2 RC vs RU",
                f"{short}: CPU us/delivered msg broker / client",
                f"{level['broker_cpu_us_per_delivered_msg']} / "
                f"{level['client_cpu_us_per_delivered_msg']}",
            )
        add(
            "2 RC vs RU",
            "ratio RC/RU log drained/s (same range)",
            r["ratio_scanned"],
            ">= 0.95",
            r["ratio_scanned"] >= 0.95,
        )
        add("2 RC vs RU", "ratio RC/RU delivered msgs/s (RC gets 90%)", r["ratio_delivered"])
    if "latency" in results:
        lat = results["latency"]
        v, c = lat["commit_to_visible"], lat["commit_rpc"]
        add("3 latency", "commit->visible p50 ms", v["p50_ms"])
        add("3 latency", "commit->visible p99 ms", v["p99_ms"], "< 5", v["p99_ms"] < 5)
        add("3 latency", "commit->visible max ms", v["max_ms"])
        add(
            "3 latency",
            "commit RPC p50 / p99 / max ms",
            f"{c['p50_ms']} / {c['p99_ms']} / {c['max_ms']}",
        )
    if "memory" in results:
        m = results["memory"]
        for checkpoint in m["per_checkpoint"]:
            total = checkpoint["bytes"]["total"]
            add(
                "4 memory",
                f"{m['txns']} open txns x {checkpoint['msgs_per_txn']} msgs, bytes",
                f"{total:,}",
                "< 1 MB",
                total < 1024 * 1024,
            )
        add(
            "4 memory",
            "growth x10 -> x" + str(m["per_checkpoint"][-1]["msgs_per_txn"]),
            m["growth_first_to_last"],
            "~1.0",
            m["growth_first_to_last"] < 1.05,
        )
        add("4 memory", "after ending all (10% aborted), bytes", f"{m['after_end']['total']:,}")
    return format_table(["scenario", "metric", "value", "goal", ""], rows)


SCENARIOS = {
    "1": ("throughput", bench_throughput),
    "2": ("rc_vs_ru", bench_rc_vs_ru),
    "3": ("latency", bench_latency),
    "4": ("memory", bench_memory),
}


async def main_async(args: argparse.Namespace) -> dict:
    sizes = QUICK if args.quick else Sizes()
    results: dict = {}
    for key in args.only.split(","):
        name, bench = SCENARIOS[key.strip()]
        started = time.perf_counter()
        results[name] = await bench(sizes)
        results[name]["bench_seconds"] = round(time.perf_counter() - started, 1)
        progress(f"{key}. {name} done in {results[name]['bench_seconds']} s")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--only", default="1,2,3,4", help="scenarios to run, e.g. 1,3")
    args = parser.parse_args()
    started = time.perf_counter()
    results = asyncio.run(main_async(args))
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    print(report(results))
    print(f"\ntotal {results['total_seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
