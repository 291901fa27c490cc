"""Connection caps and a request-header deadline for the HTTP admin port.

aiohttp neither caps connections nor bounds how long a client may take to send a
request's headers, so a client that opens connections and sends half a request
holds a file descriptor each for as long as it likes. The port's accept loop is a
GuardedListener: a connection counts from its accept (a TLS handshake in progress
included) until it closes; past max_http_connections, or past
http_max_connections_per_address from its address, a new one is reset at once, so
one client reopening half-sent connections fills its own share and not the
others' (an operator's health checks keep working). A connection must complete
the headers of its first request within http_request_header_timeout_s of its
accept (the TLS handshake included), or it is aborted; until then, a newcomer past
a cap takes the slot of the longest-waiting such connection (guarded_accept.py); between requests,
aiohttp's keep-alive timeout closes an idle connection.
GET /admin/v2/broker-stats/http-connections shows the counts.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from stableline.broker.connections.address_slots import AddressSlots
from stableline.broker.connections.caps import PortCaps
from stableline.broker.connections.guarded_accept import Admission, GuardedListener


class HttpConnections:
    """The connections open on the HTTP port, within `caps`."""

    def __init__(self, caps: PortCaps, header_timeout_s: float):
        assert header_timeout_s > 0
        self.slots = AddressSlots(caps)
        self.header_timeout_s = header_timeout_s
        # Weak: a TLS connection whose handshake fails is dropped by asyncio without
        # a connection_lost, and leaves the map when its deadline has passed.
        self._by_handler: weakref.WeakValueDictionary[int, _Connection] = (
            weakref.WeakValueDictionary()
        )
        self.timed_out = 0
        # The port's listener's count of waiting connections closed for newcomers.
        self.evicted: Callable[[], int] = lambda: 0

    @property
    def max_connections(self) -> int:
        return self.slots.caps.total

    def __len__(self) -> int:
        return len(self.slots)

    def protocol_factory(self, server: web.Server):
        loop = asyncio.get_running_loop()

        def make(admission: Admission) -> asyncio.Protocol:
            return _Connection(self, server(), loop, admission)

        return make

    def headers_received(self, handler: Any) -> None:
        connection = self._by_handler.get(id(handler))
        if connection is not None:
            connection.cancel_deadline()

    def middleware(self):
        @web.middleware
        async def first_request_arrived(request: web.Request, handler):
            self.headers_received(request.protocol)
            return await handler(request)

        return first_request_arrived

    def stats(self) -> dict[str, int]:
        slots = self.slots
        return {
            "httpConnections": len(slots),
            "maxHttpConnections": slots.caps.total,
            "maxHttpConnectionsPerAddress": slots.caps.per_address,
            "refusedHttpConnections": slots.refused_total + slots.refused_address,
            "refusedHttpConnectionsPerAddress": slots.refused_address,
            "httpHeaderTimeouts": self.timed_out,
            "evictedHttpConnections": self.evicted(),
        }


class _Connection(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted and held to the header deadline."""

    def __init__(self, table: HttpConnections, handler: RequestHandler, loop, admission: Admission):
        self._table = table
        self._handler = handler
        self._admission = admission
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = loop.call_later(
            table.header_timeout_s, self._overdue
        )
        table._by_handler[id(handler)] = self

    def cancel_deadline(self) -> None:
        # Its first request's headers are in: a newcomer may no longer take its slot.
        self._admission.proven()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _overdue(self) -> None:
        self._deadline = None
        self._table.timed_out += 1
        if self._transport is not None:
            self._transport.abort()
        # Before connection_made (a TLS handshake not finished): the handshake
        # timeout, set to the same deadline, ends it.

    def connection_made(self, transport) -> None:
        self._transport = transport
        self._handler.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.cancel_deadline()
        self._table._by_handler.pop(id(self._handler), None)
        self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received()

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class BoundedTCPSite(web.BaseSite):
    """aiohttp's TCPSite with the connections counted and the header deadline."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        connections: HttpConnections,
        ssl_context: ssl.SSLContext | None = None,
    ):
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._connections = connections
        self.bound_port = 0

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.bound_port or self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        listener = GuardedListener(
            "http",
            self._connections.slots,
            self._connections.protocol_factory(server),
            self._ssl_context,
            self._connections.header_timeout_s,
        )
        self.bound_port = listener.start(self._host, self._port)
        self._connections.evicted = lambda: listener.evicted
        self._server = listener  # closed by BaseSite.stop


def add_routes(app: web.Application, table: HttpConnections) -> None:
    """GET /admin/v2/broker-stats/http-connections: open, limit, refused, timed out."""

    async def http_connections(_request: web.Request) -> web.Response:
        return web.json_response(table.stats())

    app.router.add_get("/admin/v2/broker-stats/http-connections", http_connections)
