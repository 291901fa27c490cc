"""The cluster's load reports, as its brokers last wrote them to their registrations.

    GET /admin/v2/brokers/load
        [{"brokerId", "load": {"topics", "loadedTopics", "topicsLed", "connections",
          "msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut" (bytes/s),
          "cpu" (cores busy), "rssBytes", "loadScore"}, "busiestTopics": {topic: score},
          "thisBroker"}, ...]   by broker id

Any broker answers, from one read of the registrations (so every broker answers
alike); standalone the list is this broker. Rates are over the brokers' last report
interval (`load_report_interval_s`); observability/load_report.py says what each
figure is. A metadata store that cannot answer is 503 (retry).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from stableline.metadata import ClusterMetadataStore, MetadataStoreUnavailable, list_brokers


def add_routes(
    app: web.Application,
    store: ClusterMetadataStore,
    cluster_name: str,
    this_broker_id: Callable[[], str],
) -> None:
    """Registered before `/admin/v2/brokers/{cluster}` (brokers.py), as health is."""

    async def load(_request: web.Request) -> web.Response:
        try:
            live = await list_brokers(store, cluster_name)
        except MetadataStoreUnavailable as error:
            return web.json_response({"reason": str(error)}, status=503)
        me = this_broker_id()
        return web.json_response(
            [
                {
                    "brokerId": info.broker_id,
                    "load": info.load,
                    "busiestTopics": info.topic_loads,
                    "thisBroker": info.broker_id == me,
                }
                for info in sorted(live, key=lambda info: info.broker_id)
            ]
        )

    app.router.add_get("/admin/v2/brokers/load", load)
