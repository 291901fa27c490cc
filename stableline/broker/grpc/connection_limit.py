"""max_connections for the gRPC port: a server interceptor that counts client connections.

A connection here is one client's HTTP/2 connection, which gRPC names by its peer
address (`ipv4:127.0.0.1:53122`): one stableline.Client is one connection however
many producers and consumers it multiplexes. gRPC does not tell a server when a
connection opens or closes, so a connection counts while it has at least one call
open (a producer, a consumer, a unary call in progress); an idle connection counts
for nothing. A call from a peer that is not counted while max_connections are is
refused with RESOURCE_EXHAUSTED ("TooManyConnections"); calls of counted peers go
on; so is a call of a new peer whose address already has
max_connections_per_address counted. Health checks and reflection are neither
counted nor refused: probes must work on a full broker.

Connections without a call are bounded by gRPC itself (server.py's options): at
most what the open-files budget leaves the port (connections/caps.py: max_connections
once the caps are cut; one more is closed at its accept), each through its TLS and
HTTP/2 handshake and closed after no call for connection_authentication_timeout_s;
of an address with more than max_connections_per_address sockets, the oldest with
no call are shut down (grpc/socket_guard.py). GET /admin/v2/broker-stats/connections shows the count.

A call counts only once it is authenticated (the server puts the guard's
interceptor before this one), so callers without a valid token take no slot. A
request stream must send its opening message within connection_idle_timeout_s
(OpeningDeadlineInterceptor, before both): one that sends nothing is ended with
DEADLINE_EXCEEDED ("IdleStream") and never counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from aiohttp import web

from stableline.broker.connections.address_slots import AddressSlots, Refusal
from stableline.broker.connections.caps import PortCaps
from stableline.broker.grpc.errors import RpcRefusal, abort

UNCOUNTED_SERVICES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


class ConnectionTable:
    """Open calls per peer; at most `max_connections` peers at once, and at most
    `max_per_address` of one address (AddressSlots, as the other ports count)."""

    def __init__(self, max_connections: int, max_per_address: int | None = None):
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.max_connections = max_connections
        self.slots = AddressSlots(PortCaps.of(max_connections, max_per_address or max_connections))
        self._open_calls: dict[str, int] = {}
        # Every call in progress per peer, counted or not (health checks, streams
        # not opened yet, calls refused later): what makes a socket busy.
        self._any_calls: dict[str, int] = {}
        self.last_refusal: Refusal | None = None

    @property
    def refused(self) -> int:
        return self.slots.refused_total + self.slots.refused_address

    def __len__(self) -> int:
        return len(self._open_calls)

    def open_calls(self) -> int:
        """Calls (streams included) open now, over every counted peer."""
        return sum(self._open_calls.values())

    def enter(self, peer: str) -> bool:
        """Count one more call of `peer`; False (nothing counted) when it would be one
        connection too many, in all or from its address (`last_refusal` says which)."""
        calls = self._open_calls.get(peer)
        if calls is None:
            refusal = self.slots.take(peer_address(peer))
            if refusal is not None:
                self.last_refusal = refusal
                return False
            calls = 0
        self._open_calls[peer] = calls + 1
        return True

    def leave(self, peer: str) -> None:
        calls = self._open_calls[peer] - 1
        assert calls >= 0
        if calls:
            self._open_calls[peer] = calls
        else:
            del self._open_calls[peer]
            self.slots.release(peer_address(peer))

    def call_started(self, peer: str) -> None:
        self._any_calls[peer] = self._any_calls.get(peer, 0) + 1

    def call_ended(self, peer: str) -> None:
        calls = self._any_calls[peer] - 1
        if calls:
            self._any_calls[peer] = calls
        else:
            del self._any_calls[peer]

    def calling(self) -> set[tuple[str, int]]:
        """(address, port) of each peer with a call of any kind in progress."""
        peers = set()
        for peer in self._any_calls:
            address = peer_address(peer)
            port = peer.rpartition(":")[2]
            if port.isdigit():
                peers.add((address, int(port)))
        return peers

    def stats(self) -> dict[str, int]:
        return {
            "connections": len(self._open_calls),
            "maxConnections": self.max_connections,
            "maxConnectionsPerAddress": self.slots.caps.per_address,
            "refusedConnections": self.refused,
            "refusedPerAddress": self.slots.refused_address,
        }


def peer_address(peer: str) -> str:
    """The address of a gRPC peer name: `ipv4:127.0.0.1:53122` -> `127.0.0.1`,
    `ipv6:[::1]:53122` -> `::1`; a name of another form is its own address."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    return rest.rpartition(":")[0].strip("[]")


class ConnectionLimitInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, table: ConnectionTable):
        self.table = table

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(UNCOUNTED_SERVICES):
            return handler
        return _wrapped(handler, self.table, _unary, _streaming)


def _wrapped(handler, table: ConnectionTable, one_answer, many_answers):
    """`handler` with its behaviour wrapped by `one_answer(table, behaviour)` when the
    call answers once, `many_answers(table, behaviour)` when it streams answers."""
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=one_answer(table, handler.unary_unary))
    if handler.stream_stream is not None:
        return handler._replace(stream_stream=many_answers(table, handler.stream_stream))
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=many_answers(table, handler.unary_stream))
    return handler._replace(stream_unary=one_answer(table, handler.stream_unary))


def _refusal(table: ConnectionTable) -> RpcRefusal:
    if table.last_refusal is Refusal.ADDRESS:
        detail = (
            f"its address holds {table.slots.caps.per_address} client connections, the most "
            f"max_connections_per_address allows"
        )
    else:
        detail = (
            f"the broker serves {len(table)} client connections, the most max_connections "
            f"({table.max_connections}) allows"
        )
    return RpcRefusal(
        "TooManyConnections",
        f"{detail}; retry later or close idle clients",
    )


def _unary(table: ConnectionTable, behavior):
    async def counted(request: Any, context) -> Any:
        peer = context.peer()
        if not table.enter(peer):
            await abort(context, _refusal(table))
        try:
            return await behavior(request, context)
        finally:
            table.leave(peer)

    return counted


def _streaming(table: ConnectionTable, behavior):
    async def counted(request: Any, context) -> AsyncIterator[Any]:
        peer = context.peer()
        if not table.enter(peer):
            await abort(context, _refusal(table))
        try:
            async for response in behavior(request, context):
                yield response
        finally:
            table.leave(peer)

    return counted


class CallTrackingInterceptor(grpc.aio.ServerInterceptor):
    """Notes every call in progress per peer (the first interceptor): a socket with
    one is busy, and the per-address socket guard leaves it alone."""

    def __init__(self, table: ConnectionTable):
        self.table = table

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return _wrapped(handler, self.table, _tracked_unary, _tracked_stream)


def _tracked_unary(table: ConnectionTable, behavior):
    async def tracked(request: Any, context) -> Any:
        peer = context.peer()
        table.call_started(peer)
        try:
            return await behavior(request, context)
        finally:
            table.call_ended(peer)

    return tracked


def _tracked_stream(table: ConnectionTable, behavior):
    async def tracked(request: Any, context) -> AsyncIterator[Any]:
        peer = context.peer()
        table.call_started(peer)
        try:
            async for response in behavior(request, context):
                yield response
        finally:
            table.call_ended(peer)

    return tracked


class OpeningDeadlineInterceptor(grpc.aio.ServerInterceptor):
    """Ends a request stream whose first message does not arrive within `timeout_s`."""

    def __init__(self, timeout_s: float):
        assert timeout_s > 0
        self.timeout_s = timeout_s

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(UNCOUNTED_SERVICES):
            return handler
        if handler.stream_stream is not None:
            return handler._replace(stream_stream=self._streaming(handler.stream_stream))
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=self._unary(handler.stream_unary))
        return handler

    async def _opened(self, requests: AsyncIterator[Any], context) -> AsyncIterator[Any]:
        try:
            first = await asyncio.wait_for(anext(requests), self.timeout_s)
        except StopAsyncIteration:
            return _empty()
        except TimeoutError:
            await abort(
                context,
                RpcRefusal(
                    "IdleStream",
                    f"the stream sent no opening message within connection_idle_timeout_s "
                    f"({self.timeout_s:g} s); open it with its first request at once",
                ),
            )
        return _prepend(first, requests)

    def _streaming(self, behavior):
        async def opened(requests: AsyncIterator[Any], context) -> AsyncIterator[Any]:
            async for response in behavior(await self._opened(requests, context), context):
                yield response

        return opened

    def _unary(self, behavior):
        async def opened(requests: AsyncIterator[Any], context) -> Any:
            return await behavior(await self._opened(requests, context), context)

        return opened


async def _empty() -> AsyncIterator[Any]:
    return
    yield


async def _prepend(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for item in rest:
        yield item


def add_routes(app: web.Application, table: ConnectionTable) -> None:
    """GET /admin/v2/broker-stats/connections: counted, limit, refused so far."""

    async def connections(_request: web.Request) -> web.Response:
        return web.json_response(table.stats())

    app.router.add_get("/admin/v2/broker-stats/connections", connections)
