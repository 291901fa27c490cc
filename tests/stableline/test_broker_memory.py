"""A broker's memory is bounded by the broker, not multiplied by its topics.

A real broker with small broker-wide budgets (entry cache, pending writes): topics
each written more than the whole cache budget leave the broker's cache at most
that budget, all topics together, and its resident memory grows by a bound that
does not depend on how many topics were written (each topic's own 64 MiB cache
would hold everything written here)."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from stableline import aio
from stableline.testing import BrokerProcess

MIB = 1024 * 1024
CACHE_BUDGET = 8 * MIB
PENDING_BUDGET = 8 * MIB
TOPICS = 8
PER_TOPIC_BYTES = 16 * MIB  # twice the broker's cache budget, each
MESSAGE = b"m" * 1024
# Growth allowed over the broker's RSS before the writes: the budgets (16 MiB),
# each entry's copies while it is written (its frame), gRPC's buffers and the
# allocator's slack. Each topic caching what it was written (its own 64 MiB cache,
# as before the budget) grew this broker by 167 MiB.
MAX_GROWTH_BYTES = 110 * MIB


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    env = {
        "STABLELINE_ENTRY_CACHE_SIZE_BYTES": str(CACHE_BUDGET),
        "STABLELINE_MAX_PENDING_WRITE_BYTES": str(PENDING_BUDGET),
    }
    with BrokerProcess(tmp_path / "data", env=env).running() as process:
        yield process


@pytest.fixture
def starved_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Room for one append at a time in the whole broker."""
    env = {"STABLELINE_MAX_PENDING_WRITE_BYTES": "1"}
    with BrokerProcess(tmp_path / "data", env=env).running() as process:
        yield process


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _gauge(broker: BrokerProcess, name: str, bound: str) -> float:
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf'^{name}{{bound="{bound}"}} (\S+)$', text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found[1])


def test_topics_written_past_the_cache_budget_share_it_and_rss_stays_bounded(broker):
    pid = broker.process.pid
    per_topic = PER_TOPIC_BYTES // len(MESSAGE)
    with stableline.Client(broker.service_url) as client:
        client.create_producer("warm-up").send(b"w")
        before = _rss_bytes(pid)
        peak = before
        for index in range(TOPICS):
            producer = client.create_producer(f"busy-{index}", block_if_queue_full=True)
            for _ in range(per_topic):
                producer.send_async(MESSAGE, None)
            producer.flush()
            peak = max(peak, _rss_bytes(pid))
        cached = [
            broker.admin(f"/admin/v2/persistent/public/default/busy-{index}/internalStats")[
                "cacheSize"
            ]
            for index in range(TOPICS)
        ]
    assert sum(cached) <= CACHE_BUDGET, cached
    assert cached[-1] > 0  # the latest topic's tail is cached: the budget is used
    assert _gauge(broker, "stableline_entry_cache_size_bytes", "max") == CACHE_BUDGET
    assert _gauge(broker, "stableline_entry_cache_size_bytes", "used") == sum(cached)
    assert _gauge(broker, "stableline_pending_write_bytes", "max") == PENDING_BUDGET
    assert _gauge(broker, "stableline_pending_write_bytes", "used") == 0
    growth = peak - before
    assert growth < MAX_GROWTH_BYTES, (
        f"broker RSS grew {growth / MIB:.0f} MiB writing {TOPICS} x "
        f"{PER_TOPIC_BYTES / MIB:.0f} MiB (bound {MAX_GROWTH_BYTES / MIB:.0f} MiB)"
    )


def test_producers_of_many_topics_all_finish_through_one_spent_pending_budget(starved_broker):
    """Every append waits for the one before it, whatever its topic: they all go
    through, in each producer's order, and the budget is whole again after."""
    topics, per_topic = 6, 300

    async def produce(client: aio.Client, topic: str) -> list:
        producer = await client.create_producer(topic, batching_max_messages=10)
        receipts = [producer.send_nowait(b"%d" % i + b"." * 2000) for i in range(per_topic)]
        ids = await asyncio.gather(*receipts)
        await producer.close()
        return ids

    async def run() -> list[list]:
        async with aio.Client(starved_broker.service_url) as client:
            return await asyncio.wait_for(
                asyncio.gather(*(produce(client, f"starved-{i}") for i in range(topics))), 60
            )

    for ids in asyncio.run(run()):
        assert len(ids) == per_topic and ids == sorted(ids)
    assert _gauge(starved_broker, "stableline_pending_write_bytes", "max") == 1
    assert _gauge(starved_broker, "stableline_pending_write_bytes", "used") == 0
