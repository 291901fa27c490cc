"""Acknowledgment grouping in the asyncio client: acknowledge_nowait groups acks for
ack_grouping_time_ms or ack_grouping_max_size, flush_acknowledgments and close
confirm them, and a group acks whole entries as one id."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

from stableline import aio
from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId, messages_of
from stableline.aio._ack_grouping import _runs_of
from stableline.aio._consumer import _ack_ids

EARLIEST = aio.InitialPosition.Earliest


def _backlog(broker, topic: str, subscription: str = "sub") -> int:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)["subscriptions"][subscription]["msgBacklog"]


async def _backlog_now(broker, topic: str) -> int:
    return await asyncio.to_thread(_backlog, broker, topic)


async def _until(condition, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.05)


async def _filled(client: aio.Client, topic: str, count: int) -> aio.Consumer:
    """A consumer of `topic` holding `count` messages of one entry each."""
    consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = await client.create_producer(topic, batching_max_messages=1)
    for i in range(count):
        await producer.send(b"%d" % i)
    return consumer


async def test_acknowledge_nowait_waits_for_the_group_and_flush_confirms_it(broker):
    options = {"ack_grouping_time_ms": 60_000, "ack_grouping_max_size": 3}
    async with aio.Client(broker.service_url) as client:
        await (await _filled(client, "grouped", 5)).close()
        consumer = await client.subscribe("grouped", "sub", initial_position=EARLIEST, **options)
        messages = [await consumer.receive(5000) for _ in range(5)]
        consumer.acknowledge_nowait(messages[0])
        consumer.acknowledge_nowait(messages[1].message_id())
        await asyncio.sleep(0.3)
        assert await _backlog_now(broker, "grouped") == 5  # the group waits its minute
        consumer.acknowledge_nowait(messages[2])  # full: it goes
        await _until(lambda: _is(broker, "grouped", 2))
        consumer.acknowledge_nowait(messages[3:])
        await consumer.flush_acknowledgments()
        assert await _backlog_now(broker, "grouped") == 0


async def _is(broker, topic: str, backlog: int) -> bool:
    return await _backlog_now(broker, topic) == backlog


async def test_ack_grouping_time_ms_sends_the_group_when_it_is_up(broker):
    async with aio.Client(broker.service_url) as client:
        consumer = await _filled(client, "timed", 3)
        await consumer.close()
        consumer = await client.subscribe(
            "timed", "sub", initial_position=EARLIEST, ack_grouping_time_ms=100
        )
        for _ in range(3):
            consumer.acknowledge_nowait(await consumer.receive(5000))
        await _until(lambda: _is(broker, "timed", 0))


async def test_close_confirms_the_grouped_acks(broker):
    async with aio.Client(broker.service_url) as client:
        consumer = await _filled(client, "close-confirms", 2)
        await consumer.close()
        consumer = await client.subscribe(
            "close-confirms", "sub", initial_position=EARLIEST, ack_grouping_time_ms=60_000
        )
        consumer.acknowledge_nowait([await consumer.receive(5000) for _ in range(2)])
        await consumer.close()
        assert await _backlog_now(broker, "close-confirms") == 0


async def test_acknowledge_nowait_may_be_called_from_another_thread(broker):
    async with aio.Client(broker.service_url) as client:
        consumer = await _filled(client, "from-thread", 4)
        await consumer.close()
        consumer = await client.subscribe(
            "from-thread", "sub", initial_position=EARLIEST, ack_grouping_time_ms=50
        )
        messages = [await consumer.receive(5000) for _ in range(4)]
        threads = [
            threading.Thread(target=consumer.acknowledge_nowait, args=(m,)) for m in messages
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        await _until(lambda: _is(broker, "from-thread", 0))


def test_a_group_of_received_messages_acks_whole_entries_as_one_id_and_nothing_more():
    def delivered(entry_id: int, count: int) -> list:
        batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"m")] * count)
        entry = pb.EntryDelivery(
            ledger_id=1,
            entry_id=entry_id,
            metadata=pb.EntryMetadata(num_messages=count),
            payload=batch.SerializeToString(),
        )
        return messages_of("persistent://public/default/t", entry)

    def acked(group: list) -> list:
        # As acknowledge_nowait keeps them: entry, index, entry, index...
        return sorted(_ack_ids(_runs_of([part for message in group for part in message])))

    whole, part = delivered(0, 3), delivered(1, 3)
    # A message acked twice is not the entry, even when the run counts as many.
    assert acked([*whole, part[0], part[0], part[1]]) == [
        MessageId(1, 0, -1),
        MessageId(1, 1, 0),
        MessageId(1, 1, 1),
    ]
    assert acked([part[1], part[0], part[0]]) == [MessageId(1, 1, 0), MessageId(1, 1, 1)]
    # Entries interleaved and out of order: an entry acked whole goes as one id.
    assert acked([whole[2], part[1], whole[0], whole[1]]) == [
        MessageId(1, 0, -1),
        MessageId(1, 1, 1),
    ]
    assert acked([]) == []
