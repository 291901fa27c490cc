"""The blocking client's per-message calls against the asyncio client's batched path.

Two workloads, each run by both faces against one broker process, every run in a
process of its own (no two clients share a GIL):

- produce: the asyncio baseline queues with `send_nowait` and awaits the oldest
  receipts while the queue is full, then flushes; the blocking client runs what a
  Pulsar user writes, `send_async(payload, callback)` per message
  (block_if_queue_full) and `flush()`. Rate = messages / (first send -> flushed).
- consume: both faces read the same topic (the same entries), each on a
  subscription of its own made before the topic was written; the asyncio
  baseline takes `batch_receive(1000)` and acknowledges each batch; the blocking
  client calls `receive()` and `acknowledge(msg)` per message, then `close()`
  (which confirms the grouped acks). Rate = messages / (subscribe -> every ack confirmed).

The machine is shared and its disk stalls, so one run of each face says little:
there are `--rounds` rounds, each producing with both faces and then consuming
with both, the face going first swapping every round (a slow spell or a warm
cache then favours neither); a face's figure is the median of its runs. Each
round's own ratio is reported too; `worst_*_ratio` is the lowest of them.

100-byte messages, batching_max_messages 1000, fsync on (the broker as shipped).

    python scripts/bench/bench_sync_client.py [--messages N] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import statistics
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


async def _aio_consume(url: str, topic: str, messages: int, subscription: str) -> float:
    from stableline import aio

    async with aio.Client(url) as client:
        started = time.perf_counter()
        consumer = await client.subscribe(
            topic, subscription, initial_position=aio.InitialPosition.Earliest
        )
        received = 0
        while received < messages:
            batch = await consumer.batch_receive(1000, 5000)
            received += len(batch)
            await consumer.acknowledge(batch)
        await consumer.close()
        return time.perf_counter() - started


def _sync_consume(url: str, topic: str, messages: int, subscription: str) -> float:
    import stableline

    with stableline.Client(url) as client:
        started = time.perf_counter()
        consumer = client.subscribe(
            topic, subscription, initial_position=stableline.InitialPosition.Earliest
        )
        for _ in range(messages):
            message = consumer.receive(5000)
            consumer.acknowledge(message)
        consumer.close()
        return time.perf_counter() - started


def _run(name: str, args: tuple, results) -> None:
    run = globals()[name]
    cpu_before = time.process_time()  # the interpreter's start and imports left out
    elapsed = asyncio.run(run(*args)) if name.startswith("_aio") else run(*args)
    results.put((elapsed, time.process_time() - cpu_before))


def _in_process(name: str, *args) -> tuple[float, float]:
    """(seconds of the run, CPU seconds of the client process, every thread)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    process = ctx.Process(target=_run, args=(name, args, results))
    process.start()
    figures = results.get(timeout=600)
    process.join(60)
    assert process.exitcode == 0, f"{name} exited with {process.exitcode}"
    return figures


FACES = ("aio", "sync")


def _faces_in_turn(round_number: int) -> tuple[str, ...]:
    """Both faces, the one going first swapping every round."""
    return FACES if round_number % 2 == 0 else FACES[::-1]


def _subscribe(url: str, topic: str, subscriptions: tuple[str, ...]) -> float:
    """Make the subscriptions before anything is written: each then holds every
    message, whichever face reads first."""
    import stableline

    with stableline.Client(url) as client:
        for name in subscriptions:
            client.subscribe(
                topic, name, initial_position=stableline.InitialPosition.Earliest
            ).close()
    return 0.0


def measure(messages: int, rounds: int) -> dict:
    assert rounds >= 1, rounds
    runs: dict[str, list[int]] = {}
    cpu_s: dict[str, float] = {}
    with temporary_broker(Path(tempfile.gettempdir()), prefix="bench-sync-") as broker:
        url = broker.service_url
        # A round produces and then consumes, so every read is of a topic written
        # seconds before (an idle topic is unloaded; a reload reads from its files).
        for round_number in range(rounds):
            # Both consumers read the round's asyncio topic: the same entries.
            read_topic = f"produce-aio-{round_number}"
            _in_process("_subscribe", url, read_topic, FACES)
            for workload in ("produce", "consume"):
                for face in _faces_in_turn(round_number):
                    key = f"{workload}_{face}"
                    if workload == "produce":
                        args = (url, f"produce-{face}-{round_number}", messages)
                    else:
                        args = (url, read_topic, messages, face)
                    elapsed, cpu = _in_process(f"_{face}_{workload}", *args)
                    runs.setdefault(key, []).append(round(messages / elapsed))
                    cpu_s[key] = cpu_s.get(key, 0.0) + cpu
    rates = {key: round(statistics.median(figures)) for key, figures in runs.items()}
    result = {
        "messages": messages,
        "message_size": MESSAGE_SIZE,
        "rounds": rounds,
        "msgs_per_s": rates,
        "runs_msgs_per_s": runs,
        "client_cpu_us_per_msg": {
            key: round(cpu / (messages * rounds) * 1e6, 2) for key, cpu in cpu_s.items()
        },
    }
    for workload in ("produce", "consume"):
        sync, aio = runs[f"{workload}_sync"], runs[f"{workload}_aio"]
        result[f"{workload}_ratio"] = round(rates[f"{workload}_sync"] / rates[f"{workload}_aio"], 3)
        result[f"worst_{workload}_ratio"] = round(
            min(s / a for s, a in zip(sync, aio, strict=True)), 3
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5, help="runs of each face (median)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = measure(args.messages, args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
