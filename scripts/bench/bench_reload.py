"""A reloaded topic's drain against a topic that stayed loaded, in one broker run.

Two topics get the same messages (100 B, batched); a producer stays connected to
the warm one, so it is never unloaded, while the cold one sits idle until the
broker unloads it (`inactive_topic_unload_s` set short). Then an asyncio consumer
drains each from the earliest position, each in a process of its own: the cold
one's reads load the topic again and come from its ledger files, the warm one's
from a topic loaded all along. Rate = messages / (subscribe -> every ack sent).

`--rounds` rounds (median per topic); the order of the two drains swaps every
round, so a warm page cache or a slow spell favours neither. `cold_ratio` is
cold / warm of the medians, `worst_cold_ratio` the lowest per-round ratio.

    python scripts/bench/bench_reload.py [--messages N] [--rounds R] [--json PATH]
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

from stableline.testing import BrokerProcess, temporary_broker

MESSAGE_SIZE = 100
PAYLOAD = b"x" * MESSAGE_SIZE
UNLOAD_S = 1.0
UNLOAD_WAIT_S = 60.0


def topic_loaded(broker: BrokerProcess, topic: str) -> bool:
    """Whether the broker has `topic` loaded now (its per-topic stats list it)."""
    for bundles in broker.admin("/admin/v2/broker-stats/topics").values():
        for kinds in bundles.values():
            if any(name.endswith(f"/{topic}") for name in kinds.get("persistent", {})):
                return True
    return False


def wait_unloaded(broker: BrokerProcess, topic: str, timeout_s: float = UNLOAD_WAIT_S) -> float:
    """Seconds until the broker unloaded `topic`; raises after `timeout_s`."""
    started = time.monotonic()
    while topic_loaded(broker, topic):
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{topic} still loaded after {timeout_s} s")
        time.sleep(0.1)
    return time.monotonic() - started


async def _produce(url: str, topic: str, messages: int) -> None:
    from stableline import aio

    async with aio.Client(url) as client:
        producer = await client.create_producer(topic)
        receipts: collections.deque = collections.deque()
        for _ in range(messages):
            while producer.queue_full():
                await receipts.popleft()
            receipts.append(producer.send_nowait(PAYLOAD))
        await producer.flush()
        await asyncio.gather(*receipts)
        await producer.close()


async def _drain(url: str, topic: str, messages: int) -> float:
    from stableline import aio

    async with aio.Client(url) as client:
        started = time.perf_counter()
        consumer = await client.subscribe(
            topic, "drain", initial_position=aio.InitialPosition.Earliest
        )
        received = 0
        while received < messages:
            batch = await consumer.batch_receive(1000, 10_000)
            assert batch, f"{topic}: nothing within 10 s after {received} messages"
            received += len(batch)
            await consumer.acknowledge(batch)
        elapsed = time.perf_counter() - started
        await consumer.close()
        assert received == messages, (received, messages)
        return elapsed


def _drain_in_process(url: str, topic: str, messages: int) -> float:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_drain_entry, (url, topic, messages))


def _drain_entry(url: str, topic: str, messages: int) -> float:
    return asyncio.run(_drain(url, topic, messages))


async def _hold_producer(url: str, topic: str, release: asyncio.Event) -> None:
    from stableline import aio

    async with aio.Client(url) as client:
        producer = await client.create_producer(topic)
        await release.wait()
        await producer.close()


def measure(messages: int, rounds: int, profile: str | None = None) -> dict:
    assert rounds >= 1, rounds
    runs: dict[str, list[int]] = {"cold": [], "warm": []}
    unload_wait_s = []
    with temporary_broker(
        Path(tempfile.gettempdir()),
        prefix="bench-reload-",
        env={"STABLELINE_INACTIVE_TOPIC_UNLOAD_S": str(UNLOAD_S)},
        interpreter_args=["-m", "cProfile", "-o", profile] if profile else [],
    ) as broker:
        url = broker.service_url
        for round_number in range(rounds):
            cold, warm = f"reload-cold-{round_number}", f"reload-warm-{round_number}"

            async def run_round(cold: str = cold, warm: str = warm, number: int = round_number):
                release = asyncio.Event()
                holder = asyncio.create_task(_hold_producer(url, warm, release))
                await _produce(url, cold, messages)
                await _produce(url, warm, messages)
                unload_wait_s.append(await asyncio.to_thread(wait_unloaded, broker, cold))
                assert topic_loaded(broker, warm), "the warm topic was unloaded"
                order = ("cold", "warm") if number % 2 == 0 else ("warm", "cold")
                for which in order:
                    topic = cold if which == "cold" else warm
                    elapsed = await asyncio.to_thread(_drain_in_process, url, topic, messages)
                    runs[which].append(round(messages / elapsed))
                release.set()
                await holder

            asyncio.run(run_round())
    rates = {key: round(statistics.median(figures)) for key, figures in runs.items()}
    return {
        "messages": messages,
        "message_size": MESSAGE_SIZE,
        "rounds": rounds,
        "msgs_per_s": rates,
        "runs_msgs_per_s": runs,
        "cold_ratio": round(rates["cold"] / rates["warm"], 3),
        "worst_cold_ratio": round(
            min(c / w for c, w in zip(runs["cold"], runs["warm"], strict=True)), 3
        ),
        "unload_wait_s": [round(s, 2) for s in unload_wait_s],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="drains of each topic (median)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", default=None, help="write the broker's cProfile here")
    args = parser.parse_args()
    result = measure(args.messages, args.rounds, args.profile)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
