"""The HTTP face's server: every route and middleware on one app, and its port.

Built from what the app gives it: the core's objects, the connection counting, and
what other parts add to the port (`more_routes`: the gRPC and Kafka ports'
connection stats; `secure`: the permission routes and the token check, last, so
their middleware runs after the ones here).

Middlewares run in this order: errors to JSON (http/app.py), then the connection
count and header deadline (a request refused by the token check has still sent its
headers), then the refusal of a browser's cross-site state change, then the token
check.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence

from aiohttp import web

from stableline.broker.cluster.lookup import TopicLookup
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.topic_moves import TopicMoves
from stableline.broker.config import BrokerConfig
from stableline.broker.http import cluster as http_cluster
from stableline.broker.http import decommission as http_decommission
from stableline.broker.http import load as http_load
from stableline.broker.http import lookup as http_lookup
from stableline.broker.http import moves as http_moves
from stableline.broker.http.app import make_app
from stableline.broker.http.brokers import add_routes as add_brokers_routes
from stableline.broker.http.connection_limit import BoundedTCPSite, HttpConnections
from stableline.broker.http.connection_limit import add_routes as add_connection_routes
from stableline.broker.http.csrf import state_change_middleware
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.stats import RecoveryWindow
from stableline.metadata import ClusterMetadataStore

AddRoutes = Callable[[web.Application], None]


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT (HOST may be a bracketed IPv6 address); ValueError otherwise."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class HttpServer:
    """The broker's HTTP port: admin API, metrics, dashboard."""

    def __init__(
        self,
        config: BrokerConfig,
        registry: TopicRegistry,
        coordinators: Coordinators,
        recovery: RecoveryWindow,
        partitioned: PartitionedTopics,
        lookup: TopicLookup,
        cluster_store: ClusterMetadataStore,
        ownership: TopicOwnership | None,
        connections: HttpConnections,
        more_routes: Sequence[AddRoutes],
        secure: AddRoutes,
        moves: TopicMoves | None = None,
        forward_unload: http_moves.ForwardUnload | None = None,
    ):
        self._config = config
        self._connections = connections
        app = make_app(registry, coordinators, recovery, partitioned, config.cluster_name)
        http_lookup.add_routes(app, lookup)
        http_load.add_routes(
            app,
            cluster_store,
            config.cluster_name,
            lambda: lookup.advertised.grpc_address if lookup.advertised is not None else "",
        )
        add_brokers_routes(app, cluster_store)
        http_cluster.add_routes(
            app, cluster_store, config.cluster_name, registry, lookup, ownership
        )
        http_moves.add_routes(app, registry, moves, forward_unload)
        http_decommission.add_routes(app, ownership)
        app.middlewares.append(connections.middleware())
        app.middlewares.append(state_change_middleware())
        add_connection_routes(app, connections)
        for add in more_routes:
            add(app)
        secure(app)
        self.app = app
        # An idle keep-alive connection closes as an idle gRPC stream would.
        self._runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=config.connection_idle_timeout_s
        )
        self.port = 0

    async def start(self, ssl_context: ssl.SSLContext | None) -> int:
        """Listen on the configured address: the bound port. OSError when the bind
        fails, ValueError for an address that is not HOST:PORT."""
        await self._runner.setup()
        host, port = split_address(self._config.http_address)
        site = BoundedTCPSite(self._runner, host, port, self._connections, ssl_context=ssl_context)
        await site.start()
        self.port = site.bound_port
        return self.port

    async def stop(self) -> None:
        await self._runner.cleanup()
