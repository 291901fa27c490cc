"""The coordinator forgets ended transactions as the broker runs, and its memory
stays flat under a steady stream of transactions.

A real broker runs 12,000 one-message transactions through the asyncio SDK. Ended
transactions past `max_ended_transactions` are forgotten as the broker runs, so its
anonymous RSS after the last one is what it was after a warm-up of 2,000 (0.3 MB
more when measured); a broker that kept every transaction, its finished end task
and its name grew 13.9 MB over these 10,000 (about 1.4 KB each).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

import stableline
from stableline import aio
from stableline.testing import BrokerProcess

WARM_UP_TXNS = 2_000
MEASURED_TXNS = 10_000
IN_FLIGHT = 32  # transactions under way at once, as from concurrent writers
MAX_ENDED = 1_000  # below the warm-up: the measured part runs at the bound
# Python's allocator keeps some arenas it has grown; the kept ended transactions
# themselves stop growing at MAX_ENDED, reached in the warm-up.
MAX_GROWTH_MB = 5.0
TOPIC = "txn-memory"
CACHE_BYTES = 256 * 1024


def rss_mb(pid: int) -> float:
    """The process's anonymous resident memory: its heap, not the LMDB and ledger
    files it maps."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


async def run_one_message_txns(service_url: str, count: int) -> None:
    """count transactions, each: open, one send, commit; IN_FLIGHT of them at once."""
    async with aio.Client(service_url) as client:
        producer = await client.create_producer(TOPIC)
        left = count

        async def writer() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                txn = await client.new_transaction(timeout_ms=60_000)
                await producer.send(b"m", txn=txn)
                await txn.commit()

        await asyncio.gather(*(writer() for _ in range(IN_FLIGHT)))
        await producer.close()


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data",
        env={
            "STABLELINE_MAX_ENDED_TRANSACTIONS": str(MAX_ENDED),
            # The entry cache for tailing readers fills with every append up to its
            # bound: kept small, it is full before the warm-up ends.
            "STABLELINE_CACHE_SIZE_BYTES": str(CACHE_BYTES),
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()


@pytest.mark.slow
def test_broker_rss_stays_flat_over_10000_one_message_transactions(bounded):
    pid = bounded.process.pid
    asyncio.run(run_one_message_txns(bounded.service_url, WARM_UP_TXNS))
    warm = rss_mb(pid)
    asyncio.run(run_one_message_txns(bounded.service_url, MEASURED_TXNS))
    after = rss_mb(pid)

    stats = bounded.admin("/admin/v3/transactions/coordinatorStats")
    assert stats["committedCount"] == WARM_UP_TXNS + MEASURED_TXNS
    assert (stats["endedTxns"], stats["openTxns"]) == (MAX_ENDED, 0)
    assert after - warm < MAX_GROWTH_MB, (
        f"broker RSS grew {after - warm:.1f} MB over {MEASURED_TXNS:,} transactions "
        f"({warm:.1f} -> {after:.1f} MB)"
    )


def test_a_forgotten_transaction_is_not_found_and_the_latest_ended_still_answer(tmp_path):
    broker = BrokerProcess(tmp_path / "data", env={"STABLELINE_MAX_ENDED_TRANSACTIONS": "2"})
    broker.start()
    try:
        with stableline.Client(broker.service_url) as client:
            producer = client.create_producer(TOPIC)
            txns = []
            for index in range(3):
                txn = client.new_transaction(timeout_ms=60_000)
                producer.send(b"m", txn=txn)
                if index == 2:
                    txn.abort()
                else:
                    txn.commit()
                txns.append(txn)
        ids = [f"{t.id[0]}:{t.id[1]}" for t in txns]
        path = "/admin/v3/transactions/transactionMetadata?txnId="
        with pytest.raises(urllib.error.HTTPError) as forgotten:
            broker.admin(path + ids[0])
        assert forgotten.value.code == 404
        message = json.loads(forgotten.value.read())["reason"]
        assert "latest 2 ended transactions (max_ended_transactions)" in message, message
        assert [broker.admin(path + i)["status"] for i in ids[1:]] == ["COMMITTED", "ABORTED"]
        stats = broker.admin("/admin/v3/transactions/coordinatorStats")
        assert (stats["endedTxns"], stats["maxEndedTxns"]) == (2, 2)
    finally:
        assert broker.stop() == 0, broker.log()
