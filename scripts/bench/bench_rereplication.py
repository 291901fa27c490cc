"""Re-replication's rate at the throttle, and what it costs clients: three brokers on one etcd.

Three broker processes on one etcd started here from PATH, each with
`rereplication_rate_bytes_per_s` = `--rate-mb` MiB/s. A namespace keeping two copies
(2/2/1), so the third broker is free to take one.

1. fill: a topic gets `--fill-mb` MB of 10 kB messages (`stableline perf`, at the
   rate that spreads them over `--fill-seconds`), its stored size read from its stats.
2. alone: a publish-only perf run of `--seconds` on another topic of the namespace:
   the clients' msgs/s with nothing else going on.
3. during: the filled topic's member that does not lead it is decommissioned
   (`POST /admin/v2/brokers/{id}/decommission`), so its writer sends the third
   broker every ledger, at the throttle; at once the same publish-only run on a third
   topic. Measured: from the decommission to the record counting the new copy (no
   member still being made, the drained one out of the ensemble), and the clients'
   msgs/s meanwhile. The copy's MB/s is the filled topic's stored bytes over that time.

    python scripts/bench/bench_rereplication.py [--rate-mb 20] [--fill-mb 200]
        [--fill-seconds 5] [--seconds 4] [--json PATH]

Without an etcd on PATH nothing can be measured: the script says so and its JSON
has `"etcd": false`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench_cluster import brokers_running, place_topics, seeds
from bench_metadata import etcd_in_scratch  # scripts/ is on the path of a script
from bench_replication import Policy, set_persistence
from results_file import finish

from stableline import perf
from stableline.metadata import open_metadata_store
from stableline.testing import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
BROKERS = 3
TWO_COPIES = Policy(2, 2, 1)
FILL_MESSAGE_SIZE = 10_000
# The copy must be made within this, else the run fails.
GIVE_UP_S = 600.0
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {message}", flush=True)


def request(broker: BrokerProcess, path: str, method: str = "GET"):
    call = urllib.request.Request(
        broker.http_url + path, None, {"X-Stableline-Request": "bench"}, method=method
    )
    with urllib.request.urlopen(call, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def record_of(etcd_url: str, cluster: str, topic: str) -> dict:
    import asyncio

    async def read() -> dict:
        store = await open_metadata_store(etcd_url)
        try:
            local = topic.removeprefix("persistent://")
            result = await store.get(f"/stableline/ownership/{cluster}/topics/{local}")
            assert result is not None, topic
            return json.loads(result.value)
        finally:
            await store.close()

    return asyncio.run(read())


def publish_run(
    brokers, topic: str, seconds: float, message_size: int = 100, rate: float = 0.0
) -> dict:
    workload = perf.Workload(
        service_url=seeds(brokers, 0),
        topic=topic,
        subscriptions=0,
        duration_s=seconds,
        message_size=message_size,
        rate=rate,
    )
    place_topics(brokers, [topic])
    result = perf.run(workload, out=lambda line: None)
    if not result["checks"]["ok"]:
        raise RuntimeError(f"{topic}: consistency checks failed: {result['checks']}")
    return result["produced"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-mb", type=float, default=20.0, help="the throttle, MiB/s")
    parser.add_argument("--fill-mb", type=float, default=200.0, help="the topic's size, MB")
    parser.add_argument("--fill-seconds", type=float, default=5.0, help="the topic's filling")
    parser.add_argument("--seconds", type=float, default=4.0, help="each client run")
    parser.add_argument("--dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rate = int(args.rate_mb * 1024 * 1024)
    result: dict = {
        "brokers": BROKERS,
        "policy": TWO_COPIES.text,
        "rate_limit_bytes_per_s": rate,
        "load_before": os.getloadavg(),
    }
    args.dir.mkdir(parents=True, exist_ok=True)
    with etcd_in_scratch(args.dir, "bench-rereplication-") as etcd:
        result["etcd"] = etcd is not None
        if etcd is None:
            progress("no etcd on PATH (Debian: etcd-server): nothing to measure")
            return finish(result, _STARTED, args.json)
        root, _etcd_pid, etcd_url = etcd
        cluster = f"rereplication-{os.getpid()}"
        env = {"STABLELINE_REREPLICATION_RATE_BYTES_PER_S": str(rate)}
        with brokers_running(root, BROKERS, etcd_url, cluster, env) as brokers:
            result.update(measure(args, brokers, etcd_url, cluster))
    result["load_after"] = os.getloadavg()
    return finish(result, _STARTED, args.json)


def measure(args, brokers: list[BrokerProcess], etcd_url: str, cluster: str) -> dict:
    namespace = f"public/two-copies-{os.getpid()}"
    set_persistence(brokers[0], namespace, TWO_COPIES)
    filled = f"persistent://{namespace}/filled"
    fill_rate = args.fill_mb * 1e6 / FILL_MESSAGE_SIZE / args.fill_seconds
    produced = publish_run(brokers, filled, args.fill_seconds, FILL_MESSAGE_SIZE, fill_rate)
    record = record_of(etcd_url, cluster, filled)
    by_id = {b.target: b for b in brokers}
    leader = by_id[record["leader"]]
    stats = request(leader, f"/admin/v2/persistent/{filled.removeprefix('persistent://')}/stats")
    stored = stats["storageSize"]
    progress(f"filled: {produced['messages']:,} messages, {stored / 1e6:.1f} MB stored")
    alone = publish_run(brokers, f"persistent://{namespace}/alone", args.seconds)
    progress(f"alone: {alone['msgs_per_s']:,} msgs/s")
    drained = next(m for m in record["ensemble"] if m != record["leader"])
    during: dict = {}

    def clients() -> None:
        during.update(publish_run(brokers, f"persistent://{namespace}/during", args.seconds))

    started = time.monotonic()
    request(brokers[0], f"/admin/v2/brokers/{drained}/decommission", "POST")
    runner = threading.Thread(target=clients, name="clients")
    runner.start()
    while True:
        now = record_of(etcd_url, cluster, filled)
        if drained not in now["ensemble"] and not any(
            d.startswith("copying:") for d in now["data_dirs"].values()
        ):
            break
        if time.monotonic() - started > GIVE_UP_S:
            raise RuntimeError(f"{filled}: its copy was not made within {GIVE_UP_S:g} s")
        time.sleep(0.05)  # a poll's period, not a wait standing in for an event
    took = time.monotonic() - started
    runner.join()
    progress(
        f"copied {stored / 1e6:.1f} MB in {took:.1f} s: {stored / took / 1e6:.1f} MB/s "
        f"(throttle {args.rate_mb:g} MiB/s); clients meanwhile {during['msgs_per_s']:,} msgs/s"
    )
    return {
        "copied_bytes": stored,
        "copy_seconds": round(took, 2),
        "copy_mb_per_s": round(stored / took / 1e6, 2),
        "client_msgs_per_s_alone": alone["msgs_per_s"],
        "client_msgs_per_s_during": during["msgs_per_s"],
        "client_ratio": round(during["msgs_per_s"] / alone["msgs_per_s"], 3),
    }


if __name__ == "__main__":
    sys.exit(main())
