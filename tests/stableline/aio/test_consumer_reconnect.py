"""A consumer across a broker kill: it resubscribes on its own, and no message whose
acknowledgement the broker confirmed comes back (also one acked within a batch)."""

from __future__ import annotations

import asyncio

import pytest

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


async def test_nacks_and_acks_written_at_once_never_stall_a_shared_subscription(broker):
    # The redelivery timer writes a nack's Redeliver while the application writes
    # acks: two writers on one stream, which gRPC takes one at a time.
    async with aio.Client(broker.service_url) as client:
        consumers = [
            await client.subscribe(
                "nacked",
                "sub",
                aio.ConsumerType.Shared,
                aio.InitialPosition.Earliest,
                negative_ack_redelivery_delay_ms=5,
            )
            for _ in range(2)
        ]
        producer = await client.create_producer("nacked", batching_max_messages=10)
        for i in range(1000):
            producer.send_nowait(b"m%d" % i)
        await producer.flush()
        acked: set[bytes] = set()

        async def consume(consumer, nack_every: int) -> None:
            seen = 0
            while True:
                for message in await consumer.batch_receive(100, 100):
                    seen += 1
                    if seen % nack_every == 0:
                        await consumer.negative_acknowledge(message)
                    else:
                        await consumer.acknowledge(message)
                        acked.add(message.value())

        tasks = [
            asyncio.create_task(consume(c, n)) for c, n in zip(consumers, (7, 11), strict=True)
        ]
        try:
            async with asyncio.timeout(30):  # about 2 s when nothing stalls
                while len(acked) < 1000:
                    await asyncio.sleep(0.05)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_restart_under_a_consumer_of_several_topics_delivers_every_message_once(broker):
    # Its pumps hold batches taken from each topic's receiver queue: dropped when
    # that topic's stream reopens, as the queue is, so the redelivery is the only copy.
    topics = ["pumped-a", "pumped-b"]
    sent: dict[str, list[bytes]] = {}
    async with aio.Client(broker.service_url) as client:
        for topic in topics:
            producer = await client.create_producer(topic, batching_max_messages=100)
            payloads = [f"{topic}-{i}".encode() for i in range(3000)]
            await asyncio.gather(*[producer.send_nowait(p) for p in payloads])
            sent[f"persistent://public/default/{topic}"] = payloads
        consumer = await client.subscribe(
            topics, "sub", initial_position=aio.InitialPosition.Earliest
        )
        received = []
        for _ in range(10):
            message = await consumer.receive(5000)
            received.append(message)
            await consumer.acknowledge(message)
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(broker.start)
        while len(received) < 6000:
            message = await consumer.receive(30_000)
            received.append(message)
            await consumer.acknowledge(message)
        with pytest.raises(aio.Timeout):
            await consumer.receive(500)
        await consumer.close()
    got: dict[str, list[bytes]] = {}
    for message in received:
        got.setdefault(message.topic_name(), []).append(message.data())
    assert got == sent
