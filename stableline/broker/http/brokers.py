"""Pulsar's cluster listings over HTTP: the clusters, and a cluster's live brokers.

    GET /admin/v2/clusters               ["standalone", ...]
    GET /admin/v2/brokers/{cluster}      ["host:port", ...] (advertised gRPC addresses)

An unknown cluster is 404; a metadata store that cannot answer is 503 (retry).
"""

from __future__ import annotations

from aiohttp import web

from stableline.metadata import (
    ClusterMetadataStore,
    InvalidPath,
    MetadataStoreUnavailable,
    list_brokers,
    list_clusters,
)


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def add_routes(app: web.Application, store: ClusterMetadataStore) -> None:
    async def clusters(_request: web.Request) -> web.Response:
        try:
            return web.json_response(await list_clusters(store))
        except MetadataStoreUnavailable as error:
            return _error(503, str(error))

    async def brokers(request: web.Request) -> web.Response:
        cluster = request.match_info["cluster"]
        try:
            if cluster not in await list_clusters(store):
                return _error(404, f"cluster {cluster} does not exist; see /admin/v2/clusters")
            live = await list_brokers(store, cluster)
        except InvalidPath as error:
            return _error(400, str(error))
        except MetadataStoreUnavailable as error:
            return _error(503, str(error))
        return web.json_response([broker.broker_id for broker in live])

    app.router.add_get("/admin/v2/clusters", clusters)
    app.router.add_get("/admin/v2/brokers/{cluster}", brokers)
