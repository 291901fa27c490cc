"""What routing over a partitioned topic costs a producer, against a plain topic.

One broker process (fsync on, as shipped); each run is the asyncio producer's
batched path (`send_nowait`, awaiting the oldest receipts while the queue is full,
then `flush`) in a client process of its own, 100-byte messages:

- plain: one topic, no key (the baseline);
- partitioned, round robin: a 6-partition topic, no key (whole batches in turn);
- plain, keyed: one topic, 1,000 keys in turn (KeyBased batching);
- partitioned, keyed: the 6-partition topic, the same keys, routed by key hash.

Rate = messages / (first send -> flushed); CPU is the client process's per message.
On two shared cores the broker and the client compete: the ratios say what the
partitioned producer adds on the client, not what several brokers would give.
keyed_vs_keyless_ratio is plain_keyed / plain: what 1,000 keys cost KeyBased
batching on one topic, against no key.

    python scripts/bench/bench_partitioned.py [--messages N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing as mp
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from results_file import finish

from stableline.testing import temporary_broker

PAYLOAD = b"x" * 100
PARTITIONS = 6
KEYS = [f"key-{i}" for i in range(1000)]


async def _produce(url: str, topic: str, messages: int, keyed: bool) -> float:
    from stableline import BatchingType, aio

    batching = BatchingType.KeyBased if keyed else BatchingType.Default
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, batching_type=batching)
        receipts: collections.deque = collections.deque()
        keys = len(KEYS)
        started = time.perf_counter()
        for n in range(messages):
            while producer.queue_full():
                await receipts.popleft()
            key = KEYS[n % keys] if keyed else None
            receipts.append(producer.send_nowait(PAYLOAD, partition_key=key))
        await producer.flush()
        return time.perf_counter() - started


def _run(url: str, topic: str, messages: int, keyed: bool, results) -> None:
    cpu_before = time.process_time()
    elapsed = asyncio.run(_produce(url, topic, messages, keyed))
    results.put((elapsed, time.process_time() - cpu_before))


def _in_process(url: str, topic: str, messages: int, keyed: bool) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    process = ctx.Process(target=_run, args=(url, topic, messages, keyed, results))
    process.start()
    figures = results.get(timeout=900)
    process.join(60)
    assert process.exitcode == 0, f"the producer exited with {process.exitcode}"
    return figures


def measure(messages: int) -> dict:
    with temporary_broker(Path(tempfile.gettempdir()), prefix="bench-partitioned-") as broker:
        request = urllib.request.Request(
            f"{broker.http_url}/admin/v2/persistent/public/default/parted/partitions",
            data=str(PARTITIONS).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        urllib.request.urlopen(request, timeout=10).close()
        rates, cpu_us = {}, {}
        for label, topic, keyed in (
            ("plain", "plain", False),
            ("partitioned_round_robin", "parted", False),
            ("plain_keyed", "plain-keyed", True),
            ("partitioned_keyed", "parted", True),
        ):
            elapsed, cpu_s = _in_process(broker.service_url, topic, messages, keyed)
            rates[label] = round(messages / elapsed)
            cpu_us[label] = round(cpu_s / messages * 1e6, 2)
            print(f"{label}: {rates[label]:,} msgs/s, client {cpu_us[label]} us/msg", flush=True)
    return {
        "messages": messages,
        "partitions": PARTITIONS,
        "keys": len(KEYS),
        "msgs_per_s": rates,
        "client_cpu_us_per_msg": cpu_us,
        "round_robin_ratio": round(rates["partitioned_round_robin"] / rates["plain"], 3),
        "keyed_ratio": round(rates["partitioned_keyed"] / rates["plain_keyed"], 3),
        "keyed_vs_keyless_ratio": round(rates["plain_keyed"] / rates["plain"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    return finish(measure(args.messages), started, args.json)


if __name__ == "__main__":
    sys.exit(main())
