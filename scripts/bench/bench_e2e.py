"""End-to-end throughput of stableline against a raw gRPC baseline.

Three scenarios, each in its own processes so that no two sides share a GIL:

- raw:       a grpc.aio bidi stream between two processes on 127.0.0.1 moving
             100-byte messages packed into frames of one producer batch
             (1000 x 100 B = 100 KB); no broker logic, no protobuf.
- produce:   one producer process publishing to a broker process with batching
             (batching_max_messages=1000); rate = messages / (first send -> last
             receipt, i.e. durable).
- e2e:       a producer process and a Shared-subscription consumer process
             (aio batch_receive + acknowledge of the list) around a broker
             process; rate = messages / (first send -> last receive).

The broker is a real `python -m stableline serve` subprocess with a temporary
data dir (fsync on, as shipped). MB/s counts payload bytes (100 per message,
10^6 bytes per MB). On a 2-core machine the e2e run has three busy processes
(broker, producer, consumer) on two cores; the figure says so.

    python scripts/bench_e2e.py [--messages N] [--seconds S] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import multiprocessing as mp
import os
import platform
import queue
import sys
import time
import traceback
from pathlib import Path

import grpc

from stableline.testing import BrokerProcess, temporary_broker

REPO = Path(__file__).resolve().parents[2]
MESSAGE_SIZE = 100
BATCH_MESSAGES = 1000
GOAL_MSGS_PER_S = 200_000
# Producer batches sent and not yet acknowledged before the bench waits for the oldest.
PRODUCER_WINDOW_BATCHES = 64
RAW_METHOD = "/bench.Raw/Pipe"
PROFILE_ENV = "BENCH_E2E_PROFILE_DIR"
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]


def now() -> float:
    """CLOCK_MONOTONIC is system-wide on Linux, so child processes' stamps compare."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class Shared:
    """Counters and stamps the child processes update and the parent reads (no locks)."""

    def __init__(self, ctx) -> None:
        self.sent = ctx.RawValue("q", 0)
        self.received = ctx.RawValue("q", 0)
        self.producer_done = ctx.RawValue("b", 0)
        self.go = ctx.Event()


def _report(results, role: str, body) -> None:
    """Run a child's coroutine; send back its figures (plus CPU seconds) or its traceback."""
    profile_dir = os.environ.get(PROFILE_ENV)
    profiler = None
    if profile_dir:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
    cpu = time.process_time()
    try:
        out = asyncio.run(body)
        out["cpu_s"] = time.process_time() - cpu
        results.put((role, out))
    except BaseException:
        results.put((role, {"error": traceback.format_exc()}))
    finally:
        if profiler is not None:
            profiler.stop()
            path = Path(profile_dir) / f"{role}.txt"
            path.write_text(profiler.output_text(unicode=True, show_all=False))


# ---------------------------------------------------------------- raw gRPC baseline


def raw_server_main(port, shared, ready, results) -> None:
    async def serve() -> dict:
        finished = asyncio.Event()
        summary: dict = {}

        async def pipe(request_iterator, _context):
            frames = messages = 0
            async for frame in request_iterator:
                frames += 1
                messages += len(frame) // MESSAGE_SIZE
                shared.received.value = messages
            summary.update(frames=frames, messages=messages)
            yield messages.to_bytes(8, "little")
            finished.set()

        handler = grpc.method_handlers_generic_handler(
            "bench.Raw",
            {"Pipe": grpc.stream_stream_rpc_method_handler(pipe)},  # bytes in, bytes out
        )
        server = grpc.aio.server(options=GRPC_OPTIONS)
        server.add_generic_rpc_handlers((handler,))
        port.value = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready.set()
        await finished.wait()
        await server.stop(1)
        return summary

    _report(results, "raw-server", serve())


def raw_client_main(port: int, max_messages: int, seconds: float, shared, ready, results) -> None:
    async def run() -> dict:
        frame = b"".join(bytes([i % 256]) * MESSAGE_SIZE for i in range(BATCH_MESSAGES))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=GRPC_OPTIONS) as channel:
            await channel.channel_ready()
            call = channel.stream_stream(RAW_METHOD)()
            ready.set()
            await asyncio.to_thread(shared.go.wait)
            started = now()
            deadline = started + seconds
            sent = 0
            while sent < max_messages and now() < deadline:
                await call.write(frame)
                sent += BATCH_MESSAGES
                shared.sent.value = sent
            await call.done_writing()
            reply = await call.read()
            finished = now()
            shared.producer_done.value = 1
        received = int.from_bytes(reply, "little")
        return {"sent": sent, "received": received, "start": started, "end": finished}

    _report(results, "raw-client", run())


# ---------------------------------------------------------------- stableline producer / consumer


def producer_main(
    target: str, topic: str, max_messages: int, seconds: float, max_backlog: int, shared, ready,
    results,
) -> None:  # fmt: skip
    from stableline import aio

    async def run() -> dict:
        payload = b"p" * MESSAGE_SIZE
        async with aio.Client(target) as client:
            producer = await client.create_producer(
                topic, batching_max_messages=BATCH_MESSAGES, batching_max_publish_delay_ms=1
            )
            ready.set()
            await asyncio.to_thread(shared.go.wait)
            window: collections.deque[asyncio.Future] = collections.deque()
            started = now()
            deadline = started + seconds
            sent = 0
            while sent < max_messages and now() < deadline:
                for _ in range(BATCH_MESSAGES):
                    last = producer.send_nowait(payload)
                sent += BATCH_MESSAGES
                shared.sent.value = sent
                window.append(last)
                if len(window) > PRODUCER_WINDOW_BATCHES:
                    await window.popleft()
                else:
                    await asyncio.sleep(0)  # let the writer task put the batch on the wire
                # Keep the e2e backlog bounded: the consumer's pace sets the producer's.
                while max_backlog and sent - shared.received.value > max_backlog:
                    await asyncio.sleep(0.002)
            send_loop_end = now()
            await producer.flush()
            for future in window:
                await future  # raises if the broker refused a batch
            acked = now()
            shared.producer_done.value = 1
        return {"sent": sent, "start": started, "send_loop_end": send_loop_end, "acked": acked}

    _report(results, "producer", run())


def consumer_main(
    target: str, topic: str, queue_size: int, receive_max: int, seconds: float, shared, ready,
    results,
) -> None:  # fmt: skip
    from stableline import aio

    async def run() -> dict:
        async with aio.Client(target) as client:
            consumer = await client.subscribe(
                topic,
                "bench",
                consumer_type=aio.ConsumerType.Shared,
                initial_position=aio.InitialPosition.Earliest,
                receiver_queue_size=queue_size,
            )
            ready.set()
            await asyncio.to_thread(shared.go.wait)
            deadline = now() + seconds
            received = payload_bytes = 0
            first = last = None
            while now() < deadline:
                messages = await consumer.batch_receive(
                    max_num_messages=receive_max, timeout_millis=100
                )
                if messages:
                    last = now()
                    if first is None:
                        first = last
                    payload_bytes += sum(map(len, messages.values()))
                    received += len(messages)
                    shared.received.value = received
                    await consumer.acknowledge(messages)
                if shared.producer_done.value and received >= shared.sent.value:
                    break
            await consumer.close()
        return {"received": received, "bytes": payload_bytes, "first": first, "last": last}

    _report(results, "consumer", run())


# ---------------------------------------------------------------- running a scenario


def run_scenario(ctx, label: str, specs, shared: Shared, results, timeout_s: float, broker=None):
    """Start the processes, wait until all are ready, say go, print progress, gather results.

    Returns each role's figures, plus the broker's CPU seconds between go and the end.
    """
    processes = []
    readies = []
    for role, target, args in specs:
        ready = ctx.Event()
        process = ctx.Process(target=target, args=(*args, shared, ready, results), name=role)
        process.start()
        processes.append(process)
        readies.append(ready)
    out: dict = {}
    wanted = {role for role, _target, _args in specs}
    try:
        deadline = now() + 60
        for ready in readies:
            while not ready.wait(0.1):
                _collect(results, out)
                if any("error" in v for v in out.values()) or now() > deadline:
                    raise RuntimeError(f"{label}: a process failed to start: {_errors(out)}")
        broker_cpu = broker.cpu_seconds() if broker is not None else 0.0
        start = now()
        shared.go.set()
        last_t, last_sent, last_recv = start, 0, 0
        while not wanted <= out.keys() and not _errors(out):
            _collect(results, out, timeout=max(0.01, last_t + 1.0 - now()))
            t, sent, recv = now(), shared.sent.value, shared.received.value
            if t - last_t >= 1.0:
                dt = t - last_t
                print(
                    f"  [{label:7}] {t - start:5.1f}s  sent {sent:>10,}  received {recv:>10,}  "
                    f"send {(sent - last_sent) / dt:>10,.0f}/s  "
                    f"recv {(recv - last_recv) / dt:>10,.0f}/s",
                    flush=True,
                )
                last_t, last_sent, last_recv = t, sent, recv
            if t - start > timeout_s:
                raise RuntimeError(f"{label}: no result within {timeout_s:.0f} s")
        if broker is not None:
            out["broker"] = {"cpu_s": broker.cpu_seconds() - broker_cpu}
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
    errors = _errors(out)
    if errors:
        raise RuntimeError(f"{label} failed:\n{errors}")
    return out


def _errors(out: dict) -> str:
    return "\n".join(f"{role}: {v['error']}" for role, v in out.items() if "error" in v)


def _collect(results, out: dict, timeout: float = 0.0) -> None:
    with contextlib.suppress(queue.Empty):
        role, value = results.get(timeout=timeout) if timeout else results.get_nowait()
        out[role] = value


def figures(messages: int, seconds: float, out: dict) -> dict:
    """Rates over `seconds`, and each process's CPU time per message.

    CPU microseconds per message do not depend on what else the machine runs, so
    they show which process limits the rate: one process cannot go faster than
    1e6 / (its us per message) messages per second on one core.
    """
    rate = messages / seconds if seconds > 0 else 0.0
    cpu = {role: value["cpu_s"] for role, value in out.items() if "cpu_s" in value}
    return {
        "messages": messages,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(rate),
        "mb_per_s": round(rate * MESSAGE_SIZE / 1e6, 2),
        "cpu_percent": {role: round(100 * c / seconds) for role, c in cpu.items() if seconds},
        "cpu_us_per_msg": {role: round(1e6 * c / messages, 2) for role, c in cpu.items()},
    }


def bench_raw(ctx, results, args) -> dict:
    # Raw moves data tens of times faster, so it gets more messages and a short clock.
    seconds = max(1.0, min(3.0, args.seconds / 3))
    print(f"raw gRPC stream: client and server processes ({seconds:g} s)", flush=True)
    shared = Shared(ctx)
    port = ctx.RawValue("i", 0)
    server_ready = ctx.Event()
    server = ctx.Process(target=raw_server_main, args=(port, shared, server_ready, results))
    server.start()
    try:
        if not server_ready.wait(30):
            raise RuntimeError("the raw gRPC server did not start")
        spec = ("raw-client", raw_client_main, (port.value, args.messages * 50, seconds))
        out = run_scenario(ctx, "raw", [spec], shared, results, timeout_s=seconds + 30)
        server.join(10)
        if "raw-server" not in out:  # run_scenario may have taken its figures already
            _collect(results, out, timeout=5)
    finally:
        if server.is_alive():
            server.terminate()
            server.join(5)
    client = out["raw-client"]
    if client["received"] != client["sent"]:
        raise RuntimeError(f"raw: sent {client['sent']:,}, the server saw {client['received']:,}")
    return figures(client["sent"], client["end"] - client["start"], out)


def bench_produce(ctx, results, args, broker: BrokerProcess) -> dict:
    seconds = max(2.0, args.seconds / 2)
    print(f"producer only: broker + producer processes (up to {seconds:g} s)", flush=True)
    shared = Shared(ctx)
    spec = ("producer", producer_main, (broker.target, "bench-produce", args.messages, seconds, 0))
    out = run_scenario(ctx, "produce", [spec], shared, results, seconds + 60, broker)
    producer = out["producer"]
    return figures(producer["sent"], producer["acked"] - producer["start"], out)


def bench_e2e(ctx, results, args, broker: BrokerProcess, cores: int) -> dict:
    print(
        f"end to end: broker + producer + Shared consumer processes on {cores} cores "
        f"(up to {args.seconds:g} s of sending)",
        flush=True,
    )
    shared = Shared(ctx)
    drain_s = args.seconds + 30
    topic = "bench-e2e"
    consumer_args = (broker.target, topic, args.receiver_queue_size, args.receive_max, drain_s)
    producer_args = (broker.target, topic, args.messages, args.seconds, args.max_backlog)
    specs = [("consumer", consumer_main, consumer_args), ("producer", producer_main, producer_args)]
    out = run_scenario(ctx, "e2e", specs, shared, results, drain_s + 30, broker)
    producer, consumer = out["producer"], out["consumer"]
    if consumer["received"] < producer["sent"]:
        raise RuntimeError(f"e2e: sent {producer['sent']:,}, received {consumer['received']:,}")
    if consumer["bytes"] != consumer["received"] * MESSAGE_SIZE:
        raise RuntimeError("e2e: the received payload sizes do not add up")
    row = figures(consumer["received"], consumer["last"] - producer["start"], out)
    row["producer_msgs_per_s"] = round(producer["sent"] / (producer["acked"] - producer["start"]))
    return row


NAMES = {
    "raw": "raw grpc.aio stream",
    "produce": "stableline producer only",
    "e2e": "stableline e2e (Shared, acked)",
}


def print_table(rows: dict[str, dict], cores: int) -> bool | None:
    raw_rate = rows.get("raw", {}).get("msgs_per_s")
    print()
    print(f"{'scenario':32} {'msgs/s':>11} {'MB/s':>8} {'vs raw':>7}  CPU: % of a core, us/msg")
    for key, row in rows.items():
        row["ratio_to_raw"] = round(row["msgs_per_s"] / raw_rate, 4) if raw_rate else None
        ratio = f"{row['ratio_to_raw']:.3f}" if raw_rate else "-"
        cpu = ", ".join(
            f"{role} {pct}% {row['cpu_us_per_msg'][role]:.2f}"
            for role, pct in row["cpu_percent"].items()
        )
        print(f"{NAMES[key]:32} {row['msgs_per_s']:>11,} {row['mb_per_s']:>8.2f} {ratio:>7}  {cpu}")
    if "e2e" not in rows:
        return None
    met = rows["e2e"]["msgs_per_s"] >= GOAL_MSGS_PER_S
    print(
        f"goal: e2e >= {GOAL_MSGS_PER_S:,} msgs/s: {'met' if met else 'NOT met'} "
        f"(broker, producer and consumer share {cores} cores; "
        f"producer rate during e2e {rows['e2e']['producer_msgs_per_s']:,}/s)"
    )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000, help="messages per run")
    parser.add_argument("--seconds", type=float, default=10.0, help="send for at most this long")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument(
        "--receiver-queue-size", type=int, default=20_000, help="consumer permits (messages)"
    )
    parser.add_argument(
        "--receive-max", type=int, default=1000, help="max_num_messages of batch_receive"
    )
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=200_000,
        help="e2e: the producer pauses while this many messages are unreceived (0: no limit)",
    )
    parser.add_argument(
        "--only", choices=["raw", "produce", "e2e"], action="append", help="run only these"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="write pyinstrument reports of every process to DIR (needs pyinstrument)",
    )
    args = parser.parse_args()
    if args.messages < BATCH_MESSAGES or args.seconds <= 0:
        parser.error(f"--messages must be >= {BATCH_MESSAGES} and --seconds > 0")
    if args.profile is not None:
        try:
            import pyinstrument  # noqa: F401
        except ImportError:
            parser.error("--profile needs pyinstrument: pip install pyinstrument")
        args.profile = args.profile.resolve()
        args.profile.mkdir(parents=True, exist_ok=True)
        os.environ[PROFILE_ENV] = str(args.profile)  # inherited by the spawned processes
    wanted = args.only or ["raw", "produce", "e2e"]
    cores = os.cpu_count() or 1
    print(
        f"bench_e2e: {MESSAGE_SIZE}-byte messages, batches of {BATCH_MESSAGES}, up to "
        f"{args.messages:,} messages or {args.seconds:g} s per run; {cores} cores, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}",
        flush=True,
    )
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    rows: dict[str, dict] = {}
    begun = now()
    if "raw" in wanted:
        rows["raw"] = bench_raw(ctx, results, args)
    if "produce" in wanted or "e2e" in wanted:
        profiler = []
        if args.profile is not None:
            report = args.profile / "broker.txt"
            profiler = ["-m", "pyinstrument", "--interval", "0.0005", "-o", str(report)]
        # On the repo's filesystem (fsync figures), in a git-ignored folder.
        with temporary_broker(
            REPO / "bench-results", "bench-e2e-", interpreter_args=profiler
        ) as broker:
            print(f"broker ready on {broker.target}, data in {broker.data_dir}", flush=True)
            if "produce" in wanted:
                rows["produce"] = bench_produce(ctx, results, args, broker)
            if "e2e" in wanted:
                rows["e2e"] = bench_e2e(ctx, results, args, broker, cores)
    met = print_table(rows, cores)
    total = now() - begun
    print(f"total {total:.1f} s")
    if args.profile is not None:
        print(f"profiles in {args.profile}")
    if args.json is not None:
        report = {
            "message_size": MESSAGE_SIZE,
            "batch_messages": BATCH_MESSAGES,
            "cores": cores,
            "python": platform.python_version(),
            "grpcio": grpc.__version__,
            "args": {
                "messages": args.messages,
                "seconds": args.seconds,
                "receiver_queue_size": args.receiver_queue_size,
                "receive_max": args.receive_max,
                "max_backlog": args.max_backlog,
            },
            "scenarios": rows,
            "goal_msgs_per_s": GOAL_MSGS_PER_S,
            "goal_met": met,
            "total_seconds": round(total, 1),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
