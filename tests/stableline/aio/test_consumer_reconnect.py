"""A consumer across a broker kill: it resubscribes on its own, and no message whose
acknowledgement the broker confirmed comes back (also one acked within a batch)."""

from __future__ import annotations

import asyncio

from stableline import aio


async def test_consumer_resumes_after_a_kill_and_confirmed_acks_stay_acked(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("resume", batching_max_messages=10)
        await asyncio.gather(*[producer.send_nowait(b"m%03d" % i) for i in range(100)])
        consumer = await client.subscribe(
            "resume", "sub", initial_position=aio.InitialPosition.Earliest
        )
        for _ in range(55):  # ends within a batch of ten: a partly acked entry
            message = await consumer.receive(5000)
            await consumer.acknowledge(message)
        broker.kill()
        await asyncio.to_thread(broker.start)
        rest = []
        while len(rest) < 45:
            message = await consumer.receive(10_000)
            rest.append(message.data())
            await consumer.acknowledge(message)
        assert rest == [b"m%03d" % i for i in range(55, 100)]
        await producer.send(b"after")
        assert (await consumer.receive(10_000)).data() == b"after"


async def test_commit_is_retried_across_a_kill(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("txn-resume")
        txn = await client.new_transaction()
        await producer.send(b"in-txn", txn=txn)
        broker.kill()
        restarting = asyncio.create_task(asyncio.to_thread(broker.start))
        await txn.commit()
        await restarting
        assert txn.state == "COMMITTED"
        reader = await client.create_reader("txn-resume", aio.MessageId.earliest)
        assert (await reader.read_next(10_000)).data() == b"in-txn"
