"""The broker process: storage, topic registry, gRPC and HTTP faces, clean shutdown.

Startup refuses, before it recovers or writes anything, a data dir another process
holds (managed_ledger/data_dir_lock.py) and a listen address already taken; either
is a `StartupError` whose text is the one line an operator needs (what, where, which
flag to change). Ready, the log says what runs where; on SIGTERM it says what the
shutdown waits for and when it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import importlib.metadata
import json
import logging
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import grpc
from aiohttp import web
from grpc_health.v1 import health, health_pb2

from managed_ledger import LocalStore
from managed_ledger.data_dir_lock import DataDirInUseError, DataDirLock
from stableline.broker.app.kafka import KafkaStartupError, start_kafka
from stableline.broker.app.security import BrokerSecurity
from stableline.broker.cluster.lookup import BrokerAddresses, TopicLookup, advertised_host
from stableline.broker.cluster.membership import Membership, with_advertised_address
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.partitions import ClusterPartitions
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.cluster.shared_metadata import SharedMetadata
from stableline.broker.cluster.shared_metadata.joining import join_cluster
from stableline.broker.config import BrokerConfig
from stableline.broker.connections.caps import RESERVED_FILES, connection_caps
from stableline.broker.errors import BrokerError
from stableline.broker.failpoints import Failpoints
from stableline.broker.grpc.admin_service import AdminService
from stableline.broker.grpc.broker_service import BrokerService
from stableline.broker.grpc.connection_limit import (
    CallTrackingInterceptor,
    ConnectionLimitInterceptor,
    ConnectionTable,
    OpeningDeadlineInterceptor,
    add_routes,
)
from stableline.broker.grpc.malformed_requests import MalformedRequestInterceptor
from stableline.broker.grpc.peer_client import GrpcPeerClient
from stableline.broker.grpc.peer_service import PeerService
from stableline.broker.grpc.services import CLIENT_SERVICES, add_services
from stableline.broker.grpc.socket_guard import GrpcSocketGuard
from stableline.broker.http import cluster as http_cluster
from stableline.broker.http import lookup as http_lookup
from stableline.broker.http.app import make_app
from stableline.broker.http.brokers import add_routes as add_brokers_routes
from stableline.broker.http.connection_limit import BoundedTCPSite, HttpConnections
from stableline.broker.http.connection_limit import add_routes as add_http_routes
from stableline.broker.http.csrf import state_change_middleware
from stableline.broker.kafka.server.listener import KafkaListener
from stableline.broker.kafka.server.listener import add_routes as add_kafka_connection_routes
from stableline.broker.security.file_modes import (
    restrict_data_dir,
    restrict_top_of_data_dir,
    use_owner_only_umask,
)
from stableline.broker.security.permissions import EmbeddedPermissionStore
from stableline.broker.security.settings import SecuritySettings
from stableline.broker.topics.partition_counts import EmbeddedPartitionedMetadata
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.txn.coordinator_errors import ShardLogConflictError
from stableline.broker.txn.coordinator_shards import (
    DEFAULT_CLUSTER_SHARDS,
    ShardRecords,
    check_shard_count,
    cluster_shard_count,
    recorded_shard_count,
)
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import (
    BrokerParticipant,
    settle_leftovers,
    settle_remote_acks,
)
from stableline.broker.txn.stats import RecoveryWindow
from stableline.broker.txn.transactional_acks import restore_pending_acks
from stableline.metadata import MetadataStoreError, kafka_node_id
from txnbuffer import TransactionCoordinator, TransactionLimits

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0
# Below this open-files soft limit the banner warns: Kafka and Pulsar ask for 100,000+.
LOW_OPEN_FILES_LIMIT = 65_536


# How a refusal of the Kafka address says what to do.
KAFKA_FLAG = "--kafka HOST:PORT, or --kafka '' to turn the Kafka port off"


class StartupError(BrokerError):
    """The broker cannot start; the text is one line naming the cause and the fix."""

    code = "Internal"


def lock_data_dir(config: BrokerConfig) -> DataDirLock:
    """Hold the data dir for this process (its metadata store's lock) or refuse.

    The command line takes it before anything writes under the data dir; the broker's
    metadata store shares it (the lock counts holders within a process). From here on
    the process creates files for its owner only, the lock's own directories first, so
    a fresh data dir has nothing to tighten at start.
    """
    use_owner_only_umask()
    try:
        return DataDirLock.acquire(config.metadata_dir)
    except DataDirInUseError as error:
        raise _data_dir_in_use(config.data_dir, error) from None
    except OSError as error:  # not writable, not a directory, ...
        raise StartupError(f"cannot use data dir {config.data_dir}: {error}") from None


async def _check_metadata_store_access(store, config: BrokerConfig) -> None:
    """A shared store anyone can read and write is a WARNING, or under
    metadata_store_require_authentication (--secure) a refusal to start: whoever
    reaches it can grant themselves any right, forge broker registrations and
    ownership records."""
    try:
        open_to_anyone = await store.open_to_anyone()
    except MetadataStoreError as error:
        raise StartupError(f"cannot check the cluster metadata store: {error}") from None
    if not open_to_anyone:
        return
    what = (
        f"the cluster metadata store {store.description} answers clients that give no "
        f"credentials: anyone who reaches it can write grants, broker registrations and "
        f"topic ownership. Turn on etcd authentication (a user with read and write on "
        f"/, `etcdctl auth enable`; `stableline cluster up` does so) and give the user "
        f"as etcd://USER@HOST:PORT with --metadata-store-password-file"
    )
    if config.metadata_store_require_authentication:
        raise StartupError(f"{what} (refused: --secure / metadata_store_require_authentication)")
    log.warning("SECURITY: %s", what)


def _data_dir_in_use(data_dir: Path, error: DataDirInUseError) -> StartupError:
    holder = f"pid {error.pid}" if error.pid is not None else "another process"
    return StartupError(
        f"data dir {data_dir.resolve()} is in use by {holder}; stop that broker "
        f"or pass another --data-dir"
    )


def raise_open_files_limit() -> int:
    """Raise the open-files soft limit to the hard limit (Kafka and Pulsar ask
    operators for a high one; many systems start processes at 1024). Returns the
    soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            # An unlimited hard limit may still be capped by the kernel (nr_open).
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _cannot_listen(face: str, flag: str, address: str, reason: str) -> StartupError:
    return StartupError(f"cannot listen for {face} on {address}: {reason}; pass another {flag}")


def _bind_failure(error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return "the address is in use"
    return error.strerror or str(error)


def _check_address_free(face: str, flag: str, address: str) -> None:
    """Refuse an address something already listens on, before recovery starts.

    A probe, bound with SO_REUSEADDR as both servers bind (so a port left in
    TIME_WAIT is free) and closed at once; the real bind reports a race the same way.
    """
    try:
        host, port = _split_address(address)
    except ValueError as error:
        raise _cannot_listen(face, flag, address, str(error)) from None
    if port == 0:
        return
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(sockaddr)
    except OSError as error:
        raise _cannot_listen(face, flag, address, _bind_failure(error)) from None


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.store: LocalStore | None = None
        self.registry: TopicRegistry | None = None
        self.lookup: TopicLookup | None = None
        self.partitioned: PartitionedTopics | None = None
        self.kafka: KafkaListener | None = None
        self.kafka_port = 0
        self.coordinators: Coordinators | None = None
        self.membership: Membership | None = None
        # In a cluster: namespaces, grants and partition counts shared by the brokers,
        # and the calls to the brokers owning partitions.
        self.shared: SharedMetadata | None = None
        self.peers: PeerClient | None = None
        self._grpc: grpc.aio.Server | None = None
        self._grpc_guard: GrpcSocketGuard | None = None
        self._http: web.AppRunner | None = None
        self._health = health.aio.HealthServicer()
        self._background: set[asyncio.Task] = set()
        self._sync_task: asyncio.Task | None = None
        # The walk that tightens the data dir's modes, after start (file_modes.py).
        self._tighten_task: asyncio.Task | None = None
        self._tighten_stop = threading.Event()
        self.failpoints: Failpoints | None = None
        self.security: BrokerSecurity | None = None
        self.grpc_port = 0
        self.http_port = 0
        # The configured caps until start() fits them to the open-files limit.
        self.caps = connection_caps(config, resource.RLIM_INFINITY, 0)
        self.connections = ConnectionTable(config.max_connections)
        self.http_connections = HttpConnections(
            self.caps.http, config.http_request_header_timeout_s
        )
        self.open_files_limit = 0

    def _restore_pending_acks(self, topic: Topic) -> None:
        restored = sum(
            restore_pending_acks(coordinator, str(topic.name), topic.subscriptions)
            for coordinator in self.coordinators.local.values()
        )
        remote_acks = self.coordinators.remote_acks
        if remote_acks is not None:
            remote = remote_acks.restore(str(topic.name), topic.subscriptions)
            if remote:
                restored += len(remote)
                task = asyncio.create_task(
                    settle_remote_acks(topic, remote, self.coordinators, remote_acks)
                )
                self._background.add(task)
                task.add_done_callback(self._background.discard)
        if restored:
            log.info("%s: holding again %d acks of transactions not ended", topic.name, restored)

    def _coordinator_started(self, coordinator: TransactionCoordinator) -> None:
        """Topics loaded before a coordinator recovered hold again what its open
        transactions acknowledged on them."""
        for topic in self.registry.loaded():
            restored = restore_pending_acks(coordinator, str(topic.name), topic.subscriptions)
            if restored:
                log.info(
                    "%s: holding again %d acks of transactions not ended", topic.name, restored
                )

    async def start(self) -> None:
        config = self.config
        # Before the ledger file cache sizes itself from it.
        self.open_files_limit = raise_open_files_limit()
        security_settings = SecuritySettings.from_config(config)
        try:
            # The top only: the whole tree is walked once serving (see file_modes.py).
            restrict_top_of_data_dir(config.data_dir)
        except OSError as error:
            raise StartupError(f"cannot use data dir {config.data_dir}: {error}") from None
        # The store first: it holds the data dir's lock (see lock_data_dir), so a
        # second owner is refused before anything else under the data dir is opened.
        try:
            self.store = LocalStore(config.metadata_dir)
        except DataDirInUseError as error:
            raise _data_dir_in_use(config.data_dir, error) from None
        _check_address_free("gRPC", "--grpc HOST:PORT", config.grpc_address)
        _check_address_free("HTTP", "--http HOST:PORT", config.http_address)
        if config.kafka_address:
            _check_address_free("Kafka", KAFKA_FLAG, config.kafka_address)
        # Before recovery: an unreachable etcd stops the start at once, naming it.
        try:
            self.membership = await Membership.open(config)
        except MetadataStoreError as error:
            raise StartupError(f"cannot open the cluster metadata store: {error}") from None
        if config.metadata_store_url:
            await _check_metadata_store_access(self.membership.store, config)
            # A shared store: namespaces, grants and partition counts are the
            # cluster's, read before anything is served.
            try:
                self.shared = await SharedMetadata.open(self.membership.store)
            except MetadataStoreError as error:
                raise StartupError(f"cannot read the cluster's metadata: {error}") from None
        shared = self.shared
        self.security = BrokerSecurity.open(
            security_settings,
            shared.permissions if shared else EmbeddedPermissionStore(self.store),
        )
        self.registry = TopicRegistry(
            config,
            self.store,
            shared.namespaces if shared else None,
            self.membership.write_gate,
        )
        self.registry.on_deleted.append(self.security.permissions.forget_topic)
        self._fit_connection_caps()
        partition_access = None
        if shared is not None:
            # Topics are placed over the cluster's brokers; a partitioned topic's
            # partitions are asked of their owners.
            self.registry.ownership = TopicOwnership(self.membership.store, config.cluster_name)
            try:
                self.peers = GrpcPeerClient(self.security.peer_credentials(config))
            except (ValueError, OSError) as error:
                raise StartupError(f"cannot call the cluster's other brokers: {error}") from None
            partition_access = ClusterPartitions(self.registry, self.registry.ownership, self.peers)
        self.lookup = TopicLookup(self.registry, config.allow_auto_topic_creation)
        self.partitioned = PartitionedTopics(
            config,
            self.registry,
            shared.partitioned if shared else EmbeddedPartitionedMetadata(self.store),
            partition_access,
        )
        if self.security.guard.authorizer is not None:
            # A grant on a partitioned topic reaches its partitions, on every face.
            self.security.guard.authorizer.partition_counts = self.partitioned.metadata.partitions
        participant = BrokerParticipant(self.registry)
        self.coordinators = Coordinators(
            self.store,
            participant,
            TransactionLimits(
                config.max_open_transactions,
                config.max_open_transactions_per_client,
                config.txn_ended_retention_s,
                config.max_ended_transactions,
                config.max_acks_per_transaction,
            ),
            config.transaction_coordinator_shards or 1,
        )
        self.coordinators.write_gate = self.registry.write_gate
        if config.failpoints:
            self.failpoints = Failpoints(config.failpoints)
            self.registry.failpoint = self.coordinators.failpoint = self.failpoints
        # Topics recover in the background (serving meanwhile); each settles what
        # the last run left ongoing once it and the coordinators are ready.
        self.registry.on_recovered = functools.partial(
            settle_leftovers, coordinators=self.coordinators
        )
        # A loaded topic's subscriptions hold again what transactions not ended
        # acknowledged on them: topics loaded from here with the coordinators that
        # have recovered, those loaded before as each coordinator recovers.
        self.registry.on_loaded = self._restore_pending_acks
        self.coordinators.on_started = self._coordinator_started
        if self.registry.ownership is not None:
            # In a cluster the shards led here are known once this broker has its id
            # (registered, below); transaction calls wait for them until then.
            try:
                shard_count = await cluster_shard_count(
                    self.membership.store,
                    config.cluster_name,
                    config.transaction_coordinator_shards
                    or recorded_shard_count(self.store, config.cluster_name)
                    or DEFAULT_CLUSTER_SHARDS,
                )
                check_shard_count(
                    self.store,
                    config.cluster_name,
                    shard_count,
                    config.transaction_coordinator_shards,
                )
            except MetadataStoreError as error:
                raise StartupError(
                    f"cannot start in cluster {config.cluster_name}: {error}"
                ) from None
            participant.peers = self.peers
            self.coordinators.attach_cluster(
                ShardRecords(self.membership.store, config.cluster_name, shard_count),
                self.registry.ownership,
                self.peers,
            )
            participant.remote_acks = self.coordinators.remote_acks
        # Topics load on first use; those the last run may have left transactions
        # in load in the background from here (TopicRegistry.start).
        self.registry.start()
        recover_started_ms = int(time.time() * 1000)
        if self.registry.ownership is None:
            await self.coordinators.start()
        recovery = RecoveryWindow(recover_started_ms, int(time.time() * 1000))

        message_limit = config.max_message_size + 1024 * 1024
        authentication_ms = max(1, int(config.connection_authentication_timeout_s * 1000))
        self._grpc = grpc.aio.server(
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
                ("grpc.max_allowed_incoming_connections", self.caps.grpc_sockets),
                ("grpc.server_handshake_timeout_ms", authentication_ms),
                ("grpc.max_connection_idle_ms", authentication_ms),
            ],
            # Unparsable requests are refused before anything else looks at them; a
            # stream that opens with nothing is ended; then the token check, and only
            # an authenticated call takes a connection slot.
            interceptors=[
                CallTrackingInterceptor(self.connections),
                MalformedRequestInterceptor(),
                OpeningDeadlineInterceptor(config.connection_idle_timeout_s),
                *self.security.grpc_interceptors(),
                ConnectionLimitInterceptor(self.connections),
            ],
        )
        add_services(
            self._grpc,
            BrokerService(self.registry, config, self.coordinators, self.lookup),
            AdminService(self.registry, self.coordinators, self.partitioned),
            PeerService(self.coordinators, participant),
            self._health,
        )
        try:
            self.grpc_port = self.security.add_grpc_port(self._grpc, config.grpc_address)
        except RuntimeError:  # grpc's "Failed to bind to address ..." (it logs why)
            self.grpc_port = 0
        if self.grpc_port == 0:
            raise _cannot_listen(
                "gRPC", "--grpc HOST:PORT", config.grpc_address, "bind failed (in use?)"
            )
        await self._grpc.start()
        # One address's sockets past its cap, calls or not, are shut down.
        self._grpc_guard = GrpcSocketGuard(
            self.grpc_port, self.caps.grpc.per_address, self.connections.calling
        )
        self._grpc_guard.start()

        http_app = make_app(
            self.registry, self.coordinators, recovery, self.partitioned, config.cluster_name
        )
        add_routes(http_app, self.connections)
        http_lookup.add_routes(http_app, self.lookup)
        add_brokers_routes(http_app, self.membership.store)
        http_cluster.add_routes(
            http_app, self.membership.store, config.cluster_name, self.registry, self.lookup
        )
        # First: a request refused by the token check has still sent its headers.
        http_app.middlewares.append(self.http_connections.middleware())
        # Before the token check: a browser's cross-site form is refused as such.
        http_app.middlewares.append(state_change_middleware())
        add_http_routes(http_app, self.http_connections)
        add_kafka_connection_routes(http_app, lambda: self.kafka)
        self.security.attach_http(http_app)
        # An idle keep-alive connection closes as an idle gRPC stream would.
        self._http = web.AppRunner(
            http_app, access_log=None, keepalive_timeout=config.connection_idle_timeout_s
        )
        await self._http.setup()
        host, port = _split_address(config.http_address)
        site = BoundedTCPSite(
            self._http,
            host,
            port,
            self.http_connections,
            ssl_context=self.security.http_ssl_context(),
        )
        try:
            await site.start()
        except OSError as error:
            raise _cannot_listen(
                "HTTP", "--http HOST:PORT", config.http_address, _bind_failure(error)
            ) from None
        self.http_port = site.bound_port
        addresses = with_advertised_address(
            BrokerAddresses.advertised(
                config.grpc_address,
                self.grpc_port,
                config.http_address,
                self.http_port,
                self.security.settings.tls is not None,
            ),
            config.advertised_address,
        )
        kafka_node_id = -1
        if config.kafka_address:
            kafka_node_id, kafka_address = await self._start_kafka(addresses)
            addresses = replace(addresses, kafka_address=kafka_address)
        self.lookup.advertise(addresses)
        try:
            info = await self.membership.register(addresses, version(), self._load, kafka_node_id)
            if self.registry.ownership is not None:
                await self.registry.ownership.start(info.broker_id)
                await join_cluster(
                    self.store,
                    self.shared,
                    self.registry,
                    self.registry.ownership,
                    config.cluster_name,
                )
                await self.coordinators.start(info.broker_id)
        except (MetadataStoreError, ShardLogConflictError) as error:
            raise StartupError(str(error)) from None

        for service in ("", *CLIENT_SERVICES):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._sync_task = asyncio.create_task(self._sync_metadata())
        self._tighten_task = asyncio.create_task(self._tighten_data_dir())
        # What start-up made (modules, services) lives as long as the process: kept
        # out of the cycle collector's full passes, which the unloading of idle
        # topics asks for (TopicRegistry.unload_idle).
        gc.freeze()

    def _fit_connection_caps(self) -> None:
        """The ports' connection caps, cut to what the open-files limit leaves."""
        config = self.config
        self.caps = caps = connection_caps(
            config, self.open_files_limit, self.registry.files.max_open
        )
        self.connections = ConnectionTable(caps.grpc.total, caps.grpc.per_address)
        self.http_connections = HttpConnections(caps.http, config.http_request_header_timeout_s)
        if caps.reduced:
            log.warning(
                "open files: the limit %d leaves %d descriptors for connections once %d "
                "ledger files and %d for the broker are set aside; connection caps cut to "
                "gRPC %d (%d per address), Kafka %d (%d per address), HTTP %d (%d per "
                "address). Raise the limit (ulimit -n, LimitNOFILE=) for the configured ones",
                self.open_files_limit,
                caps.budget,
                self.registry.files.max_open,
                RESERVED_FILES,
                caps.grpc.total,
                caps.grpc.per_address,
                caps.kafka.total,
                caps.kafka.per_address,
                caps.http.total,
                caps.http.per_address,
            )

    async def _start_kafka(self, addresses: BrokerAddresses) -> tuple[int, str]:
        """Open the Kafka port as this broker's Kafka node: (its node id, the Kafka
        address advertised), told to clients in Metadata and registered."""
        config = self.config
        try:
            node_id = await kafka_node_id(
                self.membership.store, config.cluster_name, addresses.grpc_address
            )
        except MetadataStoreError as error:
            raise StartupError(f"cannot record this broker's Kafka node id: {error}") from None
        host = addresses.grpc_address.rpartition(":")[0]
        if not config.advertised_address:
            host = advertised_host(config.kafka_address)
        try:
            self.kafka, self.kafka_port = await start_kafka(
                config,
                self.registry,
                self.coordinators,
                self.partitioned,
                self.security,
                node_id,
                host.strip("[]"),
                self.membership.store,
                self.caps.kafka,
            )
        except KafkaStartupError as error:
            raise StartupError(str(error)) from None
        except OSError as error:
            raise _cannot_listen(
                "Kafka", KAFKA_FLAG, config.kafka_address, _bind_failure(error)
            ) from None
        return node_id, f"{host}:{self.kafka_port}"

    async def _tighten_data_dir(self) -> None:
        try:
            await asyncio.to_thread(restrict_data_dir, self.config.data_dir, self._tighten_stop)
        except OSError as error:
            log.error("data dir %s: cannot tighten file modes: %s", self.config.data_dir, error)

    def _load(self) -> dict[str, float]:
        """The load figure this broker registers and reports (placement will weigh it)."""
        return {
            "topics": self.registry.count(),
            "loadedTopics": len(self.registry.loaded()),
            "connections": len(self.connections),
        }

    async def _sync_metadata(self) -> None:
        # Cursor positions are written without fsync; make them durable periodically.
        while True:
            await asyncio.sleep(self.config.metadata_sync_interval_s)
            await asyncio.get_running_loop().run_in_executor(None, self.store.sync)

    async def stop(self) -> None:
        """Stop accepting, finish what is in flight, close ledgers, sync metadata."""
        started = time.monotonic()
        await self._health.enter_graceful_shutdown()
        if self.registry is not None and self.registry.ownership is not None:
            await self.registry.ownership.close()
        if self.shared is not None:
            await self.shared.close()
        if self.membership is not None:
            # Out of the cluster's live list before anything else stops.
            await self.membership.close()
        if self._grpc_guard is not None:
            await self._grpc_guard.stop()
        if self._grpc is not None:
            calls, clients = self.connections.open_calls(), len(self.connections)
            if calls:
                # Streams (producers, consumers) end only when their clients close
                # them, so with any open the whole grace is waited for.
                log.info(
                    "stopping: %d gRPC call(s) open (streams included) from %d client(s); "
                    "waiting up to %.0f s for them to finish, then cancelling the rest",
                    calls,
                    clients,
                    SHUTDOWN_GRACE_S,
                )
            else:
                log.info("stopping: no gRPC calls open")
            await self._grpc.stop(SHUTDOWN_GRACE_S)
            waited = time.monotonic() - started
            log.info(
                "gRPC server stopped after %.1f s: %s",
                waited,
                "the grace ran out and the calls still open were cancelled"
                if waited >= SHUTDOWN_GRACE_S
                else "every call had finished",
            )
        if self._http is not None:
            await self._http.cleanup()
        if self.kafka is not None:
            await self.kafka.stop()
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sync_task
        if self._tighten_task is not None:
            self._tighten_stop.set()
            await self._tighten_task
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.coordinators is not None:
            await self.coordinators.close()
        if self.peers is not None:  # after every coordinator: their ends use it
            await self.peers.close()
        if self.registry is not None:
            await self.registry.close()
        if self.store is not None:
            self.store.close()
        if self.registry is not None:  # a start refused before recovery says nothing more
            log.info("broker stopped after %.1f s", time.monotonic() - started)


def version() -> str:
    """The installed distribution's version ("unknown" when run from a bare tree)."""
    try:
        return importlib.metadata.version("stableline")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _log_banner(broker: Broker, took_s: float) -> None:
    """What runs where, for the operator reading the log."""
    config, settings = broker.config, broker.security.settings
    advertised = broker.lookup.advertised  # what lookups answer
    security = []
    if settings.tls is not None:
        security.append("TLS")
    if settings.authentication_enabled:
        security.append("token authentication")
    if settings.authorization_enabled:
        security.append("authorization")
    log.info("stableline %s ready in %.1f s", version(), took_s)
    log.info("data dir: %s", config.data_dir.resolve())
    log.info(
        "cluster %s: metadata store %s, this broker is %s",
        config.cluster_name,
        broker.membership.store.description,
        broker.membership.registration.info.broker_id,
    )
    log.info("gRPC (clients' service URL): %s", advertised.grpc_address)
    log.info("HTTP admin: %s   dashboard: %s/", advertised.http_url, advertised.http_url)
    if broker.kafka is not None:
        settings = broker.security.settings
        protocol = (
            ("SASL_SSL" if settings.tls else "SASL_PLAINTEXT")
            if settings.authentication_enabled
            else ("SSL" if settings.tls else "PLAINTEXT")
        )
        log.info(
            "Kafka (bootstrap.servers): %s, security.protocol %s",
            broker.lookup.advertised.kafka_address,
            protocol,
        )
    log.info(
        "security: %s",
        "on (" + ", ".join(security) + ")" if security else "off (plaintext, no tokens)",
    )
    registry = broker.registry
    log.info(
        "topics: %d known, %d loaded at start, the rest on first use; "
        "ledger files open at most: %d",
        registry.count(),
        len(registry.loaded()),
        registry.files.max_open,
    )
    limit = broker.open_files_limit
    if limit != resource.RLIM_INFINITY and limit < LOW_OPEN_FILES_LIMIT:
        log.warning(
            "open files: the limit is %d even at its hard limit; topics beyond what "
            "max_open_ledger_files (%d) keeps open cost a reopen each, and connections "
            "share the rest. Raise it (ulimit -n, systemd LimitNOFILE=) to at least %d",
            limit,
            registry.files.max_open,
            LOW_OPEN_FILES_LIMIT,
        )


async def serve(config: BrokerConfig) -> None:
    started = time.monotonic()
    broker = Broker(config)
    try:
        await broker.start()
    except Exception:
        # Whatever opened before the failure is closed (topics, metadata, the lock).
        await broker.stop()
        raise
    _log_banner(broker, time.monotonic() - started)
    # Handlers first: a SIGTERM sent the moment `ready` is read is a clean stop.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if broker.failpoints is not None:
        loop.add_signal_handler(signal.SIGUSR1, broker.failpoints.release)
    # One line on stdout that tools and tests can read for the bound ports.
    print(
        json.dumps(
            {
                "event": "ready",
                "grpc_port": broker.grpc_port,
                "http_port": broker.http_port,
                "tls": broker.security.settings.tls is not None,
                **({"kafka_port": broker.kafka_port} if broker.kafka is not None else {}),
            }
        ),
        flush=True,
    )
    await stop.wait()
    await broker.stop()


def run(config: BrokerConfig) -> None:
    """Serve until SIGTERM/SIGINT; StartupError (one line) if the broker cannot start."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(serve(config))
