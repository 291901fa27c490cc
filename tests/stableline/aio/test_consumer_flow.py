"""Permits go back by the consumer's flow writer: no receive waits for that write,
and the broker keeps sending however small the receiver queue."""

from __future__ import annotations

import asyncio

from stableline import aio


async def test_a_small_receiver_queue_receives_everything_through_its_flow_writes(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("small-queue", batching_max_messages=1)
        await asyncio.gather(*[producer.send_nowait(b"m%03d" % i) for i in range(200)])
        consumer = await client.subscribe(
            "small-queue",
            "sub",
            initial_position=aio.InitialPosition.Earliest,
            receiver_queue_size=4,
        )
        got = [(await consumer.receive(5000)).data() for _ in range(150)]
        got += [m.data() for m in await consumer.batch_receive(50, 5000)]
        while len(got) < 200:
            got += [m.data() for m in await consumer.batch_receive(50, 5000)]
        assert got == [b"m%03d" % i for i in range(200)]
        await consumer.close()
        # Closing ends the flow writer with the rest: nothing of the consumer is left.
        current = asyncio.current_task()
        assert not any(
            "_write_flows" in repr(task.get_coro())
            for task in asyncio.all_tasks()
            if task is not current
        )
