"""Partitioned topics on Pulsar's admin paths.

    PUT    /admin/v2/persistent/{tenant}/{ns}/{topic}/partitions     body N: 204; 409 if taken
    POST   .../{topic}/partitions                                    body N: grow to N, 204
    GET    .../{topic}/partitions                                    {"partitions": N} (0: not partitioned)
    DELETE .../{topic}/partitions[?force=true]                       204; 409 while in use
    GET    .../{topic}/partitioned-stats                             PartitionedTopicStats
    GET    /admin/v2/persistent/{tenant}/{ns}/partitioned            partitioned topics' names

A count that is not a whole number, or out of range, answers 400 with the range.
"""

from __future__ import annotations

import json

from aiohttp import web

from stableline.broker.http.paths import topic_name
from stableline.broker.topics.partitioned import InvalidPartitionCountError, PartitionedTopics
from stableline.topic_name import TopicName


async def _count(request: web.Request) -> int:
    text = await request.text()
    try:
        count = json.loads(text)
    except ValueError:
        count = text
    if not isinstance(count, int) or isinstance(count, bool):
        raise InvalidPartitionCountError(
            f"the body must be the number of partitions, a whole number (e.g. 4), not {text!r}"
        )
    return count


def add_routes(app: web.Application, partitioned: PartitionedTopics) -> None:
    async def create(request: web.Request) -> web.Response:
        await partitioned.create(topic_name(request), await _count(request))
        return web.Response(status=204)

    async def grow(request: web.Request) -> web.Response:
        await partitioned.grow(topic_name(request), await _count(request))
        return web.Response(status=204)

    async def metadata(request: web.Request) -> web.Response:
        return web.json_response(await partitioned.metadata_document(topic_name(request)))

    async def delete(request: web.Request) -> web.Response:
        force = request.query.get("force", "false").lower() == "true"
        await partitioned.delete(topic_name(request), force=force)
        return web.Response(status=204)

    async def partitioned_stats(request: web.Request) -> web.Response:
        return web.json_response(await partitioned.stats(topic_name(request)))

    async def list_partitioned(request: web.Request) -> web.Response:
        info = request.match_info
        namespace = TopicName.parse(
            f"persistent://{info['tenant']}/{info['namespace']}/_"
        ).namespace_path
        return web.json_response(partitioned.metadata.names(namespace))

    base = "/admin/v2/persistent/{tenant}/{namespace}"
    app.router.add_put(base + "/{topic}/partitions", create)
    app.router.add_post(base + "/{topic}/partitions", grow)
    app.router.add_get(base + "/{topic}/partitions", metadata)
    app.router.add_delete(base + "/{topic}/partitions", delete)
    app.router.add_get(base + "/{topic}/partitioned-stats", partitioned_stats)
    app.router.add_get(base + "/partitioned", list_partitioned)
