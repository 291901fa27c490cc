"""Reads of a topic the broker unloaded (idle) and loaded again: they come from its
ledger files, a read-ahead span at a time through the entry cache, and give what a
topic that stayed loaded gives: every message in order, at both isolation levels,
with a transaction committed before the unload delivered and an aborted one
delivered only to READ_UNCOMMITTED."""

from __future__ import annotations

import asyncio
import time

import pytest

from stableline import aio
from stableline.testing import BrokerProcess

TOPIC = "reloaded"
FULL_NAME = f"persistent://public/default/{TOPIC}"
# More than the cache's read-back region (a quarter of 64 MiB) and several
# read-ahead spans: the drain reads past what the cache can hold at once.
PLAIN = 12_000
PAYLOAD_BYTES = 2000
IN_TXN = 300
UNLOAD_WAIT_S = 30.0
LEVELS = {
    "rc": aio.IsolationLevel.READ_COMMITTED,
    "ru": aio.IsolationLevel.READ_UNCOMMITTED,
}


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", env={"STABLELINE_INACTIVE_TOPIC_UNLOAD_S": "0.5"})
    process.start()
    try:
        yield process
    finally:
        assert process.stop() in (0, -9), process.log()


def _loaded(broker: BrokerProcess) -> bool:
    for bundles in broker.admin("/admin/v2/broker-stats/topics").values():
        for kinds in bundles.values():
            if FULL_NAME in kinds.get("persistent", {}):
                return True
    return False


def _payload(label: str, index: int) -> bytes:
    return f"{label}-{index:06d}-".encode().ljust(PAYLOAD_BYTES, b".")


async def _write(client: aio.Client) -> dict[str, list[bytes]]:
    """Plain messages around a committed and an aborted transaction."""
    producer = await client.create_producer(TOPIC, batching_max_messages=100)
    written: dict[str, list[bytes]] = {}

    async def plain(label: str, count: int) -> None:
        written[label] = [_payload(label, i) for i in range(count)]
        await asyncio.gather(*[producer.send_nowait(p) for p in written[label]])

    async def in_transaction(label: str, commit: bool) -> None:
        txn = await client.new_transaction()
        written[label] = [_payload(label, i) for i in range(IN_TXN)]
        await asyncio.gather(*[producer.send_nowait(p, txn=txn) for p in written[label]])
        await (txn.commit() if commit else txn.abort())

    await plain("before", PLAIN // 2)
    await in_transaction("committed", commit=True)
    await in_transaction("aborted", commit=False)
    await plain("after", PLAIN // 2)
    await producer.close()
    return written


async def _drain(client: aio.Client, subscription: str, level, expected: int) -> list[bytes]:
    consumer = await client.subscribe(
        TOPIC,
        subscription,
        initial_position=aio.InitialPosition.Earliest,
        isolation_level=level,
    )
    received: list[bytes] = []
    while len(received) < expected:
        batch = await consumer.batch_receive(1000, 10_000)
        assert batch, f"{subscription}: nothing within 10 s after {len(received)} messages"
        received.extend(message.data() for message in batch)
        await consumer.acknowledge(batch)
    with pytest.raises(aio.Timeout):
        await consumer.receive(300)  # and nothing more
    await consumer.close()
    return received


async def test_a_reloaded_topic_reads_every_message_in_order_at_both_levels(broker):
    async with aio.Client(broker.service_url) as client:
        # Both subscriptions made first, so each holds every message (retention
        # deletes what every subscription has consumed).
        for subscription, level in LEVELS.items():
            consumer = await client.subscribe(
                TOPIC,
                subscription,
                initial_position=aio.InitialPosition.Earliest,
                isolation_level=level,
            )
            await consumer.close()
        written = await _write(client)
        deadline = time.monotonic() + UNLOAD_WAIT_S
        while await asyncio.to_thread(_loaded, broker):
            assert time.monotonic() < deadline, f"the idle topic was not unloaded\n{broker.log()}"
            await asyncio.sleep(0.05)
        committed = written["before"] + written["committed"] + written["after"]
        everything = written["before"] + written["committed"] + written["aborted"]
        everything += written["after"]
        read_committed = await _drain(client, "rc", LEVELS["rc"], len(committed))
        read_uncommitted = await _drain(client, "ru", LEVELS["ru"], len(everything))
    assert read_committed == committed
    assert read_uncommitted == everything
