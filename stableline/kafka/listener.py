"""The Kafka port: an asyncio server reading length-prefixed request frames.

Each frame is an int32 size and that many bytes. A size past the cap (or
negative) is refused before any of the frame is read: the connection is closed.
A frame that does not parse closes its own connection and no other; the broker
stays up. Requests of one connection are answered in the order they came, one
at a time (Kafka's ordering promise per connection). With TLS on (the broker's
certificate, and client certificates required when it has a trust file) the port
speaks TLS only. Each connection has its session (sasl.py): a request it may not
send closes it unanswered, and a failed authentication closes it once its answer
is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct

from stableline.kafka.client_address import client_host, host_of
from stableline.kafka.codec import MalformedRequest
from stableline.kafka.handler import KafkaRequestHandler
from stableline.kafka.sasl import ConnectionRefused, KafkaSession

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class KafkaListener:
    def __init__(
        self,
        handler: KafkaRequestHandler,
        max_frame_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._handler = handler
        self._max_frame_bytes = max_frame_bytes
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.malformed_frames = 0
        self.oversized_frames = 0
        self.refused_connections = 0

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (port 0 picks a free one)."""
        self._server = await asyncio.start_server(self._serve, host, port, ssl=self._ssl_context)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
        await self._handler.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host.set(host_of(peer))  # this connection's task alone sees it
        try:
            await self._requests(reader, writer, self._handler.new_session(peer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: KafkaSession
    ) -> None:
        peer = session.peer
        while not session.closing:
            try:
                (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    log.info("kafka: %s sent a torn frame size; closing", peer)
                return
            limit = session.max_frame_bytes(self._max_frame_bytes)
            if not 0 < size <= limit:
                self.oversized_frames += 1
                log.warning(
                    "kafka: %s sent a frame of %d bytes (limit %d%s); closing the connection",
                    peer,
                    size,
                    limit,
                    "" if limit == self._max_frame_bytes else " before authentication",
                )
                return
            frame = await reader.readexactly(size)
            try:
                response = await self._handler.handle(frame, session)
            except ConnectionRefused as error:
                self.refused_connections += 1
                log.info("kafka: %s: %s; closing", peer, error)
                return
            except MalformedRequest as error:
                self.malformed_frames += 1
                log.warning("kafka: malformed request from %s (%s); closing", peer, error)
                return
            except Exception:
                # A fault of this broker, not of the client: logged, only this
                # connection pays (the client reconnects and retries).
                log.exception("kafka: request from %s failed; closing", peer)
                return
            if response is not None:
                writer.write(_SIZE.pack(len(response)) + response)
                await writer.drain()
