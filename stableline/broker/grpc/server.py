"""The gRPC face's server: options, interceptors, services, health, and its shutdown.

Built from what the app gives it (the core's objects, the connection table, the
security's interceptors and how it binds a port); the app decides nothing here.

Promises:
- Unparsable requests are refused before anything else looks at them; a stream that
  opens with nothing is ended; then the token check; only an authenticated call
  takes a connection slot.
- Past the port's socket cap, and for one address past its per-address cap, sockets
  are refused or shut down (grpc's own option, GrpcSocketGuard).
- `stop` gives open calls `grace_s` to finish, then cancels them, and logs which.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2

from managed_ledger import ReplicaLogs
from stableline.broker.cluster.lookup import TopicLookup
from stableline.broker.cluster.topic_moves import TopicMoves
from stableline.broker.config import BrokerConfig
from stableline.broker.connections.caps import ConnectionCaps
from stableline.broker.grpc.admin_service import AdminService
from stableline.broker.grpc.broker_service import BrokerService
from stableline.broker.grpc.connection_limit import (
    CallTrackingInterceptor,
    ConnectionLimitInterceptor,
    ConnectionTable,
    OpeningDeadlineInterceptor,
)
from stableline.broker.grpc.malformed_requests import MalformedRequestInterceptor
from stableline.broker.grpc.peer_service import PeerService
from stableline.broker.grpc.services import CLIENT_SERVICES, add_services
from stableline.broker.grpc.socket_guard import GrpcSocketGuard
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import BrokerParticipant

log = logging.getLogger(__name__)

# Services a health check may ask about, beside the server as a whole ("").
HEALTH_SERVICES = ("", *CLIENT_SERVICES)


class GrpcServer:
    """The broker's gRPC port: clients' Broker and Admin calls, the peers' calls."""

    def __init__(
        self,
        config: BrokerConfig,
        registry: TopicRegistry,
        coordinators: Coordinators,
        lookup: TopicLookup,
        partitioned: PartitionedTopics,
        participant: BrokerParticipant,
        replicas: ReplicaLogs,
        connections: ConnectionTable,
        caps: ConnectionCaps,
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        moves: TopicMoves | None = None,
    ):
        self._connections = connections
        self._caps = caps
        self._health = health.aio.HealthServicer()
        self._guard: GrpcSocketGuard | None = None
        self.port = 0
        self._started = False
        message_limit = config.max_message_size + 1024 * 1024
        authentication_ms = max(1, int(config.connection_authentication_timeout_s * 1000))
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", message_limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
                # Clients ping every 30 s to keep idle streams alive; gRPC's default
                # (one ping per 5 minutes, then GOAWAY "too_many_pings") would drop
                # an idle consumer after about a minute and a half.
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                # Connections, calls or not, are capped at the accept; one must be
                # through its TLS and HTTP/2 handshake in time, and one with no call
                # open is closed (a GOAWAY: clients reconnect for their next call).
                ("grpc.max_allowed_incoming_connections", caps.grpc_sockets),
                ("grpc.server_handshake_timeout_ms", authentication_ms),
                ("grpc.max_connection_idle_ms", authentication_ms),
            ],
            interceptors=[
                CallTrackingInterceptor(connections),
                MalformedRequestInterceptor(),
                OpeningDeadlineInterceptor(config.connection_idle_timeout_s),
                *interceptors,
                ConnectionLimitInterceptor(connections),
            ],
        )
        # The app hands it the Kafka face's group offsets once the Kafka port is open.
        self.peer_service = PeerService(coordinators, participant, replicas, registry)
        add_services(
            self.server,
            BrokerService(registry, config, coordinators, lookup),
            AdminService(registry, coordinators, partitioned, moves),
            self.peer_service,
            self._health,
        )

    def bind(self, address: str, add_port: Callable[[grpc.aio.Server, str], int]) -> int:
        """Bind `address` with `add_port` (plaintext or TLS): the port, 0 when the
        bind failed (grpc logs why)."""
        try:
            self.port = add_port(self.server, address)
        except RuntimeError:  # grpc's "Failed to bind to address ..."
            self.port = 0
        return self.port

    async def start(self) -> None:
        assert self.port, "bind() first"
        await self.server.start()
        self._started = True
        # One address's sockets past its cap, calls or not, are shut down.
        self._guard = GrpcSocketGuard(
            self.port, self._caps.grpc.per_address, self._connections.calling
        )
        self._guard.start()

    async def serving(self) -> None:
        """Health checks answer SERVING from now on."""
        for service in HEALTH_SERVICES:
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def not_serving(self) -> None:
        """Health checks answer NOT_SERVING from now on (the broker is stopping)."""
        await self._health.enter_graceful_shutdown()

    async def stop_guard(self) -> None:
        if self._guard is not None:
            await self._guard.stop()

    async def stop(self, grace_s: float) -> None:
        """Wait up to `grace_s` for open calls to finish, then cancel the rest."""
        started = time.monotonic()
        calls, clients = self._connections.open_calls(), len(self._connections)
        if calls:
            # Streams (producers, consumers) end only when their clients close
            # them, so with any open the whole grace is waited for.
            log.info(
                "stopping: %d gRPC call(s) open (streams included) from %d client(s); "
                "waiting up to %.0f s for them to finish, then cancelling the rest",
                calls,
                clients,
                grace_s,
            )
        else:
            log.info("stopping: no gRPC calls open")
        await self.server.stop(grace_s)
        waited = time.monotonic() - started
        log.info(
            "gRPC server stopped after %.1f s: %s",
            waited,
            "the grace ran out and the calls still open were cancelled"
            if waited >= grace_s
            else "every call had finished",
        )
