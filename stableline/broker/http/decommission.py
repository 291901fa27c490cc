"""Decommissioning a broker: its copies moved to the others before it is removed.

    POST   /admin/v2/brokers/{broker}/decommission    204: marked draining
    GET    /admin/v2/brokers/{broker}/decommission    its progress (below)
    DELETE /admin/v2/brokers/{broker}/decommission    204: taken back into placement

A draining broker (metadata/draining.py) is chosen by no placement and no ensemble
change, hands the topics it leads to other members of their ensembles, and every
writer of a topic whose ensemble names it replaces it at once
(cluster/rereplication.py), sending the new member every ledger. The progress:

    {"brokerId", "draining": bool, "live": bool, "copies": topics whose ensemble
     still names it, "ledTopics": those it leads, "copiesBeingMade": copies in the
     cluster still being sent to the members that replaced a lost or draining one}

`copies` at 0 (and `copiesBeingMade` at 0) says every copy is elsewhere: the broker
can be stopped. A topic it leads whose other members are all away stays with it
until they are back. Answered in a cluster only (404 standalone: a broker of one copy).
"""

from __future__ import annotations

import json

from aiohttp import web

from stableline.broker.cluster.ownership import (
    COPYING_PREFIX,
    OwnershipRecord,
    TopicOwnership,
    ownership_dir,
)
from stableline.metadata import MetadataStoreUnavailable
from stableline.metadata.draining import list_draining, mark_draining, unmark_draining
from stableline.metadata.errors import InvalidPath


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


async def decommission_status(ownership: TopicOwnership, broker_id: str) -> dict:
    """The progress document of `broker_id` (see the module docstring): one read of
    every topic record, so it is the store's view at one moment."""
    store, cluster = ownership.store, ownership.cluster
    copies = led = being_made = 0
    for _path, result in await store.scan(ownership_dir(cluster)):
        record = OwnershipRecord.from_json(result.value)
        if broker_id in record.ensemble:
            copies += 1
            led += int(record.leader == broker_id)
        being_made += sum(1 for d in record.data_dirs.values() if d.startswith(COPYING_PREFIX))
    return {
        "brokerId": broker_id,
        "draining": broker_id in await list_draining(store, cluster),
        "live": ownership.live_broker(broker_id) is not None,
        "copies": copies,
        "ledTopics": led,
        "copiesBeingMade": being_made,
    }


def add_routes(app: web.Application, ownership: TopicOwnership | None) -> None:
    path = "/admin/v2/brokers/{broker}/decommission"

    def broker_of(request: web.Request) -> str:
        return request.match_info["broker"]

    async def mark(request: web.Request) -> web.Response:
        assert ownership is not None
        broker_id = broker_of(request)
        known = ownership.live_broker(broker_id) is not None or broker_id in set(
            ownership.leaders().values()
        )
        if not known:
            return _error(
                404,
                f"broker {broker_id} is neither live nor leading a topic in cluster "
                f"{ownership.cluster}: name it by its id, HOST:PORT (admin brokers list)",
            )
        await mark_draining(ownership.store, ownership.cluster, broker_id)
        return web.Response(status=204)

    async def unmark(request: web.Request) -> web.Response:
        assert ownership is not None
        await unmark_draining(ownership.store, ownership.cluster, broker_of(request))
        return web.Response(status=204)

    async def status(request: web.Request) -> web.Response:
        assert ownership is not None
        document = await decommission_status(ownership, broker_of(request))
        return web.Response(text=json.dumps(document), content_type="application/json")

    async def standalone(request: web.Request) -> web.Response:
        return _error(
            404,
            "this broker runs standalone (the embedded metadata store): it keeps the one "
            "copy of its topics, and there is no other broker to move them to",
        )

    def guarded(handler):
        async def call(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except InvalidPath as error:
                return _error(400, str(error))
            except MetadataStoreUnavailable as error:
                return _error(503, f"the cluster's metadata store cannot be reached: {error}")

        return call

    for add, handler in (
        (app.router.add_post, mark),
        (app.router.add_get, status),
        (app.router.add_delete, unmark),
    ):
        add(path, guarded(standalone if ownership is None else handler))
