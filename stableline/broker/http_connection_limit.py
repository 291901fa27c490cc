"""max_http_connections and a request-header deadline for the HTTP admin port.

aiohttp neither caps connections nor bounds how long a client may take to send a
request's headers, so a client that opens connections and sends half a request
holds a file descriptor each for as long as it likes. This site wraps each
connection's protocol: a connection counts from its accept (a TLS handshake in
progress included) until it closes; past max_http_connections a new one is
closed at once. A connection must complete the headers of its first request
within http_request_header_timeout_s of its accept (the TLS handshake included),
or it is aborted; between requests, aiohttp's keep-alive timeout closes an idle
connection. GET /admin/v2/broker-stats/http-connections shows the counts.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


class HttpConnections:
    """The connections open on the HTTP port, at most `max_connections`."""

    def __init__(self, max_connections: int, header_timeout_s: float):
        if max_connections < 1:
            raise ValueError(f"max_http_connections must be >= 1, got {max_connections}")
        assert header_timeout_s > 0
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        # Weak: a TLS connection whose handshake fails is dropped by asyncio without
        # a connection_lost, and leaves the set when it is collected.
        self._open: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._by_handler: dict[int, _Connection] = {}
        self.refused = 0
        self.timed_out = 0

    def __len__(self) -> int:
        return len(self._open)

    def protocol_factory(self, server: web.Server):
        loop = asyncio.get_running_loop()

        def make() -> asyncio.Protocol:
            if len(self._open) >= self.max_connections:
                self.refused += 1
                return _Refused()
            connection = _Connection(self, server(), loop)
            self._open.add(connection)
            return connection

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
        return {
            "httpConnections": len(self._open),
            "maxHttpConnections": self.max_connections,
            "refusedHttpConnections": self.refused,
            "httpHeaderTimeouts": self.timed_out,
        }


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()


class _Connection(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted and held to the header deadline."""

    def __init__(self, table: HttpConnections, handler: RequestHandler, loop):
        self._table = table
        self._handler = handler
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = loop.call_later(
            table.header_timeout_s, self._overdue
        )
        table._by_handler[id(handler)] = self

    def cancel_deadline(self) -> None:
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
        self._table._open.discard(self)
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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connections.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self._connections.header_timeout_s if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=True,
        )
        self.bound_port = self._server.sockets[0].getsockname()[1]


def add_routes(app: web.Application, table: HttpConnections) -> None:
    """GET /admin/v2/broker-stats/http-connections: open, limit, refused, timed out."""

    async def http_connections(_request: web.Request) -> web.Response:
        return web.json_response(table.stats())

    app.router.add_get("/admin/v2/broker-stats/http-connections", http_connections)
