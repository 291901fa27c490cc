"""The broker's latency histograms: publish (per appended batch) and transaction
commit (per topic a committed transaction wrote to).

They are process-wide, as Prometheus instruments are: the hot paths observe into
them with no reference to pass around, and each /metrics registry
(stableline.broker.metrics) exposes them. Observations are per batch or per topic
end, never per message, so their cost does not grow with batching.

Units are seconds, as Prometheus names them; the buckets sit where a broker's
latencies fall, from a quarter of a millisecond (a write into the page cache)
through tens of milliseconds (fsync on a busy disk) to seconds (a stall).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from prometheus_client import Histogram

LATENCY_BUCKETS_S = (
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

PUBLISH_LATENCY = Histogram(
    "stableline_publish_latency_seconds",
    "From a batch reaching its topic to its append being durable (or found a duplicate)",
    buckets=LATENCY_BUCKETS_S,
    registry=None,
)
COMMIT_LATENCY = Histogram(
    "stableline_txn_commit_latency_seconds",
    "Ending a committed transaction on one topic it wrote to: the commit marker "
    "appended and the transaction buffer's stable position moved",
    buckets=LATENCY_BUCKETS_S,
    registry=None,
)

P = ParamSpec("P")
R = TypeVar("R")


def observed(
    histogram: Histogram,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate a coroutine function: each call's duration goes into `histogram`,
    whether it returns or raises."""

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(function)
        async def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - started)

        return timed

    return decorate


@contextmanager
def commit_timer(commit: bool) -> Iterator[None]:
    """Time ending a transaction on a topic; only commits are observed."""
    if not commit:
        yield
        return
    started = time.perf_counter()
    yield
    COMMIT_LATENCY.observe(time.perf_counter() - started)
