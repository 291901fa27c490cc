"""What one request costs the broker in CPU, against a bare grpc.aio server's unary call.

A 1-message transaction is three requests (open, send, commit), so the most
commits a broker makes per second is bound by what each costs it. Measured the
same way for each, `--requests` of them at 64 in flight from one asyncio client,
as the broker process's user + system CPU over the batch:
- baseline: a health check on a bare grpc.aio server in a process of its own
  (no interceptors, nothing else running): what gRPC itself costs a unary call;
- the broker's health check: the same call through the broker's interceptors;
- open a transaction; a 1-message durable send (no transaction); a 1-message
  send in a transaction; commit one with nothing written; commit one that wrote
  1 message to 1 topic (the decision's fsync and the marker's included).

    python scripts/bench/bench_rpc_cost.py [--requests N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from results_file import finish  # scripts/ is on the path of a script

from stableline.aio import Client
from stableline.perf.coordination import process_cpu_seconds
from stableline.testing import temporary_broker

REPO = Path(__file__).resolve().parents[2]
IN_FLIGHT = 64
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


async def measure(
    label: str, pid: int, requests: int, request: Callable[[int], Awaitable[object]]
) -> dict:
    """`requests` calls of request(i), IN_FLIGHT at a time: rate and server CPU per call."""
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def one(index: int) -> None:
        async with limit:
            await request(index)

    cpu = process_cpu_seconds(pid)
    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.perf_counter() - started
    row = {
        "requests_per_s": round(requests / wall),
        "server_cpu_us": round((process_cpu_seconds(pid) - cpu) * 1e6 / requests),
    }
    progress(f"{label}: {row['requests_per_s']:,}/s, {row['server_cpu_us']} us of server CPU each")
    return row


def _serve_health(ready: multiprocessing.Queue) -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready.put(port)
        await server.wait_for_termination()

    asyncio.run(serve())


async def health_checks(target: str, pid: int, requests: int, label: str) -> dict:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest(service="")
        await stub.Check(check)
        return await measure(label, pid, requests, lambda _i: stub.Check(check))


def bare_server(requests: int) -> dict:
    ready: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve_health, args=(ready,), daemon=True)
    server.start()
    try:
        port = ready.get(timeout=30)
        return asyncio.run(
            health_checks(f"127.0.0.1:{port}", server.pid, requests, "bare grpc.aio health check")
        )
    finally:
        server.terminate()
        server.join(5)
        if server.is_alive():  # SIGTERM ignored (inherited): a run must still end
            server.kill()
            server.join()


async def broker_requests(target: str, pid: int, requests: int) -> dict:
    rows = {"health_check": await health_checks(target, pid, requests, "broker health check")}
    client = Client(target)
    try:
        producer = await client.create_producer("rpc-cost", batching_max_messages=1)
        await producer.send(b"first")
        payload = b"x" * 100
        txns: list = []

        async def open_txn(_index: int) -> None:
            txns.append(await client.new_transaction(timeout_ms=600_000))

        rows["open_txn"] = await measure("open a transaction", pid, requests, open_txn)
        rows["commit_empty"] = await measure(
            "commit, nothing written", pid, requests, lambda i: txns[i].commit()
        )
        rows["send"] = await measure(
            "1-message durable send", pid, requests, lambda _i: producer.send(payload)
        )
        txns.clear()
        await measure("open a transaction (again)", pid, requests, open_txn)
        rows["send_in_txn"] = await measure(
            "1-message send in a transaction",
            pid,
            requests,
            lambda i: producer.send(payload, txn=txns[i]),
        )
        rows["commit_one_topic"] = await measure(
            "commit, 1 message on 1 topic", pid, requests, lambda i: txns[i].commit()
        )
    finally:
        await client.close()
    return rows


def run(requests: int) -> dict:
    result = {"requests": requests, "in_flight": IN_FLIGHT, "bare": bare_server(requests)}
    # Each of the 2 x requests transactions stays open until its commit batch.
    env = {"STABLELINE_MAX_OPEN_TRANSACTIONS_PER_CLIENT": str(2 * requests + 100)}
    with temporary_broker(REPO / "bench-results", "bench-rpc-", env=env) as broker:
        result["broker"] = asyncio.run(broker_requests(broker.target, broker.process.pid, requests))
    broker_rows = result["broker"]
    result["txn_cpu_us"] = sum(
        broker_rows[key]["server_cpu_us"] for key in ("open_txn", "send_in_txn", "commit_one_topic")
    )
    return result


def report(result: dict) -> None:
    bare = result["bare"]["server_cpu_us"]
    print(f"\n| request ({result['in_flight']} in flight) | per s | server CPU us | x bare unary |")
    print("|---|---:|---:|---:|")
    rows = [("bare grpc.aio health check (baseline)", result["bare"])]
    rows += [(name.replace("_", " "), row) for name, row in result["broker"].items()]
    for name, row in rows:
        ratio = row["server_cpu_us"] / bare
        print(f"| {name} | {row['requests_per_s']:,} | {row['server_cpu_us']} | {ratio:.2f} |")
    print(
        f"\n1-message transaction (open + send + commit): {result['txn_cpu_us']} us of broker "
        f"CPU, at most ~{1e6 / result['txn_cpu_us']:,.0f} commits/s on one core"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    if args.requests < IN_FLIGHT:
        parser.error(f"--requests: at least {IN_FLIGHT}")
    (REPO / "bench-results").mkdir(exist_ok=True)
    result = run(args.requests)
    report(result)
    return finish(result, _STARTED, args.json)


if __name__ == "__main__":
    sys.exit(main())
