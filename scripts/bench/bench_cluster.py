"""What a cluster costs on one machine: the aggregate end-to-end rate over 1, 2 and 3
brokers, one-message commits with 1 and 4 coordinator shards, and finding a topic's
owner.

Every broker is a real process (stableline.testing.BrokerProcess) with its own data
dir; the brokers of a cluster share one etcd started here from PATH (Debian's
etcd-server), each cluster under a name of its own. The baselines are measured in
the same run: a standalone broker (embedded metadata store) under the same load.
The configurations of a part are all started first and then run in turn, forth and
back (`--rounds`: A B C, C B A, ...), so the machine's drift falls on all alike;
each figure is the mean of its runs, and every run is kept in the JSON.

1. e2e: `stableline perf` (batched producers and a READ_COMMITTED subscription on
   each of 6 topics, 100-byte messages) against a standalone broker, then against
   fresh clusters of 1, 2 and 3 brokers; the topics are placed before the run
   through the first broker (least-loaded placement deals them out evenly) and the
   clients are given every broker's address. Beside the rate: CPU seconds per
   message of each broker process, of the producer and consumer processes and of
   etcd, and how many of the machine's cores were busy (/proc/stat), so that what
   N machines would give can be read off the per-message CPU.
2. txn: closed loops of open, send one message, commit; `--clients` processes of
   `--loops` loops each, client i seeded on broker i (so each broker is asked for
   transactions, and with 4 shards takes one), the loops' topics the same 6 spread
   over the brokers. A standalone broker, then fresh 3-broker clusters with
   transaction_coordinator_shards 1 and 4.
3. lookup (on the 4-shard cluster): a fresh client given one broker's address opens
   a producer on a new topic and sends one message, timed to the receipt: when the
   topic is placed on another broker that is a NotOwner answer, a Lookup and a new
   connection to the owner; then the same client opens the topic again (its owner
   cached) and sends. And a Lookup RPC itself (answered from the broker's cached
   ownership records) against a health check through the same broker, sequential,
   with the broker's CPU per call.

    python scripts/bench/bench_cluster.py [--seconds 4] [--txn-seconds 4] [--brokers 1,2,3]
        [--rounds 2] [--clients 3] [--loops 8] [--trials 15] [--lookups 500] [--only e2e,txn,lookup]
        [--json PATH]

Without an etcd on PATH only the standalone baselines run (and say so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
from bench_metadata import start_etcd  # scripts/ is on the path of a script
from grpc_health.v1 import health_pb2, health_pb2_grpc
from results_file import finish

from stableline import perf
from stableline._proto import broker_pb2, broker_pb2_grpc
from stableline.aio import Client
from stableline.broker.txn.coordinator_shards import shard_path, shards_dir
from stableline.metadata import open_metadata_store
from stableline.perf.coordination import monotonic, process_cpu_seconds
from stableline.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
TOPICS = 6
MESSAGE = b"m" * 100
WORKER_READY_TIMEOUT_S = 120.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat: all but
    idle and iowait), whoever ran: other users' load shows here, not in ours."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Samples the CPU seconds of the brokers, etcd and the machine; perf.run calls it
    when its producers start and when the drain ends, and wants the brokers' sum."""

    def __init__(self, brokers: list[BrokerProcess], etcd_pid: int | None):
        self.brokers = brokers
        self.etcd_pid = etcd_pid
        self.samples: list[tuple[float, list[float], float, float]] = []

    def __call__(self) -> float:
        brokers = [broker.cpu_seconds() for broker in self.brokers]
        etcd = process_cpu_seconds(self.etcd_pid) if self.etcd_pid else 0.0
        self.samples.append((monotonic(), brokers, etcd, machine_busy_seconds()))
        return sum(brokers)

    def spent(self) -> dict:
        """CPU seconds between the first and last sample: each broker, etcd, the
        machine; and the wall seconds between them."""
        (start, brokers0, etcd0, busy0), (end, brokers1, etcd1, busy1) = (
            self.samples[0],
            self.samples[-1],
        )
        return {
            "wall_s": end - start,
            "brokers": [after - before for before, after in zip(brokers0, brokers1, strict=True)],
            "etcd": etcd1 - etcd0,
            "machine": busy1 - busy0,
        }


@contextlib.contextmanager
def brokers_running(
    root: Path, count: int, etcd_url: str | None, cluster: str, env: dict[str, str] | None = None
) -> Iterator[list[BrokerProcess]]:
    """`count` brokers on fresh data dirs under `root`: a cluster named `cluster` on
    `etcd_url`, or (no URL) one standalone broker with its embedded store."""
    extra = ["--metadata-store", etcd_url, "--cluster", cluster] if etcd_url else []
    directory = Path(tempfile.mkdtemp(prefix=f"{cluster}-", dir=root))
    brokers = [
        BrokerProcess(directory / f"broker-{i}" / "data", extra_args=extra, env=env or {})
        for i in range(count)
    ]
    try:
        for broker in brokers:
            broker.start()
        progress(f"{cluster}: {count} broker(s) on {', '.join(b.target for b in brokers)}")
        yield brokers
    finally:
        for broker in brokers:
            if broker.process is not None and broker.stop() != 0:
                print(f"warning: {broker.target} exited uncleanly\n{broker.log()[-3000:]}")


def seeds(brokers: list[BrokerProcess], first: int) -> str:
    """Every broker's address, starting with broker `first` (a client's own broker)."""
    ordered = brokers[first:] + brokers[:first]
    return ",".join(broker.target for broker in ordered)


def place_topics(brokers: list[BrokerProcess], topics: list[str]) -> dict[str, int]:
    """Look each topic up through the first broker, one after another (which places
    new ones on the least-loaded broker); how many each broker owns."""

    async def place() -> Counter:
        owners: Counter = Counter({broker.target: 0 for broker in brokers})
        async with Client(brokers[0].target) as client:
            for topic in topics:
                owners[(await client.lookup_topic(topic)).grpc_address] += 1
        return owners

    return dict(asyncio.run(place()))


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _ms(samples: list[float]) -> dict:
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "p50_ms": round(statistics.median(samples) * 1e3, 2),
        "p99_ms": round(_percentile(samples, 0.99) * 1e3, 2),
        "max_ms": round(max(samples) * 1e3, 2),
    }


# ---------------------------------------------------------------- 1. e2e


def e2e_run(label: str, brokers: list[BrokerProcess], etcd_pid: int | None, seconds: float) -> dict:
    workload = perf.Workload(
        service_url=seeds(brokers, 0), topic=label, topics=TOPICS, duration_s=seconds
    )
    placed = place_topics(brokers, workload.topic_names())
    sampler = CpuSampler(brokers, etcd_pid)
    result = perf.run(workload, out=lambda line: progress(f"  {label}: {line}"), broker_cpu=sampler)
    if not result["checks"]["ok"]:
        raise RuntimeError(f"{label}: consistency checks failed: {result['checks']}")
    consumed = result["consumed"]
    delivered = consumed["messages"]
    spent = sampler.spent()
    per_message = {
        "brokers": [round(cpu * 1e6 / delivered, 3) for cpu in spent["brokers"]],
        "brokers_total": round(sum(spent["brokers"]) * 1e6 / delivered, 3),
        "producers": result["cpu_us_per_msg"]["producers"],
        "consumers": result["cpu_us_per_msg"]["consumers"],
        "etcd": round(spent["etcd"] * 1e6 / delivered, 3),
    }
    ours = (
        per_message["brokers_total"]
        + per_message["producers"]
        + per_message["consumers"]
        + per_message["etcd"]
    )
    row = {
        "brokers": len(brokers),
        "topics_per_broker": placed,
        "msgs_per_s": consumed["msgs_per_s"],
        "messages": delivered,
        "e2e_p99_ms": consumed["e2e_latency"].get("p99_ms"),
        "cpu_us_per_msg": per_message,
        "all_processes_us_per_msg": round(ours, 3),
        # The cores these processes kept busy (CPU per message times the rate), and
        # the cores busy on the whole machine over the same seconds.
        "cores_busy_ours": round(ours * consumed["msgs_per_s"] / 1e6, 2),
        "cores_busy_machine": round(spent["machine"] / spent["wall_s"], 2),
        # What one broker core moves at this run's broker CPU per message (the topics
        # are spread evenly, so N brokers on N cores of their own: N times this, as
        # long as the clients run elsewhere).
        "msgs_per_s_per_broker_core": round(1e6 / per_message["brokers_total"]),
    }
    progress(f"{label}: {json.dumps(row)}")
    return row


def bench_e2e(args, root: Path, etcd: tuple | None) -> dict:
    """Every configuration up at once (idle ones cost next to nothing), run in the
    order of `in_turn`; each configuration's runs and their mean."""
    configurations = ["standalone"] + [f"{count}_brokers" for count in args.brokers] * bool(etcd)
    runs: dict[str, list[dict]] = {name: [] for name in configurations}
    with contextlib.ExitStack() as stack:
        running = {
            "standalone": stack.enter_context(brokers_running(root, 1, None, "e2e-standalone"))
        }
        for count in args.brokers if etcd else ():
            name = f"e2e-{count}b-{os.getpid()}"
            running[f"{count}_brokers"] = stack.enter_context(
                brokers_running(root, count, etcd[1], name)
            )
        etcd_pid = etcd[0].pid if etcd else None
        for index, name in enumerate(in_turn(configurations, args.rounds)):
            brokers = running[name]
            label = f"e2e-{len(brokers)}b-{index}" if name != "standalone" else f"e2e-sa-{index}"
            pid = etcd_pid if name != "standalone" else None
            runs[name].append(e2e_run(label, brokers, pid, args.seconds))
    return {name: {**mean_of(rows), "runs": rows} for name, rows in runs.items()}


def in_turn(configurations: list[str], rounds: int) -> list[str]:
    """Rounds forth and back (A B C C B A ...), so drift falls on all alike."""
    order: list[str] = []
    for round_index in range(rounds):
        order += configurations if round_index % 2 == 0 else configurations[::-1]
    return order


def mean_of(rows: list):
    """The mean of runs' results, field by field (lists element by element); a field
    that is not a number is the first run's."""
    first = rows[0]
    if isinstance(first, dict):
        return {key: mean_of([row[key] for row in rows]) for key in first}
    if isinstance(first, list):
        return [mean_of(list(column)) for column in zip(*rows, strict=True)]
    if isinstance(first, bool) or not isinstance(first, int | float):
        return first
    if all(row == first for row in rows):
        return first
    mean = statistics.fmean(rows)
    return round(mean) if isinstance(first, int) and abs(mean) >= 100 else round(mean, 3)


# ---------------------------------------------------------------- 2. commits


def commit_worker(
    service_url: str, topics: list[str], seconds: float, ready: mp.Queue, go, results: mp.Queue
) -> None:
    """A client process: a closed loop of open, send, commit on each of `topics` (one
    loop a topic, repeats allowed) for `seconds` after `go`; puts its count,
    latencies and CPU on `results` (a traceback if it failed)."""
    try:
        results.put(asyncio.run(_commit_loops(service_url, topics, seconds, ready, go)))
    except BaseException:
        results.put({"error": traceback.format_exc()})
        ready.put("failed")


async def _commit_loops(
    service_url: str, topics: list[str], seconds: float, ready: mp.Queue, go
) -> dict:
    async with Client(service_url) as client:
        # A producer of each loop's own: each loop is a client of its own, one
        # transaction at a time.
        producers = [await client.create_producer(topic) for topic in topics]

        async def commit_one(producer) -> None:
            txn = await client.new_transaction()
            producer.send_nowait(MESSAGE, txn=txn)
            await txn.commit()  # flushes the send and waits for its receipt first

        # Every loop once before the clock starts: connections, shards taken, topics
        # joined, first ledgers made.
        await asyncio.gather(*(commit_one(producer) for producer in producers))
        ready.put("ready")
        await asyncio.to_thread(go.wait)
        latencies: list[float] = []
        cpu = time.process_time()
        started = monotonic()
        deadline = started + seconds

        async def loop(producer) -> None:
            while monotonic() < deadline:
                begun = time.perf_counter()
                await commit_one(producer)
                latencies.append(time.perf_counter() - begun)

        await asyncio.gather(*(loop(producer) for producer in producers))
        return {
            "commits": len(latencies),
            "seconds": monotonic() - started,
            "cpu_s": time.process_time() - cpu,
            "latencies": latencies,
        }


def commit_run(
    label: str,
    brokers: list[BrokerProcess],
    etcd_pid: int | None,
    seconds: float,
    clients: int,
    loops: int,
) -> dict:
    topics = [f"{label}-{i}" for i in range(TOPICS)]
    placed = place_topics(brokers, topics)
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = []
    for index in range(clients):
        # Each client's loops take their own share of the topics, so all 6 are written.
        mine = [topics[(index * loops + j) % TOPICS] for j in range(loops)]
        worker = ctx.Process(
            target=commit_worker,
            args=(seeds(brokers, index % len(brokers)), mine, seconds, ready, go, results),
            name=f"commits-{index}",
        )
        worker.start()
        workers.append(worker)
    sampler = CpuSampler(brokers, etcd_pid)
    finals: list[dict] = []
    try:
        for _ in workers:
            if ready.get(timeout=WORKER_READY_TIMEOUT_S) != "ready":
                raise RuntimeError(f"{label}: a client failed:\n{results.get(timeout=5)['error']}")
        sampler()
        go.set()
        for _ in workers:
            final = results.get(timeout=seconds + WORKER_READY_TIMEOUT_S)
            if "error" in final:
                raise RuntimeError(f"{label}: a client failed:\n{final['error']}")
            finals.append(final)
        sampler()
    finally:
        go.set()
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.terminate()
    commits = sum(final["commits"] for final in finals)
    wall = max(final["seconds"] for final in finals)
    latencies = [latency for final in finals for latency in final["latencies"]]
    spent = sampler.spent()
    row = {
        "brokers": len(brokers),
        "topics_per_broker": placed,
        "clients": clients,
        "loops_per_client": loops,
        "commits_per_s": round(commits / wall),
        "commits": commits,
        "commit_loop": _ms(latencies),
        "cpu_us_per_commit": {
            "brokers": [round(cpu * 1e6 / commits) for cpu in spent["brokers"]],
            "brokers_total": round(sum(spent["brokers"]) * 1e6 / commits),
            "clients": round(sum(final["cpu_s"] for final in finals) * 1e6 / commits),
            "etcd": round(spent["etcd"] * 1e6 / commits),
        },
        "cores_busy_machine": round(spent["machine"] / spent["wall_s"], 2),
    }
    progress(f"{label}: {json.dumps(row)}")
    return row


async def shard_leaders(etcd_url: str, cluster: str, brokers: list[BrokerProcess]) -> dict:
    """Which broker (its index) leads each coordinator shard that has a leader."""
    index = {broker.target: i for i, broker in enumerate(brokers)}
    store = await open_metadata_store(etcd_url)
    try:
        children = await store.children(shards_dir(cluster))
        leaders = {}
        for child in sorted(children):
            record = await store.get(shard_path(cluster, int(child)))
            leaders[child] = index.get(json.loads(record.value)["leader"], -1)
        return leaders
    finally:
        await store.close()


def bench_txn(args, root: Path, etcd: tuple | None, then: Callable | None = None) -> dict:
    """Commit loops on a standalone broker and on 3-broker clusters with 1 and with 4
    shards, all up at once, in the order of `in_turn`; `then(brokers)` runs on the
    4-shard cluster at the end."""
    configurations = ["standalone"] + ["1_shards", "4_shards"] * bool(etcd)
    runs: dict[str, list[dict]] = {name: [] for name in configurations}
    names = {}
    with contextlib.ExitStack() as stack:
        running = {
            "standalone": stack.enter_context(brokers_running(root, 1, None, "txn-standalone"))
        }
        for shards in (1, 4) if etcd else ():
            names[shards] = f"txn-{shards}s-{os.getpid()}"
            env = {"STABLELINE_TRANSACTION_COORDINATOR_SHARDS": str(shards)}
            running[f"{shards}_shards"] = stack.enter_context(
                brokers_running(root, 3, etcd[1], names[shards], env)
            )
        for index, name in enumerate(in_turn(configurations, args.rounds)):
            pid = etcd[0].pid if name != "standalone" else None
            runs[name].append(
                commit_run(
                    f"txn-{name.replace('_', '')}-{index}",
                    running[name],
                    pid,
                    args.txn_seconds,
                    args.clients,
                    args.loops,
                )
            )
        results = {name: {**mean_of(rows), "runs": rows} for name, rows in runs.items()}
        for shards, name in names.items():
            leaders = asyncio.run(shard_leaders(etcd[1], name, running[f"{shards}_shards"]))
            results[f"{shards}_shards"]["shard_leaders"] = leaders
        if etcd and then is not None:
            then(running["4_shards"])
    return results


# ---------------------------------------------------------------- 3. lookup


async def _first_sends(seed: BrokerProcess, known: str, trials: int, prefix: str) -> dict:
    redirected, on_seed, cached = [], [], []
    for trial in range(trials):
        topic = f"{prefix}-{trial}"
        async with Client(seed.target) as client:
            await client.lookup_topic(known)  # the seed's connection is up before the clock
            begun = time.perf_counter()
            producer = await client.create_producer(topic)
            await producer.send(MESSAGE)
            first = time.perf_counter() - begun
            owner = (await client.lookup_topic(topic)).grpc_address
            (on_seed if owner == seed.target else redirected).append(first)
            await producer.close()
            begun = time.perf_counter()
            producer = await client.create_producer(topic)
            await producer.send(MESSAGE)
            cached.append(time.perf_counter() - begun)
    return {
        "new_topic_redirected": _ms(redirected),
        "new_topic_on_seed": _ms(on_seed),
        "owner_cached": _ms(cached),
    }


async def _unary_costs(broker: BrokerProcess, topic: str, calls: int, blocks: int = 10) -> dict:
    """Sequential Lookup and health-check calls on `broker`, in alternating blocks (so
    drift falls on both): latency, and the broker's CPU per call."""
    async with grpc.aio.insecure_channel(broker.target) as channel:
        lookup = broker_pb2_grpc.BrokerStub(channel).Lookup
        check = health_pb2_grpc.HealthStub(channel).Check
        kinds = {
            "health_check": lambda: check(health_pb2.HealthCheckRequest()),
            "lookup": lambda: lookup(broker_pb2.LookupRequest(topic=topic)),
        }
        samples: dict[str, list[float]] = {name: [] for name in kinds}
        cpu = dict.fromkeys(kinds, 0.0)
        for call in kinds.values():
            for _ in range(20):  # warm
                await call()
        for block in range(blocks):
            for name in kinds if block % 2 == 0 else reversed(kinds):
                call = kinds[name]
                before = broker.cpu_seconds()
                for _ in range(max(calls // blocks, 1)):
                    begun = time.perf_counter()
                    await call()
                    samples[name].append(time.perf_counter() - begun)
                cpu[name] += broker.cpu_seconds() - before
        return {
            name: {
                "p50_us": round(statistics.median(samples[name]) * 1e6),
                "p99_us": round(_percentile(samples[name], 0.99) * 1e6),
                "broker_cpu_us": round(cpu[name] * 1e6 / len(samples[name])),
            }
            for name in kinds
        }


def bench_lookup(brokers: list[BrokerProcess], trials: int, calls: int) -> dict:
    seed = brokers[0]
    known = f"lookup-known-{os.getpid()}"
    place_topics(brokers, [known])
    progress("lookup: first sends to new topics through one broker")
    sends = asyncio.run(_first_sends(seed, known, trials, f"lookup-new-{os.getpid()}"))
    # A topic another broker owns (placement deals new topics out in turn): the seed
    # answers its Lookup from its cached ownership records.
    remote = known
    for attempt in range(len(brokers)):
        remote = f"lookup-remote-{os.getpid()}-{attempt}"
        if place_topics(brokers, [remote]).get(seed.target) == 0:
            break
    progress("lookup: Lookup RPC and health check, sequential")
    unary = asyncio.run(_unary_costs(seed, remote, calls))
    result = {**sends, **unary, "trials": trials, "calls": calls}
    progress(f"lookup: {json.dumps(result)}")
    return result


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each e2e run's producing")
    parser.add_argument("--txn-seconds", type=float, default=4.0, help="each commit run")
    parser.add_argument("--brokers", default="1,2,3", help="cluster sizes of the e2e runs")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, forth and back")
    parser.add_argument("--clients", type=int, default=3, help="commit client processes")
    parser.add_argument("--loops", type=int, default=8, help="commit loops per client")
    parser.add_argument("--trials", type=int, default=15, help="first sends to new topics")
    parser.add_argument("--lookups", type=int, default=500, help="sequential Lookup calls")
    parser.add_argument("--only", default="e2e,txn,lookup")
    parser.add_argument("--dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.brokers = [int(count) for count in args.brokers.split(",")]
    wanted = {part.strip() for part in args.only.split(",")}
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"topics": TOPICS, "message_size": len(MESSAGE), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-", dir=args.dir) as scratch:
        root = Path(scratch)
        etcd = start_etcd(root)
        if etcd is None:
            progress("no etcd on PATH (Debian: etcd-server): standalone baselines only")
        try:
            if "e2e" in wanted:
                result["e2e"] = bench_e2e(args, root, etcd)

            def lookup(brokers: list[BrokerProcess]) -> None:
                result["lookup"] = bench_lookup(brokers, args.trials, args.lookups)

            if "txn" in wanted:
                result["txn"] = bench_txn(args, root, etcd, lookup if "lookup" in wanted else None)
            elif "lookup" in wanted and etcd is not None:
                with brokers_running(root, 3, etcd[1], f"lookup-{os.getpid()}") as brokers:
                    lookup(brokers)
        finally:
            if etcd is not None:
                etcd[0].terminate()
                etcd[0].wait()
    result["load_after"] = os.getloadavg()
    return finish(result, _STARTED, args.json)


if __name__ == "__main__":
    sys.exit(main())
