"""Runs a perf workload: worker processes for each side, go, progress, stop, drain, summary.

Producers and consumers live in their own processes (`processes` of each), so no
two sides share a GIL and the parent only coordinates: consumers subscribe first
(so a Latest subscription sees every message), producers open (and open their
transactions), then everyone starts at once. Producers stop at the duration or
their share of the message count; consumers then drain until every subscription
has received what it may see (READ_COMMITTED: plain and committed messages;
READ_UNCOMMITTED: every published one), or the drain times out (reported as a
failed check, never hidden).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable

from stableline._types import IsolationLevel
from stableline.perf.consumer import consumer_worker_main
from stableline.perf.coordination import CONSUMER, PRODUCER, Coordination, monotonic
from stableline.perf.histogram import LatencyHistogram
from stableline.perf.producer import producer_worker_main
from stableline.perf.report import progress_line, summarise
from stableline.perf.workload import Workload, split

# Workers connect, subscribe and open their transactions within this long.
READY_TIMEOUT_S = 120.0
JOIN_TIMEOUT_S = 30.0
_POLL_S = 0.02


class PerfError(RuntimeError):
    """A worker failed or the run could not start; the message says where and why."""


class _Reports:
    """The parent's view of the reports: ready counts, histograms, finals."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.ready = {PRODUCER: 0, CONSUMER: 0}
        self.finals: dict[str, list[dict]] = {PRODUCER: [], CONSUMER: []}
        self.totals = {name: LatencyHistogram() for name in names}
        self.interval = {name: LatencyHistogram() for name in names}

    def poll(self, reports, timeout_s: float) -> None:
        """Handle every report that arrives within timeout_s; raise on a worker's error."""
        try:
            item = reports.get(timeout=timeout_s)
            while True:
                self._handle(*item)
                item = reports.get_nowait()
        except queue.Empty:
            pass

    def _handle(self, kind: str, role: str, slot: int, payload) -> None:
        if kind == "error":
            raise PerfError(f"{role} worker {slot} failed:\n{payload}")
        if kind == "ready":
            self.ready[role] += 1
            return
        histograms = payload if kind == "interval" else payload.pop("histograms")
        for name, histogram in histograms.items():
            self.totals[name].merge(histogram)
            self.interval[name].merge(histogram)
        if kind == "final":
            self.finals[role].append(payload)

    def take_interval(self) -> dict[str, LatencyHistogram]:
        taken = self.interval
        self.interval = {name: LatencyHistogram() for name in taken}
        return taken


def run(
    workload: Workload,
    out: Callable[[str], None] = print,
    broker_cpu: Callable[[], float] | None = None,
) -> dict:
    """Run `workload` against its broker; the summary (see report.summarise).

    `out` receives the progress lines; `broker_cpu`, if given, reads the broker's
    CPU seconds so far (the summary then has its CPU per message).
    """
    ctx = mp.get_context("spawn")
    producer_groups = split(workload.producer_specs(), workload.processes)
    consumer_groups = split(workload.consumer_specs(), workload.processes)
    coord = Coordination(ctx, len(producer_groups), len(consumer_groups), workload.subscriptions)
    names = ("publish", "commit") * bool(producer_groups) + ("e2e",) * bool(consumer_groups)
    reports = _Reports(names)
    processes: list = []

    def start(role: str, target, groups: list[list]) -> None:
        for slot, specs in enumerate(groups):
            process = ctx.Process(
                target=target, args=(workload, specs, slot, coord), name=f"perf-{role}-{slot}"
            )
            process.start()
            processes.append(process)
        deadline = monotonic() + READY_TIMEOUT_S
        while reports.ready[role] < len(groups):
            reports.poll(coord.reports, _POLL_S)
            if monotonic() > deadline:
                raise PerfError(f"{role} workers not ready within {READY_TIMEOUT_S:g} s")
            if any(p.exitcode not in (None, 0) for p in processes):
                reports.poll(coord.reports, 1.0)  # its traceback, if it sent one
                raise PerfError(f"a {role} worker exited before it was ready")

    try:
        start(CONSUMER, consumer_worker_main, consumer_groups)  # subscribed before any send
        start(PRODUCER, producer_worker_main, producer_groups)
        broker_cpu_start = broker_cpu() if broker_cpu else None
        go = monotonic()
        coord.go.set()
        interrupted = False
        try:
            drain_timed_out = _supervise(
                workload, coord, reports, producer_groups, consumer_groups, go, out
            )
        except KeyboardInterrupt:
            # Ctrl-C: the workers ignore it (see run_worker); stop them and report
            # what was done so far.
            interrupted, drain_timed_out = True, False
            out(f"interrupted after {monotonic() - go:.1f} s: stopping the workers")
            _stop_and_collect(coord, reports, len(producer_groups), len(consumer_groups))
        broker_cpu_s = broker_cpu() - broker_cpu_start if broker_cpu else None
    finally:
        coord.go.set()
        coord.stop_producing.set()
        coord.stop_consuming.set()
        for process in processes:
            process.join(JOIN_TIMEOUT_S)
            if process.is_alive():
                process.terminate()
                process.join(5)
    result = summarise(
        workload,
        reports.totals,
        reports.finals[PRODUCER],
        reports.finals[CONSUMER],
        go,
        broker_cpu_s,
        drain_timed_out,
    )
    if interrupted:
        result["interrupted"] = True
    return result


def _stop_and_collect(
    coord: Coordination, reports: _Reports, producer_workers: int, consumer_workers: int
) -> None:
    """Stop both sides at once and wait (bounded) for their final reports."""
    coord.stop_producing.set()
    coord.stop_consuming.set()
    deadline = monotonic() + JOIN_TIMEOUT_S
    while monotonic() < deadline and (
        len(reports.finals[PRODUCER]) < producer_workers
        or len(reports.finals[CONSUMER]) < consumer_workers
    ):
        reports.poll(coord.reports, _POLL_S)


def _supervise(
    workload: Workload,
    coord: Coordination,
    reports: _Reports,
    producer_groups: list,
    consumer_groups: list,
    go: float,
    out: Callable[[str], None],
) -> bool:
    """Stop producers and consumers when due, print progress; True if the drain timed out."""
    levels = workload.subscriptions_by_level()
    rc, ru = levels[IsolationLevel.READ_COMMITTED], levels[IsolationLevel.READ_UNCOMMITTED]
    last_line, last_published, last_received = go, 0, 0
    drain_deadline = None
    timed_out = False
    while True:
        reports.poll(coord.reports, _POLL_S)
        now = monotonic()
        elapsed = now - go
        published, received = sum(coord.published), sum(coord.received)
        producing = len(reports.finals[PRODUCER]) < len(producer_groups)
        if producing and workload.duration_s and elapsed >= workload.duration_s:
            coord.stop_producing.set()
        if not producing and not coord.stop_consuming.is_set():
            if not producer_groups:  # consume only: the duration or the count ends it
                if (workload.duration_s and elapsed >= workload.duration_s) or (
                    workload.messages and received >= workload.messages
                ):
                    coord.stop_consuming.set()
            else:
                expected = rc * sum(coord.visible) + ru * published
                drain_deadline = drain_deadline or now + workload.drain_timeout_s
                if received >= expected:
                    coord.stop_consuming.set()
                elif now > drain_deadline:
                    timed_out = True
                    coord.stop_consuming.set()
                    out(f"drain timed out: received {received:,} of {expected:,}")
        if not producing and len(reports.finals[CONSUMER]) == len(consumer_groups):
            return timed_out
        if now - last_line >= workload.interval_s:
            out(
                progress_line(
                    elapsed,
                    now - last_line,
                    published - last_published,
                    received - last_received,
                    workload.message_size,
                    reports.take_interval(),
                )
            )
            last_line, last_published, last_received = now, published, received
