"""JSON admin endpoints that explain what readers see (the dashboard is built on them):

    GET /admin/v2/broker-stats/topics              every topic's stats, Pulsar's nesting
    GET /admin/v3/transactions/stablePositions     per topic: stable position, lag,
                                                   and the open transaction pinning it
    GET /admin/v3/transactions/stablePosition/{tenant}/{namespace}/{topic}
    GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}/peek
        ?count=N&isolationLevel=READ_COMMITTED|READ_UNCOMMITTED

Errors are answered as the rest of the admin API answers them: JSON {"reason": ...}.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from stableline.broker.http.paths import topic_name
from stableline.broker.observability.stable_positions import stable_position, stable_positions
from stableline.broker.topics import stats
from stableline.broker.topics.peek import parse_count, parse_isolation_level, peek
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators

# One broker serves every namespace whole: Pulsar's full-range bundle.
FULL_BUNDLE = "0x00000000_0xffffffff"


def _bad_request(reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=400)


def add_routes(app: web.Application, registry: TopicRegistry, coordinators: Coordinators) -> None:
    async def all_topic_stats(_request: web.Request) -> web.Response:
        nested: dict[str, Any] = {}
        for topic in sorted(registry.loaded(), key=lambda t: str(t.name)):
            namespace = f"{topic.name.tenant}/{topic.name.namespace}"
            bundle = nested.setdefault(namespace, {}).setdefault(FULL_BUNDLE, {})
            placement = await registry.placement.placement_of(topic.name, place=False)
            bundle.setdefault("persistent", {})[str(topic.name)] = stats.topic_stats(
                topic, placement
            )
        return web.json_response(nested)

    async def all_stable_positions(_request: web.Request) -> web.Response:
        return web.json_response(stable_positions(registry.loaded(), coordinators))

    async def one_stable_position(request: web.Request) -> web.Response:
        topic = await registry.get_stable(topic_name(request))
        return web.json_response(stable_position(topic, coordinators))

    async def peek_subscription(request: web.Request) -> web.Response:
        topic = await registry.get(topic_name(request), create=False)
        name = request.match_info["subscription"]
        subscription = topic.subscriptions.get(name)
        if subscription is None:
            return web.json_response(
                {"reason": f"subscription {name!r} does not exist on {topic.name}"}, status=404
            )
        try:
            level = parse_isolation_level(
                request.query.get("isolationLevel"), subscription.isolation_level
            )
            count = parse_count(request.query.get("count"))
        except ValueError as error:
            return _bad_request(str(error))
        return web.json_response(await peek(topic, subscription, level, count))

    topic_path = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_get("/admin/v2/broker-stats/topics", all_topic_stats)
    app.router.add_get("/admin/v3/transactions/stablePositions", all_stable_positions)
    app.router.add_get(
        "/admin/v3/transactions/stablePosition/{tenant}/{namespace}/{topic}", one_stable_position
    )
    app.router.add_get(topic_path + "/subscription/{subscription}/peek", peek_subscription)
