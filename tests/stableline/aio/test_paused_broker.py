"""A broker that is paused (SIGSTOP) keeps its TCP connections up and answers
nothing: every call of a client fails with BrokerUnavailable by its
operation_timeout_seconds, never at gRPC's connect timeout (20 s) or keepalive
(about 50 s)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

import stableline
from stableline import aio

OPERATION_TIMEOUT_S = 2.0
# Far below what gRPC's own timers give (20 s to 68 s), far above the timeout on a
# loaded machine.
WITHIN_S = 10.0


@contextlib.contextmanager
def _paused(broker) -> Iterator[None]:
    os.kill(broker.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.process.pid, signal.SIGCONT)


async def _fails_in_time(awaitable) -> str:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(aio.BrokerUnavailable, match="operation_timeout_seconds") as failure:
        await awaitable
    assert loop.time() - started < WITHIN_S
    return str(failure.value)


async def test_every_call_on_a_paused_broker_fails_by_the_operation_timeout(broker):
    async with aio.Client(
        broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S
    ) as client:
        producer = await client.create_producer("paused")
        await producer.send(b"before")
        consumer = await client.subscribe(
            "paused", "s", initial_position=aio.InitialPosition.Earliest
        )
        message = await consumer.receive(5000)
        never_reached = aio.Client(
            broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S
        )
        try:
            with _paused(broker):
                await _fails_in_time(client.get_last_message_id("paused"))
                await _fails_in_time(client.create_producer("other"))
                await _fails_in_time(client.subscribe("other", "s"))
                await _fails_in_time(client.new_transaction())
                said = await _fails_in_time(producer.send(b"during"))
                assert broker.service_url.split("//")[-1] in said  # names the broker
                await _fails_in_time(consumer.acknowledge_cumulative(message))
                await _fails_in_time(never_reached.get_last_message_id("paused"))
                await _fails_in_time(never_reached.create_producer("paused"))
        finally:
            await never_reached.close()


def test_the_blocking_client_is_bounded_alike(broker):
    with stableline.Client(
        broker.service_url, operation_timeout_seconds=OPERATION_TIMEOUT_S
    ) as client:
        producer = client.create_producer("paused-sync")
        producer.send(b"before")
        with _paused(broker):
            started = time.monotonic()
            with pytest.raises(stableline.BrokerUnavailable):
                producer.send(b"during")
            with pytest.raises(stableline.BrokerUnavailable):
                client.new_transaction()
            assert time.monotonic() - started < 2 * WITHIN_S


async def test_a_broker_that_answers_again_in_time_loses_nothing(broker):
    """The watch on answers does not give up early: a pause shorter than the
    timeout is waited out and the send is acknowledged once."""
    async with aio.Client(broker.service_url, operation_timeout_seconds=30.0) as client:
        producer = await client.create_producer("short-pause")
        await producer.send(b"before")
        with _paused(broker):
            receipt = producer.send_nowait(b"during")
            await asyncio.sleep(0.5)  # the pause itself is under test, not a wait
            assert not receipt.done()
        assert (await receipt).ledger_id >= 0
        reader = await client.create_reader(
            "short-pause", aio.MessageId.earliest, aio.IsolationLevel.READ_UNCOMMITTED
        )
        read = []
        while await reader.has_message_available():
            read.append((await reader.read_next(5000)).data())
        assert read == [b"before", b"during"]
