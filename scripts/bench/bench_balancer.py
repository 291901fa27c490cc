"""The balancer's worth: the aggregate end-to-end rate of six busy topics on three
brokers, started all on one broker, with the balancer on, against the same start
with it off and against an even start.

Three real broker processes (stableline.testing.BrokerProcess) per configuration,
one etcd started here from PATH (Debian's etcd-server), the topics 3/3/2. The six
topics are placed first (placement deals them out 2/2/2); for a skewed start each
is then transferred to the first broker (`POST .../transfer?broker=`). Then one
`stableline perf` run (a batched producer and a READ_COMMITTED subscription on each
topic, 100-byte messages) for `--seconds`; its rate is the run's whole, the seconds
before the balancer's moves included. The balancer reports every
`--report-interval` s and acts after two overloaded reports (otherwise its
defaults). Each configuration's leaders at the end and the moves made are kept.
Configurations run forth and back (`--rounds`), each figure the mean of its runs.

Each broker is one Python process (one core at most for its own work): on this
machine's cores, six topics on one broker are bound by that one process, and the
balancer's spreading lets the others' processes take their share.

    python scripts/bench/bench_balancer.py [--seconds 30] [--rounds 2]
        [--report-interval 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_cluster import brokers_running, place_topics, progress, seeds
from bench_metadata import start_etcd  # scripts/ is on the path of a script
from results_file import finish

from stableline import perf
from stableline.metadata import open_metadata_store
from stableline.topic_name import TopicName

REPO = Path(__file__).resolve().parents[2]
TOPICS = 6
CONFIGURATIONS = ("even", "skewed_balancer_off", "skewed_balancer_on")
_STARTED = time.perf_counter()


def leaders(etcd_url: str, cluster: str, topics: list[str]) -> dict[str, str]:
    async def read() -> dict[str, str]:
        store = await open_metadata_store(etcd_url)
        try:
            found = {}
            for topic in topics:
                local = TopicName.parse(topic)
                path = (
                    f"/stableline/ownership/{cluster}/topics/"
                    f"{local.tenant}/{local.namespace}/{local.local_name}"
                )
                result = await store.get(path)
                found[topic] = json.loads(result.value)["leader"] if result else ""
            return found
        finally:
            await store.close()

    return asyncio.run(read())


def transfer(broker_http_url: str, topic: str, to: str) -> None:
    name = TopicName.parse(topic)
    path = f"/admin/v2/persistent/{name.tenant}/{name.namespace}/{name.local_name}/transfer"
    request = urllib.request.Request(
        f"{broker_http_url}{path}?broker={to}",
        method="POST",
        headers={"X-Stableline-Request": "bench"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()


def run(configuration: str, root: Path, etcd_url: str, seconds: float, interval: float) -> dict:
    cluster = f"{configuration}-{os.getpid()}-{time.monotonic_ns()}"
    env = {
        "STABLELINE_LOAD_REPORT_INTERVAL_S": str(interval),
        "STABLELINE_LOAD_BALANCER_CONSECUTIVE_REPORTS": "2",
        "STABLELINE_LOAD_BALANCER_ENABLED": str(configuration != "skewed_balancer_off").lower(),
    }
    with brokers_running(root, 3, etcd_url, cluster, env) as brokers:
        workload = perf.Workload(
            service_url=seeds(brokers, 0), topic=configuration, topics=TOPICS, duration_s=seconds
        )
        topics = [f"persistent://public/default/{name}" for name in workload.topic_names()]
        place_topics(brokers, workload.topic_names())
        by_id = {broker.target: broker for broker in brokers}
        if configuration.startswith("skewed"):
            hot = brokers[0].target
            for topic, leader in leaders(etcd_url, cluster, topics).items():
                if leader != hot:
                    transfer(by_id[leader].http_url, topic, hot)
        before = leaders(etcd_url, cluster, topics)
        result = perf.run(workload, out=lambda line: progress(f"  {configuration}: {line}"))
        checks = result["checks"]
        # A move may deliver again what a consumer had not had acknowledged yet
        # (at-least-once, as Pulsar's unload): counted, not fatal. Anything lost is.
        if checks.get("missing") or checks.get("rc_received_aborted") or checks.get("wrong_size"):
            raise RuntimeError(f"{configuration}: consistency checks failed: {checks}")
        after = leaders(etcd_url, cluster, topics)
    row = {
        "msgs_per_s": result["consumed"]["msgs_per_s"],
        "e2e_p99_ms": result["consumed"]["e2e_latency"].get("p99_ms"),
        "topics_per_broker_before": _count(before),
        "topics_per_broker_after": _count(after),
        "moves": sum(1 for topic in topics if before[topic] != after[topic]),
        "delivered_again": checks.get("duplicates", 0),
    }
    progress(f"{configuration}: {json.dumps(row)}")
    return row


def _count(leaders_of: dict[str, str]) -> list[int]:
    counts: dict[str, int] = {}
    for leader in leaders_of.values():
        counts[leader] = counts.get(leader, 0) + 1
    return sorted(counts.values(), reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="each perf run")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, forth and back")
    parser.add_argument("--report-interval", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"topics": TOPICS, "seconds": args.seconds, "load_before": os.getloadavg()}
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGURATIONS}
    with tempfile.TemporaryDirectory(prefix="bench-balancer-", dir=args.dir) as scratch:
        root = Path(scratch)
        etcd = start_etcd(root)
        result["etcd"] = etcd is not None
        if etcd is None:
            progress("no etcd on PATH (Debian: etcd-server): nothing to measure")
            return finish(result, _STARTED, args.json)
        try:
            for round_ in range(args.rounds):
                order = CONFIGURATIONS if round_ % 2 == 0 else tuple(reversed(CONFIGURATIONS))
                for configuration in order:
                    runs[configuration].append(
                        run(configuration, root, etcd[1], args.seconds, args.report_interval)
                    )
        finally:
            etcd[0].terminate()
            etcd[0].wait()
    result["runs"] = runs
    result["msgs_per_s"] = {
        name: round(statistics.mean(row["msgs_per_s"] for row in rows))
        for name, rows in runs.items()
    }
    even = result["msgs_per_s"]["even"]
    result["vs_even"] = {name: round(rate / even, 3) for name, rate in result["msgs_per_s"].items()}
    result["load_after"] = os.getloadavg()
    print(json.dumps({key: result[key] for key in ("msgs_per_s", "vs_even")}))
    return finish(result, _STARTED, args.json)


if __name__ == "__main__":
    sys.exit(main())
