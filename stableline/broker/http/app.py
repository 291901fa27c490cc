"""HTTP admin on Pulsar's paths, /metrics, and the dashboard at / (stableline.broker.http.dashboard)."""

from __future__ import annotations

import logging
import time
from importlib.metadata import PackageNotFoundError, version

from aiohttp import web

from managed_ledger import TxnId
from stableline.broker.http import dashboard
from stableline.broker.http import diagnostics as http_diagnostics
from stableline.broker.http import errors as http_errors
from stableline.broker.http import messages as http_messages
from stableline.broker.http import namespaces as http_namespaces
from stableline.broker.http import partitioned as http_partitioned
from stableline.broker.http import subscriptions as http_subscriptions
from stableline.broker.http import transactions as http_transactions
from stableline.broker.http.errors import error_response
from stableline.broker.http.paths import namespace_path, topic_name
from stableline.broker.observability.metrics import make_registry, render
from stableline.broker.topics import stats
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn import stats as txn_stats
from stableline.broker.txn.coordinators import Coordinators

log = logging.getLogger(__name__)


def make_app(
    registry: TopicRegistry,
    coordinators: Coordinators,
    recovery: txn_stats.RecoveryWindow | None = None,
    partitioned: PartitionedTopics | None = None,
    cluster_name: str = "standalone",
) -> web.Application:
    recovery = recovery or txn_stats.RecoveryWindow()
    metrics_registry = make_registry(registry, coordinators)
    app = web.Application(middlewares=[http_errors.errors], client_max_size=1024 * 1024)

    started_at_ms = int(time.time() * 1000)
    try:
        broker_version = version("stableline")
    except PackageNotFoundError:
        broker_version = "unknown"

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def runtime(_request: web.Request) -> web.Response:
        # Counters and rates count from the broker's start: readers need to know when
        # that was to tell a restart from a quiet topic. The cluster names the
        # cluster's own documents (/admin/v2/clusters/{cluster}/...).
        now_ms = int(time.time() * 1000)
        return web.json_response(
            {
                "version": broker_version,
                "startedAtMs": started_at_ms,
                "uptimeMs": now_ms - started_at_ms,
                "cluster": cluster_name,
            }
        )

    async def list_topics(request: web.Request) -> web.Response:
        namespace = namespace_path(request)
        if not registry.namespace_exists(namespace):
            return error_response(
                404,
                f"namespace {namespace} does not exist: a namespace exists once a topic "
                f"is created in it (public/default always does)",
            )
        return web.json_response(registry.cluster_names(namespace))

    async def create_topic(request: web.Request) -> web.Response:
        name = topic_name(request)
        if registry.exists(name):
            return error_response(409, f"topic {name} already exists")
        await registry.get(name)
        return web.Response(status=204)

    async def delete_topic(request: web.Request) -> web.Response:
        await registry.delete(topic_name(request))
        return web.Response(status=204)

    async def topic_stats(request: web.Request) -> web.Response:
        topic = await registry.get(topic_name(request), create=False)
        placement = await registry.placement.placement_of(topic.name, place=False)
        return web.json_response(stats.topic_stats(topic, placement))

    async def internal_stats(request: web.Request) -> web.Response:
        topic = await registry.get(topic_name(request), create=False)
        return web.json_response(stats.internal_stats(topic))

    async def transaction_buffer_stats(request: web.Request) -> web.Response:
        topic = await registry.get(topic_name(request), create=False)
        return web.json_response(topic.buffer.stats())

    async def transaction_metadata(request: web.Request) -> web.Response:
        try:
            txn_id = TxnId.parse(request.query.get("txnId", ""))
        except ValueError as error:
            return error_response(400, f"txnId: {error}")
        return web.json_response((await coordinators.leading(txn_id)).get(txn_id).describe())

    async def coordinator_stats(request: web.Request) -> web.Response:
        text = request.query.get("coordinatorId")
        if text is None:
            return web.json_response(txn_stats.coordinators_stats(coordinators, recovery))
        if not text.isascii() or not text.isdigit():
            return error_response(400, f"coordinatorId must be a whole number >= 0, got {text!r}")
        coordinator = coordinators.local.get(int(text))
        if coordinator is None:
            return error_response(
                404,
                f"transaction coordinator {text} is not led by this broker (it leads "
                f"{sorted(coordinators.local)} of {coordinators.shard_count} shards)",
            )
        return web.json_response(txn_stats.coordinator_stats(coordinator, recovery))

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(
            body=render(metrics_registry), content_type="text/plain", charset="utf-8"
        )

    base = "/admin/v2/persistent/{tenant}/{namespace}"
    app.router.add_get("/admin/v2/brokers/health", health)
    app.router.add_get("/admin/v2/brokers/runtime", runtime)
    app.router.add_get(base, list_topics)
    app.router.add_put(base + "/{topic}", create_topic)
    app.router.add_delete(base + "/{topic}", delete_topic)
    app.router.add_get(base + "/{topic}/stats", topic_stats)
    app.router.add_get(base + "/{topic}/internalStats", internal_stats)
    transactions = "/admin/v3/transactions"
    app.router.add_get(
        transactions + "/transactionBufferStats/{tenant}/{namespace}/{topic}",
        transaction_buffer_stats,
    )
    app.router.add_get(transactions + "/transactionMetadata", transaction_metadata)
    app.router.add_get(transactions + "/coordinatorStats", coordinator_stats)
    app.router.add_get("/metrics", metrics)
    http_diagnostics.add_routes(app, registry, coordinators)
    http_subscriptions.add_routes(app, registry)
    http_transactions.add_routes(app, registry, coordinators, recovery)
    http_messages.add_routes(app, registry)
    http_namespaces.add_routes(app, registry)
    if partitioned is not None:
        http_partitioned.add_routes(app, partitioned)
    dashboard.add_routes(app)
    return app
