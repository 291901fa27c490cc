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

Connections are admitted by a GuardedListener: at most `kafka_max_connections`,
and `kafka_max_connections_per_address` from one address, counted from the accept
(a TLS handshake in progress included); one more takes the slot of the
longest-waiting connection of its address not authenticated yet (past the total:
of any address), which is closed, or is reset at once when there is none
(connections/guarded_accept.py). A connection must finish its TLS handshake, its SASL
authentication and its first request within `connection_authentication_timeout_s`
of its accept (with authentication off: its first request), or it is closed;
after that, one that sends no request for `kafka_connections_max_idle_ms` is
closed [Kafka: connections.max.idle.ms, max.connections, max.connections.per.ip].
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from stableline.broker.connections.address_slots import AddressSlots
from stableline.broker.connections.caps import PortCaps
from stableline.broker.connections.guarded_accept import Admission, GuardedListener, ThrottledLog
from stableline.broker.kafka.protocol.codec import MalformedRequest
from stableline.broker.kafka.server.client_address import client_host, host_of
from stableline.broker.kafka.server.handler import KafkaRequestHandler
from stableline.broker.kafka.server.sasl import ConnectionRefused, KafkaSession, SaslState

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# asyncio.start_server's read buffer.
_STREAM_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class KafkaConnectionLimits:
    caps: PortCaps
    # From the accept to the end of SASL authentication and the first request.
    authentication_timeout_s: float
    # Between two requests of an authenticated connection.
    max_idle_s: float


class KafkaListener:
    def __init__(
        self,
        handler: KafkaRequestHandler,
        max_frame_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        limits: KafkaConnectionLimits | None = None,
    ) -> None:
        self._handler = handler
        self._max_frame_bytes = max_frame_bytes
        self._ssl_context = ssl_context
        self.limits = limits or KafkaConnectionLimits(PortCaps.of(4096, 1024), 10.0, 600.0)
        self.slots = AddressSlots(self.limits.caps)
        self._server: GuardedListener | None = None
        self._stopping = False
        self._connections: set[asyncio.Task] = set()
        self._timeout_log = ThrottledLog(log)
        self.malformed_frames = 0
        self.oversized_frames = 0
        self.refused_connections = 0
        self.authentication_timeouts = 0
        self.idle_timeouts = 0

    @property
    def handler(self) -> KafkaRequestHandler:
        """The requests' handler (the app hands its group offsets to the Peer service)."""
        return self._handler

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (port 0 picks a free one)."""
        self._server = GuardedListener(
            "kafka",
            self.slots,
            self._protocol,
            self._ssl_context,
            self.limits.authentication_timeout_s,
        )
        return self._server.start(host, port)

    def _protocol(self, admission: Admission) -> asyncio.StreamReaderProtocol:
        # Made at the accept: the authentication deadline counts from here.
        loop = asyncio.get_running_loop()
        serve = functools.partial(self._serve, accepted_at=loop.time(), admission=admission)
        reader = asyncio.StreamReader(limit=_STREAM_LIMIT, loop=loop)
        return asyncio.StreamReaderProtocol(reader, serve, loop=loop)

    def stats(self) -> dict[str, int]:
        return {
            **self.slots.stats(),
            "authenticationTimeouts": self.authentication_timeouts,
            "idleTimeouts": self.idle_timeouts,
            "handshakeFailures": self._server.handshake_failures if self._server else 0,
            "acceptFailures": self._server.accept_failures if self._server else 0,
            "evictedConnections": self._server.evicted if self._server else 0,
        }

    async def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._handler.close()

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        accepted_at: float,
        admission: Admission,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host.set(host_of(peer))  # this connection's task alone sees it
        try:
            await self._requests(
                reader, writer, self._handler.new_session(peer), accepted_at, admission
            )
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away
        except TimeoutError:
            pass  # counted and logged by _read_frame
        except asyncio.CancelledError:
            # stop() ends every connection: the task ends quietly, since asyncio's
            # stream callback (3.11) logs a cancelled connection task as an error.
            if not self._stopping:
                raise
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_frame(
        self, reader: asyncio.StreamReader, session: KafkaSession, deadline: float, proven: bool
    ) -> bytes | None:
        """The next frame; None when the connection is to close. Raises TimeoutError
        past `deadline` (counted and logged here)."""
        peer = session.peer
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
                except asyncio.IncompleteReadError as error:
                    if error.partial:
                        log.info("kafka: %s sent a torn frame size; closing", peer)
                    return None
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
                    return None
                return await reader.readexactly(size)
        except TimeoutError:
            if proven:
                self.idle_timeouts += 1
                reason = f"idle for kafka_connections_max_idle_ms ({self.limits.max_idle_s:g} s)"
            else:
                self.authentication_timeouts += 1
                reason = (
                    "not authenticated within connection_authentication_timeout_s "
                    f"({self.limits.authentication_timeout_s:g} s)"
                )
            # Many at once is what an attack looks like: one line per interval.
            self._timeout_log(logging.INFO, "kafka: closing %s: %s", peer, reason)
            raise

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: KafkaSession,
        accepted_at: float,
        admission: Admission,
    ) -> None:
        peer = session.peer
        loop = asyncio.get_running_loop()
        served = 0
        while not session.closing:
            # Until it has authenticated (with authentication off: sent a request) a
            # connection has the deadline counted from its accept; then, the idle one.
            proven = served > 0 and (
                session.state is SaslState.AUTHENTICATED or session.role is not None
            )
            if proven:
                admission.proven()  # a newcomer past a cap may no longer take its slot
                deadline = loop.time() + self.limits.max_idle_s
            else:
                deadline = accepted_at + self.limits.authentication_timeout_s
            frame = await self._read_frame(reader, session, deadline, proven)
            if frame is None:
                return
            served += 1
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


def add_routes(app: web.Application, listener: Callable[[], KafkaListener | None]) -> None:
    """GET /admin/v2/broker-stats/kafka-connections: open, caps, refused, timed out
    (404 with the Kafka port closed)."""

    async def kafka_connections(_request: web.Request) -> web.Response:
        current = listener()
        if current is None:
            raise web.HTTPNotFound(text="the Kafka port is closed")
        return web.json_response(current.stats())

    app.router.add_get("/admin/v2/broker-stats/kafka-connections", kafka_connections)
