"""The broker process: storage, topic registry, gRPC and HTTP faces, clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import signal
import sys

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from managed_ledger import MetadataStore
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from stableline.broker.config import BrokerConfig
from stableline.broker.connection_limit import (
    ConnectionLimitInterceptor,
    ConnectionTable,
    add_routes,
)
from stableline.broker.failpoints import Failpoints
from stableline.broker.grpc_admin import AdminService
from stableline.broker.grpc_broker import BrokerService
from stableline.broker.http_admin import make_app
from stableline.broker.malformed_requests import MalformedRequestInterceptor
from stableline.broker.registry import TopicRegistry
from stableline.broker.security.broker_security import BrokerSecurity
from stableline.broker.security.settings import SecuritySettings
from stableline.broker.transactions import BrokerParticipant, settle_leftovers
from txnbuffer import TransactionCoordinator, TransactionLimits

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.store: MetadataStore | None = None
        self.registry: TopicRegistry | None = None
        self.coordinator: TransactionCoordinator | None = None
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._health = health.aio.HealthServicer()
        self._sync_task: asyncio.Task | None = None
        self.failpoints: Failpoints | None = None
        self.security: BrokerSecurity | None = None
        self.grpc_port = 0
        self.http_port = 0
        self.connections = ConnectionTable(config.max_connections)

    async def start(self) -> None:
        config = self.config
        security_settings = SecuritySettings.from_config(config)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = MetadataStore(config.metadata_dir)
        self.security = BrokerSecurity.open(security_settings, self.store)
        self.registry = TopicRegistry(config, self.store)
        self.coordinator = TransactionCoordinator(
            0,
            self.store,
            BrokerParticipant(self.registry),
            TransactionLimits(
                config.max_open_transactions, config.max_open_transactions_per_client
            ),
        )
        if config.failpoints:
            self.failpoints = Failpoints(config.failpoints)
            self.registry.failpoint = self.coordinator.failpoint = self.failpoints
        # Topics recover in the background (serving meanwhile); each settles what
        # the last run left ongoing once both it and the coordinator are ready.
        coordinator_ready = asyncio.Event()
        self.registry.on_recovered = functools.partial(
            settle_leftovers, coordinator=self.coordinator, coordinator_ready=coordinator_ready
        )
        await self.registry.load_all()
        await self.coordinator.recover()
        coordinator_ready.set()

        message_limit = config.max_message_size + 1024 * 1024
        self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", message_limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
                # Clients ping every 30 s to keep idle streams alive; gRPC's default
                # (one ping per 5 minutes, then GOAWAY "too_many_pings") would drop
                # an idle consumer after about a minute and a half.
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ],
            # Unparsable requests are refused before anything else looks at them; then
            # the connection count, so a refused connection costs no token check.
            interceptors=[
                MalformedRequestInterceptor(),
                ConnectionLimitInterceptor(self.connections),
                *self.security.grpc_interceptors(),
            ],
        )
        broker_pb2_grpc.add_BrokerServicer_to_server(
            BrokerService(self.registry, config, self.coordinator), self._grpc
        )
        admin_pb2_grpc.add_AdminServicer_to_server(
            AdminService(self.registry, self.coordinator), self._grpc
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        reflection.enable_server_reflection(
            (
                broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name,
                admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
                health.SERVICE_NAME,
                reflection.SERVICE_NAME,
            ),
            self._grpc,
        )
        self.grpc_port = self.security.add_grpc_port(self._grpc, config.grpc_address)
        if self.grpc_port == 0:
            raise OSError(f"cannot listen for gRPC on {config.grpc_address}")
        await self._grpc.start()

        http_app = make_app(self.registry, self.coordinator)
        add_routes(http_app, self.connections)
        self.security.attach_http(http_app)
        self._http = web.AppRunner(http_app, access_log=None)
        await self._http.setup()
        host, port = _split_address(config.http_address)
        site = web.TCPSite(
            self._http, host, port, reuse_address=True, ssl_context=self.security.http_ssl_context()
        )
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]

        for service in ("", "stableline.v1.Broker", "stableline.v1.Admin"):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._sync_task = asyncio.create_task(self._sync_metadata())
        log.info("broker ready: grpc port %d, http port %d", self.grpc_port, self.http_port)

    async def _sync_metadata(self) -> None:
        # Cursor positions are written without fsync; make them durable periodically.
        while True:
            await asyncio.sleep(self.config.metadata_sync_interval_s)
            await asyncio.get_running_loop().run_in_executor(None, self.store.sync)

    async def stop(self) -> None:
        """Stop accepting, finish what is in flight, close ledgers, sync metadata."""
        log.info("broker stopping")
        await self._health.enter_graceful_shutdown()
        if self._grpc is not None:
            await self._grpc.stop(SHUTDOWN_GRACE_S)
        if self._http is not None:
            await self._http.cleanup()
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sync_task
        if self.coordinator is not None:
            await self.coordinator.close()
        if self.registry is not None:
            await self.registry.close()
        if self.store is not None:
            self.store.close()
        log.info("broker stopped")


async def serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    await broker.start()
    # One line on stdout that tools and tests can read for the bound ports.
    print(
        json.dumps(
            {
                "event": "ready",
                "grpc_port": broker.grpc_port,
                "http_port": broker.http_port,
                "tls": broker.security.settings.tls is not None,
            }
        ),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if broker.failpoints is not None:
        loop.add_signal_handler(signal.SIGUSR1, broker.failpoints.release)
    await stop.wait()
    await broker.stop()


def run(config: BrokerConfig) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(serve(config))
