"""The producer's batching against a real broker: batches keep to the broker's limits
and to one transaction, whichever path a send takes."""

from __future__ import annotations

import asyncio

import pytest

from stableline import aio
from stableline.testing import BrokerProcess


@pytest.fixture
def small_broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", env={"STABLELINE_MAX_MESSAGE_SIZE": "1000"})
    process.start()
    yield process
    process.stop()


async def test_batches_stay_within_the_broker_s_max_message_size(small_broker):
    async with aio.Client(small_broker.service_url) as client:
        producer = await client.create_producer(
            "small", batching_max_messages=1000, batching_max_publish_delay_ms=1000
        )
        receipts = [producer.send_nowait(b"%03d" % i + b"x" * 97) for i in range(50)]
        await producer.flush()
        ids = [await receipt for receipt in receipts]
        # 100-byte messages under a 1,000-byte limit: at most 10 to an entry.
        per_entry = {}
        for message_id in ids:
            key = (message_id.ledger_id, message_id.entry_id)
            per_entry[key] = per_entry.get(key, 0) + 1
        assert max(per_entry.values()) <= 10 and sum(per_entry.values()) == 50
        reader = await client.create_reader("small", aio.MessageId.earliest)
        values = [(await reader.read_next(5000)).value() for _ in range(50)]
        assert values == [b"%03d" % i + b"x" * 97 for i in range(50)]


async def test_a_transaction_starts_a_new_batch_and_plain_sends_after_it_too(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "switch", batching_max_messages=1000, batching_max_publish_delay_ms=1000
        )
        txn = await client.new_transaction()
        receipts = [
            producer.send_nowait(b"plain-1"),
            producer.send_nowait(b"txn-1", txn=txn),
            producer.send_nowait(b"plain-2"),
        ]
        await producer.flush()
        await txn.commit()
        ids = await asyncio.gather(*(_await(r) for r in receipts))
        entries = [(i.ledger_id, i.entry_id) for i in ids]
        assert len(set(entries)) == 3  # three batches: none mixes a transaction in


async def _await(receipt):
    return await receipt
