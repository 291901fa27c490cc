"""The cluster as this broker sees it, for the dashboard and scripts: its brokers, and
each topic's owner.

    GET /admin/v2/clusters/{cluster}/brokers
        [{"brokerId", "serviceUrl", "httpUrl", "live", "goneSinceMs", "version",
          "startedAtMs", "hostname", "pid", "load", "ownedTopics", "thisBroker",
          "draining" (in a cluster: being decommissioned)}]
    GET /admin/v2/clusters/{cluster}/topicOwners
        {"persistent://tenant/ns/topic": "host:port" (the owner's broker id), ...}

Only this broker's own cluster is answered (404 for another: ask one of its
brokers). In a cluster the answers come from this broker's ownership view (the
records and live brokers its watches keep current; no round trip to etcd), and a
broker that leads topics but is not live is listed with `"live": false` and what
is known of it. Standalone (the embedded store) the cluster is this broker, which
owns every topic it has.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from stableline.broker.cluster.lookup import TopicLookup
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.topics.registry import TopicRegistry
from stableline.metadata import (
    BrokerInfo,
    ClusterMetadataStore,
    MetadataStoreUnavailable,
    list_brokers,
)


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _service_url(info: BrokerInfo) -> str:
    # One port serves TLS or not, and both of a broker's ports alike.
    scheme = "stableline+ssl" if info.http_url.startswith("https://") else "stableline"
    return f"{scheme}://{info.grpc_address}"


def broker_document(info: BrokerInfo, owned: int, this_broker: bool) -> dict[str, Any]:
    return {
        "brokerId": info.broker_id,
        "serviceUrl": _service_url(info),
        "httpUrl": info.http_url,
        "live": True,
        "goneSinceMs": None,
        "version": info.version,
        "startedAtMs": info.started_ms,
        "hostname": info.hostname,
        "pid": info.pid,
        "load": info.load,
        "ownedTopics": owned,
        "thisBroker": this_broker,
    }


def gone_broker_document(broker_id: str, owned: int, gone_since_ms: int | None) -> dict[str, Any]:
    """A broker known only as the leader of topics: not live, nothing else known."""
    return {
        "brokerId": broker_id,
        "serviceUrl": None,
        "httpUrl": None,
        "live": False,
        "goneSinceMs": gone_since_ms,
        "version": None,
        "startedAtMs": None,
        "hostname": None,
        "pid": None,
        "load": {},
        "ownedTopics": owned,
        "thisBroker": False,
    }


def add_routes(
    app: web.Application,
    store: ClusterMetadataStore,
    cluster_name: str,
    registry: TopicRegistry,
    lookup: TopicLookup,
    ownership: TopicOwnership | None = None,
) -> None:
    """`ownership`: the cluster's records this broker follows; None standalone."""

    def this_broker_id() -> str:
        advertised = lookup.advertised
        return advertised.grpc_address if advertised is not None else ""

    def other_cluster(request: web.Request) -> web.Response | None:
        cluster = request.match_info["cluster"]
        if cluster == cluster_name:
            return None
        return _error(
            404,
            f"this broker is in cluster {cluster_name}, not {cluster}: ask one of "
            f"{cluster}'s brokers (see /admin/v2/clusters)",
        )

    async def standalone_brokers(request: web.Request) -> web.Response:
        if (refused := other_cluster(request)) is not None:
            return refused
        me = this_broker_id()
        try:
            live = await list_brokers(store, cluster_name)
        except MetadataStoreUnavailable as error:
            return _error(503, str(error))
        documents = [
            broker_document(
                info, registry.count() if info.broker_id == me else 0, info.broker_id == me
            )
            for info in live
        ]
        return web.json_response(documents)

    async def standalone_topic_owners(request: web.Request) -> web.Response:
        if (refused := other_cluster(request)) is not None:
            return refused
        return web.json_response(dict.fromkeys(registry.names(), this_broker_id()))

    def cluster_brokers(ownership: TopicOwnership):
        async def brokers(request: web.Request) -> web.Response:
            if (refused := other_cluster(request)) is not None:
                return refused
            me = this_broker_id()
            live = {info.broker_id: info for info in ownership.live_brokers()}
            documents = [
                broker_document(info, ownership.led_by(broker_id), broker_id == me)
                for broker_id, info in sorted(live.items())
            ]
            for broker_id in sorted(set(ownership.leaders().values()) - live.keys()):
                documents.append(
                    gone_broker_document(
                        broker_id, ownership.led_by(broker_id), ownership.gone_since_ms(broker_id)
                    )
                )
            for document in documents:
                # Being decommissioned (as this broker last read it, within a second).
                document["draining"] = document["brokerId"] in ownership.draining
            return web.json_response(documents)

        return brokers

    def cluster_topic_owners(ownership: TopicOwnership):
        async def topic_owners(request: web.Request) -> web.Response:
            if (refused := other_cluster(request)) is not None:
                return refused
            return web.json_response(dict(sorted(ownership.leaders().items())))

        return topic_owners

    # Chosen once: standalone the cluster is this broker, which owns every topic it has.
    brokers, topic_owners = (
        (standalone_brokers, standalone_topic_owners)
        if ownership is None
        else (cluster_brokers(ownership), cluster_topic_owners(ownership))
    )
    app.router.add_get("/admin/v2/clusters/{cluster}/brokers", brokers)
    app.router.add_get("/admin/v2/clusters/{cluster}/topicOwners", topic_owners)
