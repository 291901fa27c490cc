"""Metadata store cost: durable puts/s and get latency, embedded (LMDB) and etcd.

Each figure sits beside a baseline of the same run: the embedded store against raw
LMDB (put + fsync, get), the etcd store against aetcd's own client on the same etcd
(put, get). Puts are awaited one by one (sequential), then 32 at a time (concurrent,
where the embedded store's group commit and etcd's batching show). Without
`--etcd URL` an etcd is started from PATH in a temporary directory; with none
installed the etcd rows are left out.

    python scripts/bench/bench_metadata.py [--puts 1000] [--gets 2000] [--etcd etcd://h:p] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import lmdb

from stableline.metadata import open_metadata_store

CONCURRENCY = 32
VALUE = b"v" * 200  # about a broker registration's size


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_etcd(directory: Path) -> tuple[subprocess.Popen, str] | None:
    binary = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if binary is None:
        return None
    client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
    process = subprocess.Popen(
        [binary, "--name=bench", f"--data-dir={directory / 'etcd'}",
         f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
         f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
         f"--initial-cluster=bench={peer}", "--logger=zap", "--log-level=error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as reply:
                if json.loads(reply.read()).get("health") == "true":
                    return process, "etcd://" + client.removeprefix("http://")
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("etcd did not become healthy")


@contextlib.contextmanager
def etcd_in_scratch(directory: Path, prefix: str) -> Iterator[tuple[Path, int, str] | None]:
    """A scratch directory under `directory` with an etcd started in it: (the directory,
    etcd's pid, its URL), or None when there is no etcd on PATH. etcd is stopped and
    the directory removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=directory) as scratch:
        root = Path(scratch)
        etcd = start_etcd(root)
        if etcd is None:
            yield None
            return
        process, url = etcd
        try:
            yield root, process.pid, url
        finally:
            process.terminate()
            process.wait()


def _latency_us(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {
        "p50_us": round(statistics.median(samples) * 1e6, 1),
        "p99_us": round(samples[int(len(samples) * 0.99) - 1] * 1e6, 1),
    }


async def _timed(coroutines_of, count: int, concurrency: int) -> float:
    """Operations per second of `count` calls, `concurrency` in flight."""
    started = time.perf_counter()
    for first in range(0, count, concurrency):
        await asyncio.gather(
            *(coroutines_of(i) for i in range(first, min(count, first + concurrency)))
        )
    return round(count / (time.perf_counter() - started), 1)


async def _get_latency(get, gets: int) -> dict:
    samples = []
    for i in range(gets):
        started = time.perf_counter()
        await get(i)
        samples.append(time.perf_counter() - started)
    return _latency_us(samples)


async def bench_store(url: str, directory: Path, puts: int, gets: int) -> dict:
    store = await open_metadata_store(url, embedded_dir=directory)
    try:
        sequential = await _timed(lambda i: store.put(f"/bench/seq/{i}", VALUE), puts, 1)
        concurrent = await _timed(lambda i: store.put(f"/bench/par/{i}", VALUE), puts, CONCURRENCY)
        cas = await _timed(lambda i: store.put(f"/bench/seq/{i}", VALUE, 0), puts, 1)
        latency = await _get_latency(lambda i: store.get(f"/bench/seq/{i % puts}"), gets)
    finally:
        await store.close()
    return {"puts_per_s": sequential, "concurrent_puts_per_s": concurrent,
            "cas_puts_per_s": cas, "get": latency}  # fmt: skip


def bench_raw_lmdb(directory: Path, puts: int, gets: int) -> dict:
    env = lmdb.open(str(directory), map_size=1 << 30, sync=False, metasync=False)
    try:
        started = time.perf_counter()
        for i in range(puts):
            with env.begin(write=True) as txn:
                txn.put(f"/bench/{i}".encode(), VALUE)
            env.sync(True)
        put_rate = round(puts / (time.perf_counter() - started), 1)
        samples = []
        for i in range(gets):
            begun = time.perf_counter()
            with env.begin() as txn:
                txn.get(f"/bench/{i % puts}".encode())
            samples.append(time.perf_counter() - begun)
    finally:
        env.close()
    return {"puts_per_s": put_rate, "get": _latency_us(samples)}


async def bench_raw_aetcd(url: str, puts: int, gets: int) -> dict:
    import aetcd

    host, _, port = url.removeprefix("etcd://").rpartition(":")
    async with aetcd.Client(host=host, port=int(port)) as client:
        sequential = await _timed(lambda i: client.put(f"/raw/seq/{i}".encode(), VALUE), puts, 1)
        concurrent = await _timed(
            lambda i: client.put(f"/raw/par/{i}".encode(), VALUE), puts, CONCURRENCY
        )
        latency = await _get_latency(lambda i: client.get(f"/raw/seq/{i % puts}".encode()), gets)
    return {"puts_per_s": sequential, "concurrent_puts_per_s": concurrent, "get": latency}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--etcd", default=None, help="an etcd:// URL [start one from PATH]")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict = {"puts": args.puts, "gets": args.gets, "concurrency": CONCURRENCY}
    with tempfile.TemporaryDirectory(prefix="bench-metadata-", dir=".") as scratch:
        directory = Path(scratch)
        results["raw_lmdb"] = bench_raw_lmdb(directory / "raw", args.puts, args.gets)
        results["embedded"] = asyncio.run(
            bench_store("", directory / "embedded", args.puts, args.gets)
        )
        etcd, url = (None, args.etcd) if args.etcd else (start_etcd(directory) or (None, None))
        try:
            if url is not None:
                results["raw_aetcd"] = asyncio.run(bench_raw_aetcd(url, args.puts, args.gets))
                results["etcd"] = asyncio.run(bench_store(url, directory, args.puts, args.gets))
        finally:
            if etcd is not None:
                etcd.terminate()
                etcd.wait()
    for name in ("raw_lmdb", "embedded", "raw_aetcd", "etcd"):
        if name in results:
            print(f"{name:10} {json.dumps(results[name])}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
