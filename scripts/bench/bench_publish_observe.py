"""What the publish latency histogram costs the publish path, in process.

Topic.publish observes stableline_publish_latency_seconds once per appended batch.
This appends the same batches through Topic.publish with the real histogram and
with one whose observe does nothing (the baseline), in short alternating rounds
on one topic in one run, and reports the best round of each: microseconds per
publish, their ratio, and the cost of one Histogram.observe and one
perf_counter call alone (publish makes two). Fsync is off, so the append is as
cheap as it gets and the histogram's share is at its largest; with fsync on (as
shipped) it is smaller still.

    python scripts/bench/bench_publish_observe.py [--batches N] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import timeit
from pathlib import Path

from results_file import finish

from managed_ledger import EntryHeader, LocalStore, ManagedLedger, ManagedLedgerConfig
from stableline.broker.topics import topic as topic_module
from stableline.broker.topics.latency import PUBLISH_LATENCY
from stableline.broker.topics.topic import Topic
from stableline.topic_name import TopicName

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"
MESSAGES_PER_BATCH = 100
PAYLOAD = b"p" * (100 * MESSAGES_PER_BATCH)  # one producer batch of 100 x 100 B


class _NoHistogram:
    def observe(self, _seconds: float) -> None:
        pass


async def _round(histogram, topic: Topic, batches: int) -> float:
    """Seconds per publish over `batches` sequential publishes observed by `histogram`."""
    topic_module.PUBLISH_LATENCY = histogram
    header = EntryHeader(num_messages=MESSAGES_PER_BATCH, publish_time_ms=int(time.time() * 1000))
    started = time.perf_counter()
    for _ in range(batches):
        await topic.publish(header, PAYLOAD)
    return (time.perf_counter() - started) / batches


async def bench(batches: int, rounds: int) -> dict:
    RESULTS.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-publish-observe-", dir=RESULTS))
    store = LocalStore(root / "metadata")
    try:
        name = TopicName.parse("persistent://public/default/observe")
        ledger = await ManagedLedger.open(
            str(name), root / "ledger", store, ManagedLedgerConfig(fsync=False)
        )
        topic = Topic(name, ledger)
        observed, bare = PUBLISH_LATENCY, _NoHistogram()
        await _round(bare, topic, batches // 10)  # warm the ledger and the caches
        with_histogram, without = [], []
        for index in range(rounds):
            # ABBA order: whatever drifts over the run (the ledger's size, the
            # machine's load) falls on both paths alike.
            pair = [(bare, without), (observed, with_histogram)]
            for publish, times in pair if index % 2 == 0 else reversed(pair):
                times.append(await _round(publish, topic, batches))
        topic_module.PUBLISH_LATENCY = PUBLISH_LATENCY
        await topic.close()
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    observe_s = min(timeit.repeat(lambda: PUBLISH_LATENCY.observe(0.001), number=100_000, repeat=5))
    clock_s = min(timeit.repeat(time.perf_counter, number=100_000, repeat=5))
    best_with, best_without = min(with_histogram), min(without)
    return {
        "batches_per_round": batches,
        "rounds": rounds,
        "messages_per_batch": MESSAGES_PER_BATCH,
        "publish_us_with_histogram": round(best_with * 1e6, 2),
        "publish_us_without": round(best_without * 1e6, 2),
        "ratio": round(best_with / best_without, 3),
        "observe_ns": round(observe_s / 100_000 * 1e9),
        "perf_counter_ns": round(clock_s / 100_000 * 1e9),
    }


def main() -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=500, help="publishes per round")
    parser.add_argument("--rounds", type=int, default=80, help="rounds of each path")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    result = asyncio.run(bench(args.batches, args.rounds))
    for key, value in result.items():
        print(f"{key}: {value}")
    return finish(result, started, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
