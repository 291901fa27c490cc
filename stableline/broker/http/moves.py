"""Moving topics, on Pulsar's paths (superusers only, as every admin path not granted
per topic):

    PUT  /admin/v2/persistent/{tenant}/{namespace}/{topic}/unload
         204: the topic was handed to another member of its ensemble, or closed here
         (one copy: its next use loads it again)
    POST /admin/v2/persistent/{tenant}/{namespace}/{topic}/transfer?broker=HOST:PORT
         (or a JSON body {"broker": "HOST:PORT"}; Pulsar's `destinationBroker` too)
         200 {"broker": "HOST:PORT"}: the broker serving the topic now
    PUT  /admin/v2/namespaces/{tenant}/{namespace}/unload
         200 {"unloaded": {"persistent://...": "HOST:PORT", ...}, "failed": {topic: reason}}

A call for a topic another broker serves is redirected there (307, as for every topic
call). A namespace's unload is answered by any broker: the topics it serves it moves
itself, and asks each other owner for theirs (its peer calls; one that does not answer
is asked again for about 2 s, as a restarted broker's connection comes back). Standalone (the
embedded store) there is no other broker: unload closes the topic here, and a
transfer is refused (TopicNotMovable).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from stableline.broker.cluster.ownership import NotOwnerError
from stableline.broker.cluster.topic_moves import TopicMoves, move_topic
from stableline.broker.errors import code_of
from stableline.broker.http.paths import namespace_path, topic_name
from stableline.broker.topics.registry import TopicRegistry
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName

# Unload a topic at the broker that serves it (a peer call): the broker serving it now.
ForwardUnload = Callable[[BrokerInfo, TopicName], Awaitable[str]]

# Topics of one namespace moved at once by its unload.
NAMESPACE_UNLOAD_CONCURRENCY = 8
# A topic's broker that did not answer (its connection from here still reconnecting
# after a restart) is asked again, after 0.25 s, then twice as long each time.
FORWARD_TRIES = 4
FORWARD_BACKOFF_S = 0.25


async def _target(request: web.Request) -> str:
    """The broker named by the query (`broker`, `destinationBroker`) or the JSON body."""
    for key in ("broker", "destinationBroker"):
        if request.query.get(key):
            return request.query[key]
    if request.can_read_body:
        try:
            body = json.loads(await request.read())
        except ValueError:
            raise web.HTTPBadRequest(
                text=json.dumps({"reason": "the body is not JSON"}), content_type="application/json"
            ) from None
        if isinstance(body, dict):
            for key in ("broker", "destinationBroker"):
                if isinstance(body.get(key), str) and body[key]:
                    return body[key]
    raise web.HTTPBadRequest(
        text=json.dumps(
            {"reason": 'name the broker to move the topic to: ?broker=HOST:PORT or {"broker": ...}'}
        ),
        content_type="application/json",
    )


def add_routes(
    app: web.Application,
    registry: TopicRegistry,
    moves: TopicMoves | None,
    forward_unload: ForwardUnload | None = None,
) -> None:
    """`moves`: the cluster's (None standalone); `forward_unload(owner, name)`: unload
    a topic at `owner`, the broker that serves it (a peer call), returning the broker
    now serving it; the namespace's unload asks it for topics served elsewhere."""
    base = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"

    async def unload(name: TopicName) -> str:
        return await move_topic(registry, moves, name, None)

    async def unload_topic(request: web.Request) -> web.Response:
        await unload(topic_name(request))
        return web.Response(status=204)

    async def transfer_topic(request: web.Request) -> web.Response:
        name = topic_name(request)
        target = await _target(request)
        return web.json_response({"broker": await move_topic(registry, moves, name, target)})

    async def forwarded(elsewhere: NotOwnerError, name: TopicName) -> str:
        assert forward_unload is not None
        delay = FORWARD_BACKOFF_S
        for _ in range(FORWARD_TRIES - 1):
            try:
                return await forward_unload(elsewhere.owner, name)
            except Exception as error:
                if code_of(error) not in ("TopicUnavailable", "BrokerUnavailable"):
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        return await forward_unload(elsewhere.owner, name)

    async def unload_namespace(request: web.Request) -> web.Response:
        namespace = namespace_path(request)
        names = [TopicName.parse(n) for n in registry.cluster_names(namespace)]
        room = asyncio.Semaphore(NAMESPACE_UNLOAD_CONCURRENCY)
        unloaded: dict[str, str] = {}
        failed: dict[str, str] = {}

        async def one(name: TopicName) -> None:
            async with room:
                try:
                    try:
                        unloaded[str(name)] = await unload(name)
                    except NotOwnerError as elsewhere:
                        if forward_unload is None:
                            raise
                        unloaded[str(name)] = await forwarded(elsewhere, name)
                except Exception as error:
                    failed[str(name)] = f"{code_of(error)}: {error}"

        await asyncio.gather(*(one(name) for name in names))
        return web.json_response({"unloaded": unloaded, "failed": failed})

    app.router.add_put(base + "/unload", unload_topic)
    app.router.add_post(base + "/transfer", transfer_topic)
    app.router.add_put("/admin/v2/namespaces/{tenant}/{namespace}/unload", unload_namespace)
