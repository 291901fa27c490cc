"""What the perf parent and its worker processes share: counters, signals, one report queue.

Each worker owns one slot of each counter array and is its only writer, so the
arrays need no lock; the parent (and producers, for the consumer lag) sum them.
Histograms and end-of-run figures travel as messages on `reports`:
("ready" | "interval" | "final" | "error", role, slot, payload).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PRODUCER, CONSUMER = "producer", "consumer"


class Coordination:
    def __init__(self, ctx, producer_workers: int, consumer_workers: int, subscriptions: int):
        # Messages acknowledged durable by the broker, per producer worker.
        self.published = ctx.RawArray("q", max(producer_workers, 1))
        # Of those, the ones a READ_COMMITTED reader may see: plain, or of a committed txn.
        self.visible = ctx.RawArray("q", max(producer_workers, 1))
        # Messages received over all subscriptions, per consumer worker.
        self.received = ctx.RawArray("q", max(consumer_workers, 1))
        self.subscriptions = subscriptions  # per topic; the lag is per subscription
        self.go = ctx.Event()
        self.stop_producing = ctx.Event()
        self.stop_consuming = ctx.Event()
        self.reports = ctx.Queue()

    def consumer_lag(self) -> int:
        """Messages published and not yet received, averaged over the subscriptions."""
        if not self.subscriptions:
            return 0
        return sum(self.published) - sum(self.received) // self.subscriptions


def now_us() -> int:
    """Wall-clock microseconds: payload stamps compare across processes (and machines
    whose clocks agree)."""
    return time.time_ns() // 1000


def monotonic() -> float:
    """CLOCK_MONOTONIC is system-wide on Linux, so stamps of different processes compare."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); NaN if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
