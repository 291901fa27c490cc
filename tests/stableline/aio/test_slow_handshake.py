"""A broker that answers the connection handshake late, as one on a busy machine does,
is waited for: the client does not give up on the attempt within a second."""

from __future__ import annotations

import asyncio
import contextlib

from stableline import aio

HANDSHAKE_DELAY_S = 1.5  # past the reconnect backoff's 1 s cap


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float):
    first = True
    try:
        while data := await reader.read(65536):
            if first and delay:
                await asyncio.sleep(delay)  # the late handshake is the thing under test
            first = False
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _late_proxy(target_port: int, delay: float) -> asyncio.Server:
    """A TCP proxy to the broker that holds back the broker's first bytes (its SETTINGS)."""

    async def serve(client_reader, client_writer):
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(
            _pipe(client_reader, broker_writer, 0.0),
            _pipe(broker_reader, client_writer, delay),
        )

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_a_broker_that_answers_the_handshake_late_is_waited_for(broker):
    proxy = await _late_proxy(broker.grpc_port, HANDSHAKE_DELAY_S)
    port = proxy.sockets[0].getsockname()[1]
    try:
        async with aio.Client(f"127.0.0.1:{port}") as client:
            producer = await client.create_producer("late-handshake")
            receipt = await producer.send(b"through")
            assert receipt.ledger_id >= 0
    finally:
        proxy.close()
        with contextlib.suppress(Exception):
            await proxy.wait_closed()
