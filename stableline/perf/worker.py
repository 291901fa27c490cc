"""The life of a perf worker process: connect, say ready, wait for go, run, report.

Producer and consumer workers differ only in their `Side` (what they open, run and
finally report); this module runs either in a fresh event loop, sends its interval
histograms to the parent every `interval_s`, and turns any failure into an
"error" report with the traceback, so the parent can stop the run and say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import traceback
from typing import Protocol

from stableline._errors import StableLineError
from stableline.perf.coordination import Coordination
from stableline.perf.histogram import LatencyHistogram


class IntervalHistograms:
    """Named histograms filled since the last `take` (the parent keeps the totals)."""

    def __init__(self, *names: str) -> None:
        self._names = names
        self.current = {name: LatencyHistogram() for name in names}

    def __getitem__(self, name: str) -> LatencyHistogram:
        return self.current[name]

    def take(self) -> dict[str, LatencyHistogram]:
        taken = self.current
        self.current = {name: LatencyHistogram() for name in self._names}
        return taken


class Side(Protocol):
    histograms: IntervalHistograms

    async def open(self) -> None: ...
    async def run(self) -> None: ...
    async def close(self) -> dict: ...


def run_worker(role: str, slot: int, coord: Coordination, interval_s: float, side: Side) -> None:
    """Run one worker process's side to the end; everything it learns goes to `coord.reports`.

    Ctrl-C reaches every process of the terminal's group: a worker ignores it and
    stops when the parent says so, so the parent can report what was done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reports = coord.reports

    async def life() -> dict:
        await side.open()
        reports.put(("ready", role, slot, None))
        await asyncio.to_thread(coord.go.wait)
        cpu = time.process_time()

        async def report_intervals() -> None:
            while True:
                await asyncio.sleep(interval_s)
                reports.put(("interval", role, slot, side.histograms.take()))

        reporter = asyncio.create_task(report_intervals())
        try:
            await side.run()
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
        final = await side.close()
        final["cpu_s"] = time.process_time() - cpu
        final["histograms"] = side.histograms.take()
        return final

    try:
        reports.put(("final", role, slot, asyncio.run(life())))
    except StableLineError as error:  # the broker's refusal says it all; no traceback
        reports.put(("error", role, slot, f"{type(error).__name__}: {error}"))
    except BaseException:
        reports.put(("error", role, slot, traceback.format_exc()))
