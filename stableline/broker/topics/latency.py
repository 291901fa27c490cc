"""The broker's latency histograms: publish (per appended batch) and transaction
commit (per topic a committed transaction wrote to).

They are process-wide, as Prometheus instruments are: the hot paths observe into
them with no reference to pass around, and each /metrics registry
(stableline.broker.observability.metrics) exposes them. Observations are per batch or per topic
end, never per message, so their cost does not grow with batching: two
perf_counter calls and one observe, under a microsecond
(scripts/bench/bench_publish_observe.py measures it against the publish path).

Units are seconds, as Prometheus names them; the buckets sit where a broker's
latencies fall, from a quarter of a millisecond (a write into the page cache)
through tens of milliseconds (fsync on a busy disk) to seconds (a stall).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

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
    "From a batch reaching its topic to its append being durable (batches appended; "
    "duplicates and failed appends are not observed)",
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


@contextmanager
def commit_timer(commit: bool) -> Iterator[None]:
    """Time ending a transaction on a topic. Only commits that succeed are observed:
    a failed end is retried by the coordinator, and its time says nothing of a commit's."""
    if not commit:
        yield
        return
    started = time.perf_counter()
    yield
    COMMIT_LATENCY.observe(time.perf_counter() - started)
