"""The blocking client's per-message calls against the asyncio client's batched path.

Two workloads, each run by both faces against one broker process, every run in a
process of its own (no two clients share a GIL):

- produce: the asyncio baseline queues with `send_nowait` and awaits the oldest
  receipts while the queue is full, then flushes; the blocking client runs what a
  Pulsar user writes, `send_async(payload, callback)` per message
  (block_if_queue_full) and `flush()`. Rate = messages / (first send -> flushed).
- consume: the topic the produce run filled with the messages; the asyncio baseline takes
  `batch_receive(1000)` and acknowledges each batch; the blocking client calls
  `receive()` and `acknowledge(msg)` per message, then `close()` (which confirms
  the grouped acks). Rate = messages / (subscribe -> every ack confirmed).

100-byte messages, batching_max_messages 1000, fsync on (the broker as shipped).

    python scripts/bench_sync_client.py [--messages N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from stableline.testing import temporary_broker

MESSAGE_SIZE = 100
PAYLOAD = b"x" * MESSAGE_SIZE


async def _aio_produce(url: str, topic: str, messages: int) -> float:
    from stableline import aio

    async with aio.Client(url) as client:
        producer = await client.create_producer(topic)
        receipts: collections.deque = collections.deque()
        started = time.perf_counter()
        for _ in range(messages):
            while producer.queue_full():
                await receipts.popleft()
            receipts.append(producer.send_nowait(PAYLOAD))
        await producer.flush()
        return time.perf_counter() - started


def _sync_produce(url: str, topic: str, messages: int) -> float:
    import stableline

    with stableline.Client(url) as client:
        producer = client.create_producer(topic, block_if_queue_full=True)
        done = [0]

        def callback(error, message_id) -> None:
            assert error is None, error
            done[0] += 1

        started = time.perf_counter()
        for _ in range(messages):
            producer.send_async(PAYLOAD, callback)
        producer.flush()
        elapsed = time.perf_counter() - started
        assert done[0] == messages, done
        return elapsed


async def _aio_consume(url: str, topic: str, messages: int) -> float:
    from stableline import aio

    async with aio.Client(url) as client:
        started = time.perf_counter()
        consumer = await client.subscribe(
            topic, "bench", initial_position=aio.InitialPosition.Earliest
        )
        received = 0
        while received < messages:
            batch = await consumer.batch_receive(1000, 5000)
            received += len(batch)
            await consumer.acknowledge(batch)
        await consumer.close()
        return time.perf_counter() - started


def _sync_consume(url: str, topic: str, messages: int) -> float:
    import stableline

    with stableline.Client(url) as client:
        started = time.perf_counter()
        consumer = client.subscribe(
            topic, "bench", initial_position=stableline.InitialPosition.Earliest
        )
        for _ in range(messages):
            message = consumer.receive(5000)
            consumer.acknowledge(message)
        consumer.close()
        return time.perf_counter() - started


def _run(name: str, url: str, topic: str, messages: int, results) -> None:
    run = globals()[name]
    cpu_before = time.process_time()  # the interpreter's start and imports left out
    elapsed = (
        asyncio.run(run(url, topic, messages))
        if name.startswith("_aio")
        else run(url, topic, messages)
    )
    results.put((elapsed, time.process_time() - cpu_before))


def _in_process(name: str, url: str, topic: str, messages: int) -> tuple[float, float]:
    """(seconds of the run, CPU seconds of the client process, every thread)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    process = ctx.Process(target=_run, args=(name, url, topic, messages, results))
    process.start()
    figures = results.get(timeout=600)
    process.join(60)
    assert process.exitcode == 0, f"{name} exited with {process.exitcode}"
    return figures


def measure(messages: int) -> dict:
    with temporary_broker(Path(tempfile.gettempdir()), prefix="bench-sync-") as broker:
        url = broker.service_url
        rates = {}
        cpu_us = {}
        # The produce runs fill both topics: each consumer drains one.
        for run, face, name in (
            ("produce", "aio", "_aio_produce"),
            ("produce", "sync", "_sync_produce"),
            ("consume", "aio", "_aio_consume"),
            ("consume", "sync", "_sync_consume"),
        ):
            elapsed, cpu_s = _in_process(name, url, f"produce-{face}", messages)
            rates[f"{run}_{face}"] = round(messages / elapsed)
            cpu_us[f"{run}_{face}"] = round(cpu_s / messages * 1e6, 2)
    return {
        "messages": messages,
        "message_size": MESSAGE_SIZE,
        "msgs_per_s": rates,
        "client_cpu_us_per_msg": cpu_us,
        "produce_ratio": round(rates["produce_sync"] / rates["produce_aio"], 3),
        "consume_ratio": round(rates["consume_sync"] / rates["consume_aio"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = measure(args.messages)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
