"""Many topics on one broker: creation rate, memory and open files per idle topic,
restart to healthy, and the first read of a topic after the restart.

A real broker process started with its open-files limits at `--nofile` (soft and
hard, so raising the soft limit cannot help), `inactive_topic_unload_s` at
`--unload-s`. Then:
1. create `--topics` topics with the admin CreateTopic RPC (`--concurrency` at
   once): topics per second; then send one message to each (a producer per
   topic, the aio SDK): topics per second for the first use of a topic, which
   loads it and creates its first ledger file, with the broker's CPU per topic;
2. wait until the idle ones are unloaded: broker RSS and open files against the
   empty broker's, per topic;
3. restart (SIGTERM, start): seconds until the broker answers health SERVING,
   against the same restart of the empty broker (measured before step 1); RSS
   per topic after the restart;
4. the first Fetch (READ_COMMITTED, from the first entry) of `--reads` topics
   chosen at random, one at a time: latency of each, each must return the message;
   then the same reads again (the topics loaded): the baseline.
The client's own CPU per topic is given beside the broker's: when the two
together near a core per topic rate, the machine (not the broker) is the limit.
`--first-message-only` stops after step 1 (a quick A/B of creation);
`--profile PATH` writes a cProfile of the broker over the first-message phase only
(pstats format: `python -m pstats PATH`).
Goals (100,000 topics at 1,024 files): >= 1,000 topics/s (CreateTopic and first
message), <= 5 KB per idle topic, healthy < 2 s after a restart, first read < 50 ms.
The restart is also given as a ratio to the empty broker's, measured in the same
run: what start-up costs per topic, apart from the machine's speed and load.

    python scripts/bench/bench_topics.py [--topics N] [--nofile N] [--json PATH]
        [--first-message-only] [--profile PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import stableline.aio
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.testing import BrokerProcess, open_files_limited

GOAL_TOPICS_PER_S = 1000.0
GOAL_BYTES_PER_IDLE_TOPIC = 5 * 1024
GOAL_RESTART_S = 2.0
GOAL_FIRST_READ_MS = 50.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# The broker's profiler starts on the first signal and is written out on the second
# (SIGUSR1 is the broker's own: it releases failpoints).
PROFILE_START = signal.SIGRTMIN + 1
PROFILE_STOP = signal.SIGRTMIN + 2


def profiled(interpreter_args: list[str], path: Path) -> list[str]:
    """`interpreter_args` (a `-c` start-up, as open_files_limited gives) with a cProfile
    of the broker's main thread from PROFILE_START to PROFILE_STOP, written to `path`."""
    assert interpreter_args[0] == "-c"
    hook = (
        "import cProfile, signal; _profile = cProfile.Profile(); "
        f"signal.signal({int(PROFILE_START)}, lambda *_: _profile.enable()); "
        f"signal.signal({int(PROFILE_STOP)}, "
        f"lambda *_: (_profile.disable(), _profile.dump_stats({str(path)!r}))); "
    )
    return ["-c", hook + interpreter_args[1], *interpreter_args[2:]]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def loaded_topics(broker: BrokerProcess) -> int:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("stableline_topics "):
                return int(float(line.split()[1]))
    raise RuntimeError("no stableline_topics metric")


def topic_name(index: int) -> str:
    return f"persistent://bench/topics/t-{index:06d}"


async def create_topics(broker: BrokerProcess, count: int, concurrency: int) -> float:
    """CreateTopic for `count` new topics; returns topics per second."""
    next_index = iter(range(count))
    async with grpc.aio.insecure_channel(broker.service_url) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)

        async def worker() -> None:
            for index in next_index:
                answer = await stub.CreateTopic(admin_pb2.TopicRequest(topic=topic_name(index)))
                assert answer.created, answer

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


async def send_to_topics(broker: BrokerProcess, count: int, concurrency: int) -> float:
    """Send one message to each of `count` topics; returns topics per second."""
    next_index = iter(range(count))
    done = 0

    async with stableline.aio.Client(broker.service_url) as client:

        async def worker() -> None:
            nonlocal done
            for index in next_index:
                producer = await client.create_producer(topic_name(index))
                await producer.send(f"message of topic {index}".encode())
                await producer.close()
                done += 1
                if done % 10_000 == 0:
                    progress(f"sent to {done} topics")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


def wait_healthy(broker: BrokerProcess, started: float, timeout_s: float = 120.0) -> float:
    """Seconds from `started` until health answers SERVING."""
    with grpc.insecure_channel(broker.service_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.monotonic() - started
            except grpc.RpcError:
                pass
            time.sleep(0.005)
    raise RuntimeError("broker not healthy in time")


def restart(broker: BrokerProcess) -> float:
    """Stop cleanly, start again: seconds from the start until health is SERVING."""
    broker.stop(timeout_s=600)
    started = time.monotonic()
    broker.start(timeout_s=600)
    return wait_healthy(broker, started)


def first_reads(broker: BrokerProcess, topics: list[int]) -> list[float]:
    """Milliseconds of a READ_COMMITTED Fetch of each topic, one at a time."""
    latencies = []
    with grpc.insecure_channel(broker.service_url) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for index in topics:
            request = broker_pb2.FetchRequest(
                topic=topic_name(index),
                start=broker_pb2.Position(ledger_id=0, entry_id=0),
                max_entries=10,
                isolation_level=broker_pb2.ISOLATION_LEVEL_READ_COMMITTED,
            )
            started = time.perf_counter()
            response = stub.Fetch(request, timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            assert len(response.entries) == 1, (index, response)
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--unload-s", type=float, default=5.0)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--first-message-only", action="store_true")
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args()

    interpreter_args = open_files_limited(args.nofile)
    if args.profile:
        interpreter_args = profiled(interpreter_args, args.profile.resolve())
    with tempfile.TemporaryDirectory(prefix="bench-topics-") as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data",
            interpreter_args=interpreter_args,
            env={"STABLELINE_INACTIVE_TOPIC_UNLOAD_S": str(args.unload_s)},
        )
        broker.start()
        try:
            empty_restart_s = restart(broker)
            progress(f"empty broker: healthy {empty_restart_s:.2f} s after a restart")
            pid = broker.process.pid
            time.sleep(0.5)  # let start-up garbage settle before the baseline
            empty_rss, empty_files = rss_bytes(pid), open_files(pid)
            progress(f"empty broker: RSS {empty_rss / 2**20:.1f} MB, {empty_files} open files")

            rate = asyncio.run(create_topics(broker, args.topics, args.concurrency))
            progress(f"created {args.topics} topics at {rate:.0f} topics/s (CreateTopic)")
            if args.profile:
                os.kill(pid, PROFILE_START)
            cpu_before, client_cpu_before = broker.cpu_seconds(), time.process_time()
            send_rate = asyncio.run(send_to_topics(broker, args.topics, args.concurrency))
            send_cpu_ms = (broker.cpu_seconds() - cpu_before) / args.topics * 1000
            client_cpu_ms = (time.process_time() - client_cpu_before) / args.topics * 1000
            if args.profile:
                os.kill(pid, PROFILE_STOP)
            progress(
                f"first message to each topic at {send_rate:.0f} topics/s, "
                f"broker CPU {send_cpu_ms:.2f} ms a topic, client CPU {client_cpu_ms:.2f} ms"
            )
            if args.first_message_only:
                print(
                    json.dumps(
                        {
                            "topics": args.topics,
                            "concurrency": args.concurrency,
                            "first_message_topics_per_s": round(send_rate, 1),
                            "first_message_broker_cpu_ms_per_topic": round(send_cpu_ms, 3),
                            "first_message_client_cpu_ms_per_topic": round(client_cpu_ms, 3),
                        }
                    )
                )
                return 0
            created_rss, created_files = rss_bytes(pid), open_files(pid)

            deadline = time.monotonic() + max(600.0, args.topics / 100)
            while loaded_topics(broker) > 0 and time.monotonic() < deadline:
                time.sleep(1.0)
            idle_rss, idle_files = rss_bytes(pid), open_files(pid)
            progress(
                f"idle (unloaded): RSS {idle_rss / 2**20:.1f} MB, {idle_files} open files, "
                f"{loaded_topics(broker)} loaded"
            )

            restart_s = restart(broker)
            pid = broker.process.pid
            progress(
                f"restart: healthy after {restart_s:.2f} s "
                f"({restart_s / empty_restart_s:.2f}x the empty broker's)"
            )
            time.sleep(0.5)
            restarted_rss, restarted_files = rss_bytes(pid), open_files(pid)

            sample = random.Random(7).sample(range(args.topics), min(args.reads, args.topics))
            reads = first_reads(broker, sample)
            progress(
                f"first reads: p50 {percentile(reads, 0.5):.1f} ms, "
                f"p99 {percentile(reads, 0.99):.1f} ms, max {max(reads):.1f} ms"
            )
            loaded_reads = first_reads(broker, sample)
            progress(
                f"the same reads again (loaded): p50 {percentile(loaded_reads, 0.5):.1f} ms, "
                f"p99 {percentile(loaded_reads, 0.99):.1f} ms"
            )
        finally:
            broker.stop(timeout_s=600)

    per_topic = {
        "after_create": (created_rss - empty_rss) / args.topics,
        "idle_after_unload": (idle_rss - empty_rss) / args.topics,
        "idle_after_restart": (restarted_rss - empty_rss) / args.topics,
    }
    result = {
        "topics": args.topics,
        "nofile": args.nofile,
        "create_topics_per_s": round(rate, 1),
        "first_message_topics_per_s": round(send_rate, 1),
        "first_message_broker_cpu_ms_per_topic": round(send_cpu_ms, 3),
        "first_message_client_cpu_ms_per_topic": round(client_cpu_ms, 3),
        "rss_empty_mb": round(empty_rss / 2**20, 1),
        "rss_after_create_mb": round(created_rss / 2**20, 1),
        "rss_idle_mb": round(idle_rss / 2**20, 1),
        "rss_after_restart_mb": round(restarted_rss / 2**20, 1),
        "bytes_per_topic": {key: round(value) for key, value in per_topic.items()},
        "open_files": {
            "empty": empty_files,
            "after_create": created_files,
            "idle": idle_files,
            "after_restart": restarted_files,
        },
        "restart_to_healthy_s": round(restart_s, 3),
        "empty_restart_to_healthy_s": round(empty_restart_s, 3),
        "restart_vs_empty": round(restart_s / empty_restart_s, 2),
        "first_read_ms": {
            "p50": round(percentile(reads, 0.5), 2),
            "p99": round(percentile(reads, 0.99), 2),
            "max": round(max(reads), 2),
        },
        "loaded_read_ms": {
            "p50": round(percentile(loaded_reads, 0.5), 2),
            "p99": round(percentile(loaded_reads, 0.99), 2),
            "max": round(max(loaded_reads), 2),
        },
        "goals": {
            "create_topics_per_s": GOAL_TOPICS_PER_S,
            "bytes_per_idle_topic": GOAL_BYTES_PER_IDLE_TOPIC,
            "restart_to_healthy_s": GOAL_RESTART_S,
            "first_read_ms": GOAL_FIRST_READ_MS,
        },
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
