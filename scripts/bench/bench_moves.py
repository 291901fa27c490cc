"""How long a topic is unavailable while it moves: three brokers on one etcd.

Three broker processes (stableline.testing.BrokerProcess, data dirs of their own) on
one etcd started here from PATH; one replicated topic (3/3/2, the cluster's default).
A steady producer (one send at a time, each waiting for its receipt, a fresh
sequence of unique payloads) runs throughout, and a READ_UNCOMMITTED reader of the
topic is checked at the end for every acknowledged payload, once each, in order.

1. baseline: for `--baseline-seconds` nothing moves: the longest time between two
   receipts, per window as long as a move's, is what the producer sees anyway.
2. moves: `--moves` times the topic is transferred (`POST .../transfer?broker=...` at
   its owner, read from its ownership record in etcd) to the next member of its
   ensemble in turn, and once the producer has had `--sends-between` more receipts,
   again. A move's unavailability is the longest time without a receipt from the
   last receipt before the call to the first after it returned.

    python scripts/bench/bench_moves.py [--moves 50] [--baseline-seconds 5]
        [--sends-between 20] [--json PATH]

Without an etcd on PATH nothing can be measured: the script says so and its JSON has
`"etcd": false`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from bench_cluster import brokers_running, seeds
from bench_metadata import etcd_in_scratch  # scripts/ is on the path of a script
from bench_replication import percentiles_ms
from results_file import finish

from stableline import MessageId
from stableline.aio import Client
from stableline.metadata import open_metadata_store
from stableline.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
BROKERS = 3
OPERATION_TIMEOUT_S = 30.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def longest_gap(times: list[float], started: float, ended: float) -> float:
    """The longest time without a receipt, from the last before `started` to the
    first after `ended` (`times` ascending)."""
    before = [t for t in times if t < started]
    after = [t for t in times if t > ended]
    first = before[-1] if before else started
    last = after[0] if after else ended
    inside = [first, *(t for t in times if first < t < last), last]
    return max(b - a for a, b in itertools.pairwise(inside))


class Producer:
    """One send at a time; each receipt's time kept, and any failure."""

    def __init__(self, client: Client, topic: str):
        self.client, self.topic = client, topic
        self.receipts: list[float] = []
        self.payloads: list[bytes] = []
        self.failures: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        producer = await self.client.create_producer(self.topic)
        self._task = asyncio.create_task(self._run(producer))

    async def _run(self, producer) -> None:
        for n in itertools.count():
            if self._stop.is_set():
                return
            payload = b"move-%08d" % n
            try:
                await producer.send(payload)
            except Exception as error:
                self.failures.append(repr(error))
                continue
            self.receipts.append(time.monotonic())
            self.payloads.append(payload)

    async def until(self, count: int) -> None:
        while len(self.receipts) < count:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


async def record_of(etcd_url: str, cluster: str, topic: str) -> dict:
    store = await open_metadata_store(etcd_url)
    try:
        local = topic.removeprefix("persistent://")
        found = await store.get(f"/stableline/ownership/{cluster}/topics/{local}")
        assert found is not None, f"no ownership record for {topic}"
        return json.loads(found.value)
    finally:
        await store.close()


def transfer(owner: BrokerProcess, topic: str, target: str) -> str:
    local = topic.removeprefix("persistent://")
    request = urllib.request.Request(
        f"{owner.http_url}/admin/v2/persistent/{local}/transfer?broker={target}",
        method="POST",
        headers={"X-Stableline-Request": "bench"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["broker"]


async def read_back(brokers: list[BrokerProcess], topic: str, count: int) -> list[bytes]:
    async with Client(seeds(brokers, 0), operation_timeout_seconds=OPERATION_TIMEOUT_S) as client:
        reader = await client.create_reader(topic, MessageId.earliest)
        return [(await reader.read_next(timeout_millis=30_000)).data() for _ in range(count)]


async def bench(args, brokers: list[BrokerProcess], etcd_url: str, cluster: str) -> dict:
    topic = f"persistent://public/default/moves-{os.getpid()}"
    by_id = {broker.target: broker for broker in brokers}
    async with Client(seeds(brokers, 0), operation_timeout_seconds=OPERATION_TIMEOUT_S) as client:
        producer = Producer(client, topic)
        await producer.start()
        await producer.until(args.sends_between)
        progress(f"baseline: {args.baseline_seconds:g} s of sends with nothing moving")
        baseline_started = time.monotonic()
        await asyncio.sleep(args.baseline_seconds)
        baseline_times = [t for t in producer.receipts if t >= baseline_started]
        gaps, calls = [], []
        for move in range(args.moves):
            record = await record_of(etcd_url, cluster, topic)
            ensemble, leader = record["ensemble"], record["leader"]
            target = ensemble[(ensemble.index(leader) + 1) % len(ensemble)]
            started = time.monotonic()
            serving = await asyncio.to_thread(transfer, by_id[leader], topic, target)
            ended = time.monotonic()
            assert serving == target, (serving, target)
            await producer.until(len(producer.receipts) + args.sends_between)
            gaps.append(longest_gap(producer.receipts, started, ended))
            calls.append(ended - started)
            progress(
                f"move {move + 1}/{args.moves}: {leader} -> {target}, call {calls[-1] * 1e3:.0f} "
                f"ms, longest time without a receipt {gaps[-1] * 1e3:.0f} ms"
            )
        await producer.stop()
    sent = producer.payloads
    progress(f"reading back {len(sent)} acknowledged payloads")
    read = await read_back(brokers, topic, len(sent))
    # A window as long as a move's median, over the baseline's receipts (at most half
    # of their span, so a short baseline still gives windows: a toy run's moves on a
    # loaded machine can take longer than its whole baseline).
    span = baseline_times[-1] - baseline_times[0] if baseline_times else 0.0
    window = min(statistics.median(gaps) if gaps else 0.1, span / 2)
    baseline_gaps = [
        longest_gap(baseline_times, t, t + window)
        for t in baseline_times[:: max(1, len(baseline_times) // 50)]
        if t + window < baseline_times[-1]
    ]
    return {
        "moves": args.moves,
        "topic": topic,
        "unavailability": percentiles_ms(gaps),
        "transfer_call": percentiles_ms(calls),
        "baseline_longest_gap": percentiles_ms(baseline_gaps),
        "sends": len(sent),
        "failed_sends": len(producer.failures),
        "failures": producer.failures[:10],
        "read_back_in_order": read == sent,
        "samples_s": [round(gap, 4) for gap in gaps],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moves", type=int, default=50, help="transfers timed")
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    parser.add_argument("--sends-between", type=int, default=20, help="receipts between moves")
    parser.add_argument("--dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"brokers": BROKERS, "policy": "3/3/2", "load_before": os.getloadavg()}
    with etcd_in_scratch(args.dir, "bench-moves-") as etcd:
        result["etcd"] = etcd is not None
        if etcd is None:
            progress("no etcd on PATH (Debian: etcd-server): nothing to measure")
            return finish(result, _STARTED, args.json)
        root, _etcd_pid, etcd_url = etcd
        cluster = f"moves-{os.getpid()}"
        with brokers_running(root, BROKERS, etcd_url, cluster) as brokers:
            result.update(asyncio.run(bench(args, brokers, etcd_url, cluster)))
    result["load_after"] = os.getloadavg()
    unavailable = result.get("unavailability", {})
    if unavailable.get("count"):
        progress(
            f"unavailability per move: p50 {unavailable['p50_ms']} ms, p99 "
            f"{unavailable['p99_ms']} ms over {result['moves']} moves; "
            f"{result['failed_sends']} failed sends"
        )
    return finish(result, _STARTED, args.json)


if __name__ == "__main__":
    sys.exit(main())
