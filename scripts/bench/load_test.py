"""Load test: many topics, subscriptions and clients on one broker, for a bounded time.

Defaults are the full run: 1,000 topics, 10 subscriptions each (10,000; even ones
READ_COMMITTED, odd ones READ_UNCOMMITTED), 200 clients (asyncio clients spread
over a few worker processes: the machine has 2 cores), producing and consuming for
--seconds. Each client owns topics/clients topics: one producer and every
subscription's consumer for each. Checks, and exits non-zero when one fails:

- nothing lost: every acknowledged message is received by every subscription of
  its topic (after the timed phase the consumers drain, with a deadline);
- the broker's RSS (sampled every second) stays within --max-rss-mb.

Reports msgs/s in and out, the time to create the topics and subscriptions, the
time a restarted broker takes to load them all, and RSS over time (peak, end).

    .venv/bin/python scripts/bench/load_test.py                       # the full run
    .venv/bin/python scripts/bench/load_test.py --topics 20 --subscriptions-per-topic 5 \\
        --clients 10 --processes 2 --seconds 10 --max-rss-mb 400  # a tiny one
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stableline.testing import temporary_broker  # noqa: E402

PROGRESS_EVERY_S = 5.0
DRAIN_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class Plan:
    service_url: str
    topics: int
    subscriptions_per_topic: int
    clients: int
    seconds: float
    messages_per_tick: int
    tick_s: float

    def topics_of(self, client: int) -> list[int]:
        return list(range(client, self.topics, self.clients))


@dataclass(slots=True)
class WorkerReport:
    """What one worker process has done so far; the last one sent is its result."""

    worker: int
    ready: bool = False
    setup_s: float = 0.0
    sent: int = 0  # messages acknowledged by the broker
    received: int = 0  # deliveries to consumers (a message counts once per subscription)
    expected: int = 0  # acknowledged messages x subscriptions of their topics
    missing: int = 0  # of those, not received (after the drain)
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)
    done: bool = False


def topic_name(index: int) -> str:
    return f"persistent://public/load/topic-{index:04d}"


# ---------------------------------------------------------------- worker processes


class TopicLoad:
    """One topic's producer, its consumers, and what each has seen."""

    def __init__(self, index: int, subscriptions: int):
        self.index = index
        self.acked: list[int] = []  # sequence numbers the broker acknowledged
        self.received = [bytearray() for _ in range(subscriptions)]  # seq -> times seen
        self.duplicates = 0
        self.producer = None
        self.consumers: list = []

    def record(self, subscription: int, sequence: int) -> None:
        seen = self.received[subscription]
        if sequence >= len(seen):
            seen.extend(bytes(sequence - len(seen) + 1024))
        if seen[sequence]:
            self.duplicates += 1
        seen[sequence] = min(seen[sequence] + 1, 255)

    def missing(self) -> int:
        return sum(
            1
            for seen in self.received
            for sequence in self.acked
            if sequence >= len(seen) or not seen[sequence]
        )


async def run_worker(plan: Plan, worker: int, clients: list[int], reports) -> None:
    from stableline import aio
    from stableline._types import ConsumerType, InitialPosition, IsolationLevel

    report = WorkerReport(worker)
    loads: list[TopicLoad] = []
    connections = []
    tasks: list[asyncio.Task] = []
    stop_producing = asyncio.Event()
    started = time.monotonic()

    async def open_topic(client, index: int) -> TopicLoad:
        load = TopicLoad(index, plan.subscriptions_per_topic)
        name = topic_name(index)
        load.producer = await client.create_producer(
            name, batching_max_messages=plan.messages_per_tick, batching_max_publish_delay_ms=5
        )
        for subscription in range(plan.subscriptions_per_topic):
            level = (
                IsolationLevel.READ_COMMITTED
                if subscription % 2 == 0
                else IsolationLevel.READ_UNCOMMITTED
            )
            load.consumers.append(
                await client.subscribe(
                    name,
                    f"sub-{subscription}",
                    consumer_type=ConsumerType.Exclusive,
                    initial_position=InitialPosition.Earliest,
                    isolation_level=level,
                    receiver_queue_size=100,
                )
            )
        return load

    async def produce(load: TopicLoad) -> None:
        sequence = 0
        while not stop_producing.is_set():
            tick = time.monotonic()
            receipts = []
            for _ in range(plan.messages_per_tick):
                receipts.append(
                    (sequence, load.producer.send_nowait(b"%d:%d" % (load.index, sequence)))
                )
                sequence += 1
            for number, receipt in receipts:
                await receipt
                load.acked.append(number)
            report.sent += len(receipts)
            remaining = plan.tick_s - (time.monotonic() - tick)
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop_producing.wait(), remaining)

    async def consume(load: TopicLoad, subscription: int) -> None:
        consumer = load.consumers[subscription]
        while True:
            messages = await consumer.batch_receive(max_num_messages=100, timeout_millis=1000)
            if not len(messages):
                continue
            for message in messages:
                topic, _, sequence = message.data().partition(b":")
                assert int(topic) == load.index, f"topic {load.index} got {message.data()!r}"
                load.record(subscription, int(sequence))
            report.received += len(messages)
            await consumer.acknowledge(messages)

    async def send_progress() -> None:
        while True:
            reports.put(asdict(report))
            await asyncio.sleep(1.0)

    progress = asyncio.create_task(send_progress())
    try:
        # Clients set up in turn, topics within a client at once: the broker sees
        # len(clients) x topics-per-client topic loads spread over this phase.
        for number in clients:
            client = aio.Client(plan.service_url)
            connections.append(client)
            loads += await asyncio.gather(
                *[open_topic(client, index) for index in plan.topics_of(number)]
            )
        report.setup_s = time.monotonic() - started
        report.ready = True
        reports.put(asdict(report))
        for load in loads:
            tasks.append(asyncio.create_task(consume_all(load, consume)))
        producers = [asyncio.create_task(produce(load)) for load in loads]
        await asyncio.sleep(plan.seconds)
        stop_producing.set()
        await asyncio.gather(*producers)
        # Drain: every acknowledged message to every subscription, with a deadline.
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            report.missing = sum(load.missing() for load in loads)
            if report.missing == 0:
                break
            await asyncio.sleep(0.5)
        report.expected = sum(len(load.acked) for load in loads) * plan.subscriptions_per_topic
        report.duplicates = sum(load.duplicates for load in loads)
    except Exception as error:  # reported, and the run fails
        report.errors.append(f"{type(error).__name__}: {error}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in connections:
            try:
                await client.close()
            except Exception as error:
                report.errors.append(f"close: {error}")
        progress.cancel()
        report.done = True
        reports.put(asdict(report))


async def consume_all(load: TopicLoad, consume) -> None:
    await asyncio.gather(*[consume(load, s) for s in range(len(load.consumers))])


def worker_main(plan: Plan, worker: int, clients: list[int], reports) -> None:
    asyncio.run(run_worker(plan, worker, clients, reports))


# ---------------------------------------------------------------- the parent


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--subscriptions-per-topic", type=int, default=10)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--messages-per-tick", type=int, default=5, help="per topic")
    parser.add_argument("--tick-s", type=float, default=1.0)
    parser.add_argument("--max-rss-mb", type=float, default=1024.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--data-parent", type=Path, default=REPO / "bench-results")
    args = parser.parse_args()
    if args.clients > args.topics:
        parser.error("each client needs a topic: --clients must be <= --topics")

    figures: dict = {
        "topics": args.topics,
        "subscriptions": args.topics * args.subscriptions_per_topic,
        "clients": args.clients,
        "processes": args.processes,
        "seconds": args.seconds,
        "max_rss_mb": args.max_rss_mb,
    }
    failures: list[str] = []
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", flush=True)

    with temporary_broker(args.data_parent, "load-test-") as broker:
        pid = broker.process.pid
        plan = Plan(
            broker.service_url,
            args.topics,
            args.subscriptions_per_topic,
            args.clients,
            args.seconds,
            args.messages_per_tick,
            args.tick_s,
        )
        say(f"broker on {broker.service_url}, RSS {rss_mb(pid):.0f} MB; {figures}")
        context = multiprocessing.get_context("spawn")
        reports = context.Queue()
        workers = [
            context.Process(
                target=worker_main,
                args=(plan, w, list(range(w, args.clients, args.processes)), reports),
                daemon=True,
            )
            for w in range(args.processes)
        ]
        for process in workers:
            process.start()
        latest: dict[int, dict] = {}
        samples: list[tuple[float, float]] = []
        setup_done_at = None
        last_progress = 0.0
        last_totals = (time.monotonic(), 0, 0)
        rates: list[tuple[float, float]] = []
        while not (len(latest) == args.processes and all(r["done"] for r in latest.values())):
            while not reports.empty():
                report = reports.get()
                latest[report["worker"]] = report
            now = time.monotonic()
            if samples == [] or now - samples[-1][0] - started >= 1.0:
                samples.append((now - started, rss_mb(pid)))
            ready = len(latest) == args.processes and all(r["ready"] for r in latest.values())
            if ready and setup_done_at is None:
                setup_done_at = now
                figures["setup_s"] = round(now - started, 1)
                figures["rss_after_setup_mb"] = round(samples[-1][1], 1)
                say(f"all topics and subscriptions open; RSS {samples[-1][1]:.0f} MB")
            if setup_done_at is None and now - started > SETUP_TIMEOUT_S:
                failures.append(f"setup took over {SETUP_TIMEOUT_S:.0f} s")
                break
            if now - last_progress >= PROGRESS_EVERY_S:
                sent = sum(r["sent"] for r in latest.values())
                received = sum(r["received"] for r in latest.values())
                then, sent_before, received_before = last_totals
                rate_in = (sent - sent_before) / (now - then)
                rate_out = (received - received_before) / (now - then)
                if setup_done_at is not None and sent:
                    rates.append((rate_in, rate_out))
                say(
                    f"sent {sent:,} ({rate_in:,.0f}/s), delivered {received:,} "
                    f"({rate_out:,.0f}/s), broker RSS {samples[-1][1]:.0f} MB, "
                    f"workers ready {sum(r['ready'] for r in latest.values())}/{args.processes}"
                )
                last_progress, last_totals = now, (now, sent, received)
            if any(not p.is_alive() and p.exitcode not in (0, None) for p in workers):
                failures.append("a worker process died")
                break
            time.sleep(0.2)
        for process in workers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        results = list(latest.values())
        figures["messages_acknowledged"] = sum(r["sent"] for r in results)
        figures["deliveries"] = sum(r["received"] for r in results)
        figures["deliveries_expected"] = sum(r["expected"] for r in results)
        figures["lost"] = sum(r["missing"] for r in results)
        figures["duplicates"] = sum(r["duplicates"] for r in results)
        figures["client_setup_s_max"] = round(max((r["setup_s"] for r in results), default=0), 1)
        steady = rates[1:-1] or rates
        figures["msgs_in_per_s"] = round(sum(r[0] for r in steady) / max(len(steady), 1))
        figures["msgs_out_per_s"] = round(sum(r[1] for r in steady) / max(len(steady), 1))
        figures["rss_peak_mb"] = round(max(rss for _, rss in samples), 1)
        figures["rss_end_mb"] = round(samples[-1][1], 1)
        figures["rss_samples"] = [
            (round(t, 1), round(r, 1)) for t, r in samples[:: max(1, len(samples) // 60)]
        ]
        for report in results:
            failures += [f"worker {report['worker']}: {e}" for e in report["errors"]]

        say("restarting the broker to time loading every topic and subscription")
        restart_started = time.monotonic()
        broker.restart()
        figures["restart_load_s"] = round(time.monotonic() - restart_started, 1)
        figures["rss_after_restart_mb"] = round(rss_mb(broker.process.pid), 1)

    if figures["lost"]:
        failures.append(f"{figures['lost']} acknowledged deliveries never arrived")
    if figures["deliveries_expected"] == 0:
        failures.append("nothing was acknowledged")
    if figures["rss_peak_mb"] > args.max_rss_mb:
        failures.append(
            f"broker RSS peaked at {figures['rss_peak_mb']} MB, over the {args.max_rss_mb} MB bound"
        )
    figures["failures"] = failures
    summary = {k: v for k, v in figures.items() if k != "rss_samples"}
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    if failures:
        print("FAILED: " + "; ".join(failures), flush=True)
        return 1
    print("load test passed", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
