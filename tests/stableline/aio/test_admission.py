"""ThreadSender: sends from other threads reach the asyncio producer in batches, with
back-pressure on the sending thread and callbacks in send order."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stableline import aio


async def test_sends_from_another_thread_are_durable_and_told_in_send_order(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("from-thread", batching_max_messages=50)
        sender = aio.ThreadSender(producer)
        told: list = []

        def send_all() -> None:
            for i in range(500):
                sender.send(b"%d" % i, lambda error, message_id, i=i: told.append((i, error)))

        await asyncio.to_thread(send_all)
        await sender.flush()
        assert told == [(i, None) for i in range(500)]


async def test_a_full_queue_holds_the_sending_thread_until_there_is_room(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "room", max_pending_messages=10, block_if_queue_full=True
        )
        sender = aio.ThreadSender(producer)
        told = threading.Semaphore(0)
        await asyncio.to_thread(
            lambda: [sender.send(b"x", lambda *_: told.release()) for _ in range(200)]
        )
        await sender.flush()
        assert all(told.acquire(blocking=False) for _ in range(200))


async def test_without_blocking_a_send_past_the_queue_is_refused(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "refused", max_pending_messages=5, batching_max_publish_delay_ms=60_000
        )
        sender = aio.ThreadSender(producer)
        errors: list = []

        def send_all() -> None:
            for _ in range(5):
                sender.send(b"x", lambda error, _id: errors.append(error))
            with pytest.raises(aio.ProducerQueueIsFull):
                sender.send(b"x", None)

        await asyncio.to_thread(send_all)
        await sender.flush()
        assert errors == [None] * 5


async def test_a_wrapped_transaction_is_turned_into_the_producer_s_own_on_the_loop(broker):
    """txn_of: a face whose transactions wrap the asyncio ones hands them over as they
    are; the sender unwraps each on the loop, and the messages commit with it."""

    class Wrapped:
        def __init__(self, inner) -> None:
            self.inner = inner

    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("wrapped-txn")
        consumer = await client.subscribe(
            "wrapped-txn", "s", isolation_level=aio.IsolationLevel.READ_COMMITTED
        )
        txn = await client.new_transaction()
        sender = aio.ThreadSender(producer, txn_of=lambda wrapped: wrapped.inner)
        errors: list = []
        await asyncio.to_thread(
            lambda: [
                sender.send(b"%d" % i, lambda error, _id: errors.append(error), txn=Wrapped(txn))
                for i in range(3)
            ]
        )
        await sender.flush()
        await txn.commit()
        received = [await consumer.receive() for _ in range(3)]
        assert errors == [None] * 3
        assert [m.data() for m in received] == [b"0", b"1", b"2"]
        assert {m.txn_id() for m in received} == {txn.id}
