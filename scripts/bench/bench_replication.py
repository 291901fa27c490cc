"""What replication costs and how fast a topic fails over: three brokers on one etcd.

Three broker processes (stableline.testing.BrokerProcess, data dirs of their own,
the default 4 s session) on one etcd started here from PATH. Two namespaces on the
same brokers: one whose topics are replicated as the cluster's default, ensemble 3,
write quorum 3, ack quorum 2 (every byte written to three disks, acknowledged once
two hold it), and one keeping one copy (1/1/1), the baseline. Each run has a fresh
topic, placed before its clock starts.

1. throughput: `stableline perf` publish-only runs (msgs/s acknowledged) and
   end-to-end runs (a READ_COMMITTED subscription consuming what is produced), the
   two namespaces alternated forth and back over `--rounds`; each figure the median
   of its runs. Beside it the CPU seconds each broker process spent per message
   (/proc), and their sum.
2. latency: a rate-limited producer at half the replicated topic's median
   publish rate from 1, on each namespace (the same rate on both), `--latency-rounds`
   runs of each alternated: publish latency p50/p99/p99.9, send to acknowledged, the
   median of the runs. Then the same runs on three more brokers whose data dirs are
   on a memory-backed file system (/dev/shm, where there is one): fsync costs them
   nothing, so the pair tells the replication path's own latency from the tail of
   one disk taking three brokers' fsynced copies (three times the bytes a one-copy
   topic writes; a cluster's brokers each have their own disk).
3. failover: `--kills` times, a new replicated topic gets a message; a fresh client
   times a first send to it (the baseline: nothing failed); its owner (from its
   ownership record in etcd) is killed with SIGKILL; from the kill, fresh clients
   given the live brokers' addresses try to send one message, each try a new
   client (so the figure is the brokers' failover, not a client's reconnection),
   until one is acknowledged. The killed broker is restarted before the next kill.
4. shard failover: `--shard-kills` times, a client (every broker's address, a
   different one first each time) opens a transaction and sends one message in it to
   a new replicated topic, and commits a second one with nothing killed (the
   baseline); the broker leading the first transaction's coordinator shard (from the
   shard's record in etcd) is killed with SIGKILL and the client commits: from the
   kill to the commit answered (the SDK follows the shard to its new leader). The
   killed broker is restarted before the next kill.

    python scripts/bench/bench_replication.py [--seconds 4] [--rounds 3]
        [--latency-seconds 8] [--latency-rounds 3] [--kills 20] [--shard-kills 20]
        [--only throughput,latency,failover,shard-failover] [--json PATH]

Without an etcd on PATH nothing can be measured: the script says so and its JSON
has `"etcd": false`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench_cluster import CpuSampler, brokers_running, in_turn, place_topics, seeds
from bench_metadata import start_etcd  # scripts/ is on the path of a script
from results_file import finish

from stableline import perf
from stableline._errors import StableLineError
from stableline.aio import Client
from stableline.broker.config import BrokerConfig
from stableline.broker.txn.coordinator_shards import shard_path
from stableline.metadata import open_metadata_store
from stableline.perf.coordination import monotonic
from stableline.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
BROKERS = 3
MESSAGE = b"f" * 100
REPLICATED, ONE_COPY = "replicated", "one_copy"
# A failed try of a first send (its owner dead, or not yet taken) fails within this.
ATTEMPT_TIMEOUT_S = 2.0
# Between failed tries: keeps fresh clients from spinning on the cores the brokers
# need, and is the resolution of the failover figure.
RETRY_PAUSE_S = 0.02
# A kill's topic must be served again within this, else the run fails (the
# cluster's promise is 5 s; a loaded machine may take longer, never this long).
FAILOVER_GIVE_UP_S = 60.0
# A shard failover's transaction must outlive the kill and the take-over (the SDK's
# default of 60 s would abort it on a loaded machine before the run gives up).
SHARD_TXN_TIMEOUT_MS = int(FAILOVER_GIVE_UP_S * 2 * 1000)
PHASES = ("throughput", "latency", "failover", "shard-failover")
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Policy:
    """A namespace's persistence policy: ensemble, write quorum, ack quorum."""

    ensemble: int
    write_quorum: int
    ack_quorum: int

    def body(self) -> bytes:
        return json.dumps(
            {
                "bookkeeperEnsemble": self.ensemble,
                "bookkeeperWriteQuorum": self.write_quorum,
                "bookkeeperAckQuorum": self.ack_quorum,
            }
        ).encode()

    @property
    def text(self) -> str:
        return f"{self.ensemble}/{self.write_quorum}/{self.ack_quorum}"


POLICIES = {REPLICATED: Policy(3, 3, 2), ONE_COPY: Policy(1, 1, 1)}


def set_persistence(broker: BrokerProcess, namespace: str, policy: Policy) -> None:
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/namespaces/{namespace}/persistence",
        policy.body(),
        {"Content-Type": "application/json", "X-Stableline-Request": "bench"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status != 204:
            raise RuntimeError(f"set persistence of {namespace}: HTTP {response.status}")


def percentiles_ms(samples: list[float]) -> dict:
    """p50/p99/max of durations in seconds, in ms (p99: the sample at or above 99%)."""
    ordered = sorted(samples)
    if not ordered:
        return {"count": 0}
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1e3, 1),
        "p99_ms": round(p99 * 1e3, 1),
        "max_ms": round(ordered[-1] * 1e3, 1),
    }


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


# ---------------------------------------------------------------- 1. throughput


def perf_run(
    label: str,
    brokers: list[BrokerProcess],
    etcd_pid: int,
    topic: str,
    seconds: float,
    subscriptions: int,
    rate: float = 0.0,
) -> dict:
    """One perf run on `topic` (placed first, off the clock); its rate and the
    brokers' CPU per message."""
    workload = perf.Workload(
        service_url=seeds(brokers, 0),
        topic=topic,
        subscriptions=subscriptions,
        duration_s=seconds,
        rate=rate,
    )
    placed = place_topics(brokers, [topic])
    sampler = CpuSampler(brokers, etcd_pid)
    result = perf.run(workload, out=lambda line: progress(f"  {label}: {line}"), broker_cpu=sampler)
    if not result["checks"]["ok"]:
        raise RuntimeError(f"{label}: consistency checks failed: {result['checks']}")
    side = result["consumed"] if subscriptions else result["produced"]
    spent = sampler.spent()
    messages = side["messages"]
    row = {
        "owner": next(target for target, count in placed.items() if count),
        "msgs_per_s": side["msgs_per_s"],
        "messages": messages,
        "broker_cpu_us_per_msg": [round(cpu * 1e6 / messages, 3) for cpu in spent["brokers"]],
        "broker_cpu_us_per_msg_total": round(sum(spent["brokers"]) * 1e6 / messages, 3),
        "etcd_cpu_us_per_msg": round(spent["etcd"] * 1e6 / messages, 3),
        "publish_latency": result["produced"]["publish_latency"],
    }
    if subscriptions:
        row["e2e_latency"] = result["consumed"]["e2e_latency"]
    progress(
        f"{label}: {row['msgs_per_s']:,} msgs/s, brokers {row['broker_cpu_us_per_msg']} us/msg"
    )
    return row


def summary(runs: list[dict]) -> dict:
    """The median of runs' figures, with every run kept."""
    return {
        "msgs_per_s": round(median_of(runs, "msgs_per_s")),
        "broker_cpu_us_per_msg_total": round(median_of(runs, "broker_cpu_us_per_msg_total"), 3),
        "broker_cpu_us_per_msg": [
            round(statistics.median(each), 3)
            for each in zip(*(run["broker_cpu_us_per_msg"] for run in runs), strict=True)
        ],
        "runs": runs,
    }


def bench_throughput(args, brokers, etcd_pid: int, namespaces: dict[str, str]) -> dict:
    result = {}
    for kind, subscriptions in (("publish", 0), ("e2e", 1)):
        runs: dict[str, list[dict]] = {name: [] for name in POLICIES}
        for index, name in enumerate(in_turn(list(POLICIES), args.rounds)):
            topic = f"persistent://{namespaces[name]}/{kind}-{index}"
            label = f"{kind}-{POLICIES[name].text}-{index}"
            runs[name].append(
                perf_run(label, brokers, etcd_pid, topic, args.seconds, subscriptions)
            )
        result[kind] = {name: summary(rows) for name, rows in runs.items()}
        ratio = result[kind][REPLICATED]["msgs_per_s"] / result[kind][ONE_COPY]["msgs_per_s"]
        progress(f"{kind}: replicated / one copy = {ratio:.2f}")
    return result


# ---------------------------------------------------------------- 2. latency


def bench_latency(
    args, brokers, etcd_pid: int, namespaces: dict[str, str], rate: float, label: str = ""
) -> dict:
    """Each policy's publish latency at `rate`: the median of its runs' percentiles."""
    runs: dict[str, list[dict]] = {name: [] for name in POLICIES}
    for index, name in enumerate(in_turn(list(POLICIES), args.latency_rounds)):
        topic = f"persistent://{namespaces[name]}/latency{label}-{index}"
        tag = f"latency{label}-{POLICIES[name].text}-{index}"
        run = perf_run(tag, brokers, etcd_pid, topic, args.latency_seconds, 0, rate=rate)
        runs[name].append({**run["publish_latency"], "msgs_per_s": run["msgs_per_s"]})
        progress(f"{tag}: {json.dumps(runs[name][-1])}")
    result: dict = {"rate": rate}
    for name, rows in runs.items():
        result[name] = {
            key: round(median_of(rows, key), 3)
            for key in ("p50_ms", "p99_ms", "p99.9_ms", "max_ms", "msgs_per_s")
        }
        result[name]["runs"] = rows
    return result


def memory_backed_root() -> Path | None:
    """A directory on a memory-backed file system, or None where there is none."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return Path(tempfile.mkdtemp(prefix="bench-replication-", dir=shm))


def bench_latency_in_memory(args, etcd_pid: int, etcd_url: str, rate: float) -> dict | None:
    """bench_latency on three more brokers whose data dirs are in memory (None when
    this machine has no memory-backed file system)."""
    root = memory_backed_root()
    if root is None:
        progress("no /dev/shm: no latency run on memory-backed data dirs")
        return None
    try:
        cluster = f"replication-memory-{os.getpid()}"
        with brokers_running(root, BROKERS, etcd_url, cluster) as brokers:
            namespaces = {
                name: f"public/{name.replace('_', '-')}-memory-{os.getpid()}" for name in POLICIES
            }
            for name, policy in POLICIES.items():
                set_persistence(brokers[0], namespaces[name], policy)
            return bench_latency(args, brokers, etcd_pid, namespaces, rate, "-memory")
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- 3. failover


async def first_send(service_url: str, topic: str, give_up_s: float) -> tuple[float, int]:
    """Fresh clients on `service_url` try to send one message to `topic` until one is
    acknowledged: when it was (monotonic) and the tries it took."""
    started = monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            async with Client(service_url, operation_timeout_seconds=ATTEMPT_TIMEOUT_S) as client:
                producer = await client.create_producer(topic)
                await producer.send(MESSAGE)
                return monotonic(), tries
        except (StableLineError, TimeoutError) as error:
            if monotonic() - started > give_up_s:
                raise RuntimeError(f"{topic}: no send acknowledged in {give_up_s} s") from error
        await asyncio.sleep(RETRY_PAUSE_S)


async def recorded_leader(etcd_url: str, path: str) -> str:
    """The broker id (its gRPC address) an ownership record in etcd names leader."""
    store = await open_metadata_store(etcd_url)
    try:
        record = await store.get(path)
        if record is None:
            raise RuntimeError(f"no ownership record at {path}")
        return json.loads(record.value)["leader"]
    finally:
        await store.close()


async def topic_leader(etcd_url: str, cluster: str, topic: str) -> str:
    """The broker id (its gRPC address) leading `topic`, from its ownership record."""
    local = topic.removeprefix("persistent://")
    return await recorded_leader(etcd_url, f"/stableline/ownership/{cluster}/topics/{local}")


async def bench_failover(
    args, brokers: list[BrokerProcess], etcd_url: str, cluster: str, namespace: str
) -> dict:
    """The kills, in one event loop (gRPC's channels belong to the loop they were
    made on); the brokers' own kill and restart block it, nothing else runs then."""
    unavailable, fresh, tries, restarts = [], [], [], []
    killed: dict[str, int] = {broker.target: 0 for broker in brokers}
    for kill in range(args.kills):
        topic = f"persistent://{namespace}/failover-{kill}"
        # Placed and written (the broker restarted after the last kill may still be
        # joining: placement needs all three), then one timed first send of a fresh
        # client while nothing fails: the baseline.
        await first_send(seeds(brokers, 0), topic, FAILOVER_GIVE_UP_S)
        began = monotonic()
        acknowledged, _ = await first_send(seeds(brokers, 0), topic, FAILOVER_GIVE_UP_S)
        fresh.append(acknowledged - began)
        if fresh[-1] > 1:
            progress(f"failover {kill + 1}: a first send, nothing killed, took {fresh[-1]:.2f} s")
        leader_id = await topic_leader(etcd_url, cluster, topic)
        (leader,) = [broker for broker in brokers if broker.target == leader_id]
        live = [broker for broker in brokers if broker is not leader]
        began = monotonic()
        leader.kill()
        acknowledged, attempts = await first_send(seeds(live, 0), topic, FAILOVER_GIVE_UP_S)
        took = acknowledged - began
        new_leader = await topic_leader(etcd_url, cluster, topic)
        unavailable.append(took)
        tries.append(attempts)
        killed[leader_id] += 1
        progress(
            f"failover {kill + 1}/{args.kills}: killed {leader_id}, first send acknowledged "
            f"{took:.2f} s later by {new_leader} ({attempts} tries)"
        )
        restarted = monotonic()
        leader.start()
        restarts.append(monotonic() - restarted)
    return {
        "kills": args.kills,
        "kill_to_first_ack": percentiles_ms(unavailable),
        "fresh_client_first_send": percentiles_ms(fresh),
        "kills_per_broker": killed,
        "tries": tries,
        "samples_s": [round(sample, 3) for sample in unavailable],
        "fresh_samples_s": [round(sample, 3) for sample in fresh],
        "restart_s": [round(sample, 2) for sample in restarts],
        "attempt_timeout_s": ATTEMPT_TIMEOUT_S,
    }


# ---------------------------------------------------------------- 4. shard failover


async def commit_after(txn, began: float) -> float:
    """Commit `txn`: the seconds from `began` (monotonic) to its answer."""
    async with asyncio.timeout(FAILOVER_GIVE_UP_S):
        await txn.commit()
    return monotonic() - began


async def taken_over(etcd_url: str, path: str, killed: str) -> float:
    """When (monotonic) the ownership record at `path` first names a leader other than
    `killed`, polled every RETRY_PAUSE_S."""
    store = await open_metadata_store(etcd_url)
    try:
        while True:
            record = await store.get(path)
            if record is not None and json.loads(record.value)["leader"] != killed:
                return monotonic()
            await asyncio.sleep(RETRY_PAUSE_S)
    finally:
        await store.close()


async def open_transaction(client: Client, topic: str):
    """A transaction holding one acknowledged send to `topic`."""
    producer = await client.create_producer(topic)
    txn = await client.new_transaction(timeout_ms=SHARD_TXN_TIMEOUT_MS)
    await producer.send(MESSAGE, txn=txn)
    return txn


async def bench_shard_failover(
    args, brokers: list[BrokerProcess], etcd_url: str, cluster: str, namespace: str
) -> dict:
    """The shard kills, in one event loop as bench_failover's. Each round a new client
    whose first address moves round the brokers: a broker asked for a transaction
    gives it a shard it leads, so the shards (and the kills) spread."""
    decided, taken, baseline, restarts = [], [], [], []
    killed: dict[str, int] = {broker.target: 0 for broker in brokers}
    shards: list[int] = []
    also_topic_owner = 0
    for kill in range(args.shard_kills):
        topic = f"persistent://{namespace}/shard-failover-{kill}"
        # Placed and written first: the broker restarted after the last kill may still
        # be joining, and a replicated topic is placed only on three live brokers.
        await first_send(seeds(brokers, 0), topic, FAILOVER_GIVE_UP_S)
        service_url = seeds(brokers, kill % len(brokers))
        async with Client(service_url, operation_timeout_seconds=FAILOVER_GIVE_UP_S) as client:
            unharmed = await open_transaction(client, topic)
            baseline.append(await commit_after(unharmed, monotonic()))
            txn = await open_transaction(client, topic)
            shard = txn.id[0]
            record_path = shard_path(cluster, shard)
            leader_id = await recorded_leader(etcd_url, record_path)
            (leader,) = [broker for broker in brokers if broker.target == leader_id]
            # The topic's owner killed too makes its own failover part of the commit.
            owns_topic = await topic_leader(etcd_url, cluster, topic) == leader_id
            began = monotonic()
            leader.kill()
            # Beside the commit: when another broker took the shard, so the figure can
            # be split into the take-over and the client's retries after it.
            watching = asyncio.create_task(taken_over(etcd_url, record_path, leader_id))
            try:
                took = await commit_after(txn, began)
                async with asyncio.timeout(FAILOVER_GIVE_UP_S):
                    taken.append(await watching - began)
            except (StableLineError, TimeoutError) as error:
                raise RuntimeError(
                    f"shard failover {kill + 1}: the commit failed after {leader_id} was "
                    f"killed ({monotonic() - began:.1f} s): {error!r}"
                ) from error
            finally:
                watching.cancel()
        new_leader = await recorded_leader(etcd_url, record_path)
        decided.append(took)
        shards.append(shard)
        killed[leader_id] += 1
        also_topic_owner += owns_topic
        progress(
            f"shard failover {kill + 1}/{args.shard_kills}: killed {leader_id} (shard {shard}"
            f"{', and the topic' if owns_topic else ''}), shard taken {taken[-1]:.2f} s and "
            f"commit answered {took:.2f} s later, shard now on {new_leader}"
        )
        restarted = monotonic()
        leader.start()
        restarts.append(monotonic() - restarted)
    return {
        "kills": args.shard_kills,
        "kill_to_decided": percentiles_ms(decided),
        "kill_to_shard_taken": percentiles_ms(taken),
        "commit_nothing_killed": percentiles_ms(baseline),
        "kills_per_broker": killed,
        "shards": shards,
        "killed_topic_owner_too": also_topic_owner,
        "samples_s": [round(sample, 3) for sample in decided],
        "taken_samples_s": [round(sample, 3) for sample in taken],
        "baseline_samples_s": [round(sample, 3) for sample in baseline],
        "restart_s": [round(sample, 2) for sample in restarts],
    }


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each policy, alternated")
    parser.add_argument("--latency-seconds", type=float, default=8.0, help="each latency run")
    parser.add_argument(
        "--latency-rounds", type=int, default=3, help="latency runs of each policy, alternated"
    )
    parser.add_argument("--kills", type=int, default=20, help="failovers timed")
    parser.add_argument(
        "--shard-kills", type=int, default=20, help="coordinator shard failovers timed"
    )
    parser.add_argument("--only", default=",".join(PHASES), help="of " + ", ".join(PHASES))
    parser.add_argument("--dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    wanted = {part.strip() for part in args.only.split(",")}
    if not wanted <= set(PHASES):
        parser.error(f"--only: unknown {', '.join(sorted(wanted - set(PHASES)))}")
    if "latency" in wanted:
        wanted.add("throughput")  # its rate is half the replicated publish rate
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "brokers": BROKERS,
        "policies": {name: policy.text for name, policy in POLICIES.items()},
        "message_size": len(MESSAGE),
        "load_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-replication-", dir=args.dir) as scratch:
        root = Path(scratch)
        etcd = start_etcd(root)
        result["etcd"] = etcd is not None
        if etcd is None:
            progress("no etcd on PATH (Debian: etcd-server): nothing to measure")
            return finish(result, _STARTED, args.json)
        process, etcd_url = etcd
        cluster = f"replication-{os.getpid()}"
        try:
            with brokers_running(root, BROKERS, etcd_url, cluster) as brokers:
                namespaces = {
                    name: f"public/{name.replace('_', '-')}-{os.getpid()}" for name in POLICIES
                }
                for name, policy in POLICIES.items():
                    set_persistence(brokers[0], namespaces[name], policy)
                if "throughput" in wanted:
                    result["throughput"] = bench_throughput(args, brokers, process.pid, namespaces)
                if "latency" in wanted:
                    rate = result["throughput"]["publish"][REPLICATED]["msgs_per_s"] // 2
                    result["latency"] = bench_latency(args, brokers, process.pid, namespaces, rate)
                if wanted & {"failover", "shard-failover"}:
                    # The brokers' own: this script sets no session timeout.
                    result["session_timeout_s"] = float(
                        os.environ.get(
                            "STABLELINE_METADATA_SESSION_TIMEOUT_S",
                            BrokerConfig().metadata_session_timeout_s,
                        )
                    )
                if "failover" in wanted:
                    result["failover"] = asyncio.run(
                        bench_failover(args, brokers, etcd_url, cluster, namespaces[REPLICATED])
                    )
                if "shard-failover" in wanted:
                    result["shard_failover"] = asyncio.run(
                        bench_shard_failover(
                            args, brokers, etcd_url, cluster, namespaces[REPLICATED]
                        )
                    )
            if "latency" in wanted:
                result["latency_in_memory"] = bench_latency_in_memory(
                    args, process.pid, etcd_url, result["latency"]["rate"]
                )
        finally:
            process.terminate()
            process.wait()
    result["load_after"] = os.getloadavg()
    return finish(result, _STARTED, args.json)


if __name__ == "__main__":
    sys.exit(main())
