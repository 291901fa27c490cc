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

from managed_ledger import LocalStore, ReplicaLogs
from managed_ledger.data_dir_lock import DataDirInUseError, DataDirLock
from stableline.broker.app.cluster_services import ClusterServices, InCluster, Standalone
from stableline.broker.app.kafka import KafkaStartupError, start_kafka
from stableline.broker.app.security import BrokerSecurity
from stableline.broker.cluster.lookup import BrokerAddresses, TopicLookup, advertised_host
from stableline.broker.cluster.membership import Membership, with_advertised_address
from stableline.broker.cluster.peer_credentials import peer_credentials
from stableline.broker.cluster.shared_metadata import SharedMetadata
from stableline.broker.config import BrokerConfig
from stableline.broker.connections.caps import RESERVED_FILES, connection_caps
from stableline.broker.errors import BrokerError
from stableline.broker.failpoints import Failpoints
from stableline.broker.grpc.connection_limit import ConnectionTable
from stableline.broker.grpc.connection_limit import add_routes as add_grpc_connection_routes
from stableline.broker.grpc.peer_client import GrpcPeerClient
from stableline.broker.grpc.server import GrpcServer
from stableline.broker.http.connection_limit import HttpConnections
from stableline.broker.http.server import HttpServer, split_address
from stableline.broker.kafka.server.listener import KafkaListener
from stableline.broker.kafka.server.listener import add_routes as add_kafka_connection_routes
from stableline.broker.observability.load_report import LoadSampler
from stableline.broker.security.file_modes import (
    restrict_data_dir,
    restrict_top_of_data_dir,
    use_owner_only_umask,
)
from stableline.broker.security.settings import SecuritySettings
from stableline.broker.topics.data_dir_id import data_dir_id
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.persistence import InvalidPersistenceError, default_persistence
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.txn.coordinator_errors import ShardLogConflictError
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import (
    BrokerParticipant,
    settle_leftovers,
    settle_remote_acks,
)
from stableline.broker.txn.stats import RecoveryWindow
from stableline.broker.txn.transactional_acks import restore_pending_acks
from stableline.metadata import ClusterMetadataStore, MetadataStoreError, kafka_node_id
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


async def _open_in_cluster(
    config: BrokerConfig, store: ClusterMetadataStore, settings: SecuritySettings
) -> InCluster:
    """The cluster's services: namespaces, grants and partition counts are the
    cluster's, read before anything is served; topics are placed over its brokers."""
    await _check_metadata_store_access(store, config)
    try:
        shared = await SharedMetadata.open(store)
    except MetadataStoreError as error:
        raise StartupError(f"cannot read the cluster's metadata: {error}") from None
    try:
        peers = GrpcPeerClient(peer_credentials(config, settings), config.max_message_size)
    except (ValueError, OSError) as error:
        await shared.close()
        raise StartupError(f"cannot call the cluster's other brokers: {error}") from None
    return InCluster(config, store, shared, peers)


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
        host, port = split_address(address)
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
    """The broker process's parts, made in order by start() and ended by stop().

    Each step of start() is one method, named for what it makes; each part is
    given what it needs when it is made. What differs between standalone and a
    cluster is the `cluster` services' (app/cluster_services.py), nowhere else.
    """

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.store: LocalStore | None = None
        self.membership: Membership | None = None
        self.cluster: ClusterServices | None = None
        self.security: BrokerSecurity | None = None
        self.registry: TopicRegistry | None = None
        self.lookup: TopicLookup | None = None
        self.partitioned: PartitionedTopics | None = None
        self.participant: BrokerParticipant | None = None
        self.replicas: ReplicaLogs | None = None
        self.coordinators: Coordinators | None = None
        self.failpoints: Failpoints | None = None
        self.kafka: KafkaListener | None = None
        self.kafka_port = 0
        self._grpc: GrpcServer | None = None
        self._http: HttpServer | None = None
        self._background: set[asyncio.Task] = set()
        self._sync_task: asyncio.Task | None = None
        # The walk that tightens the data dir's modes, after start (file_modes.py).
        self._tighten_task: asyncio.Task | None = None
        self._tighten_stop = threading.Event()
        self.grpc_port = 0
        self.http_port = 0
        # The configured caps until start() fits them to the open-files limit.
        self.caps = connection_caps(config, resource.RLIM_INFINITY, 0)
        self.connections = ConnectionTable(config.max_connections)
        # Made at the first report (the registry exists by then).
        self._load_sampler: LoadSampler | None = None
        self.http_connections = HttpConnections(
            self.caps.http, config.http_request_header_timeout_s
        )
        self.open_files_limit = 0

    async def start(self) -> None:
        # Before the ledger file cache sizes itself from it.
        self.open_files_limit = raise_open_files_limit()
        security_settings = SecuritySettings.from_config(self.config)
        self._open_data_dir()
        await self._open_cluster(security_settings)
        self._make_topics()
        self._fit_connection_caps()
        await self._make_transactions()
        recovery = await self._recover()
        await self._open_grpc()
        await self._open_http(recovery)
        addresses, kafka_node_id = await self._open_kafka(self._advertised_addresses())
        self.lookup.advertise(addresses)
        await self._join(addresses, kafka_node_id)
        await self._grpc.serving()
        self._sync_task = asyncio.create_task(self._sync_metadata())
        self._tighten_task = asyncio.create_task(self._tighten_data_dir())
        # What start-up made (modules, services) lives as long as the process: kept
        # out of the cycle collector's full passes, which the unloading of idle
        # topics asks for (TopicRegistry.unload_idle).
        gc.freeze()

    # ------------------------------------------------------------ the steps of start

    def _open_data_dir(self) -> None:
        """The data dir held and its top tightened; the listen addresses free."""
        config = self.config
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

    async def _open_cluster(self, settings: SecuritySettings) -> None:
        """Membership, and the cluster's services: standalone with the embedded
        store, else the cluster's shared metadata (read before anything is served)
        and the calls to its other brokers."""
        config = self.config
        try:
            default_persistence(config)  # resolved where it is used; refused here if bad
        except InvalidPersistenceError as error:
            raise StartupError(str(error)) from None
        # Before recovery: an unreachable etcd stops the start at once, naming it.
        try:
            self.membership = await Membership.open(config)
        except MetadataStoreError as error:
            raise StartupError(f"cannot open the cluster metadata store: {error}") from None
        if not config.metadata_store_url:
            self.cluster = Standalone(self.store, config.transaction_coordinator_shards or 1)
        else:
            self.cluster = await _open_in_cluster(config, self.membership.store, settings)
        self.security = BrokerSecurity.open(settings, self.cluster.permissions)

    def _make_topics(self) -> None:
        """The registry, lookups and partitioned topics."""
        config, cluster = self.config, self.cluster
        if config.failpoints:
            self.failpoints = Failpoints(config.failpoints)
        self.registry = TopicRegistry(
            config,
            self.store,
            cluster.namespaces,
            self.membership.write_gate,
            cluster.placement,
            self.failpoints,
        )
        self.registry.on_deleted.append(self.security.permissions.forget_topic)
        # Copies of other brokers' topics kept here: the registry's store, files and
        # directories, in its ledgers' own format, but never listed as its topics.
        self.replicas = ReplicaLogs(self.store, self.registry.ledger_directory, self.registry.files)
        self.cluster.keep_replicas(self.replicas, self.registry)
        self.lookup = TopicLookup(self.registry, config.allow_auto_topic_creation)
        self.partitioned = PartitionedTopics(
            config,
            self.registry,
            cluster.partition_counts,
            cluster.partition_access(self.registry),
        )
        if self.security.guard.authorizer is not None:
            # A grant on a partitioned topic reaches its partitions, on every face.
            self.security.guard.authorizer.partition_counts = self.partitioned.metadata.partitions

    async def _make_transactions(self) -> None:
        """The coordinators, and the registry's hooks that settle with them."""
        config = self.config
        try:
            leaders = await self.cluster.shard_leaders(self.store)
        except MetadataStoreError as error:
            raise StartupError(f"cannot start in cluster {config.cluster_name}: {error}") from None
        remote_acks = self.cluster.remote_acks(self.store)
        self.participant = BrokerParticipant(self.registry, self.cluster.peers, remote_acks)
        self.coordinators = Coordinators(
            self.store,
            self.participant,
            TransactionLimits(
                config.max_open_transactions,
                config.max_open_transactions_per_client,
                config.txn_ended_retention_s,
                config.max_ended_transactions,
                config.max_acks_per_transaction,
            ),
            leaders,
            write_gate=self.registry.write_gate,
            failpoint=self.failpoints,
            on_started=self._coordinator_started,
            remote_acks=remote_acks,
        )
        # Topics recover in the background (serving meanwhile); each settles what
        # the last run left ongoing once it and the coordinators are ready.
        self.registry.on_recovered = functools.partial(
            settle_leftovers, coordinators=self.coordinators
        )
        # A loaded topic's subscriptions hold again what transactions not ended
        # acknowledged on them: topics loaded from here with the coordinators that
        # have recovered, those loaded before as each coordinator recovers.
        self.registry.on_loaded = self._restore_pending_acks

    async def _recover(self) -> RecoveryWindow:
        """Topics the last run may have left transactions in load in the background
        from here (TopicRegistry.start); the coordinators that need no broker id
        recover."""
        self.registry.start()
        recover_started_ms = int(time.time() * 1000)
        await self.cluster.start_coordinators(self.coordinators)
        return RecoveryWindow(recover_started_ms, int(time.time() * 1000))

    async def _open_grpc(self) -> None:
        config = self.config
        self._grpc = GrpcServer(
            config,
            self.registry,
            self.coordinators,
            self.lookup,
            self.partitioned,
            self.participant,
            self.replicas,
            self.connections,
            self.caps,
            self.security.grpc_interceptors(),
            self.cluster.moves,
        )
        self.grpc_port = self._grpc.bind(config.grpc_address, self.security.add_grpc_port)
        if self.grpc_port == 0:
            raise _cannot_listen(
                "gRPC", "--grpc HOST:PORT", config.grpc_address, "bind failed (in use?)"
            )
        await self._grpc.start()

    async def _open_http(self, recovery: RecoveryWindow) -> None:
        config = self.config
        self._http = HttpServer(
            config,
            self.registry,
            self.coordinators,
            recovery,
            self.partitioned,
            self.lookup,
            self.membership.store,
            self.cluster.ownership,
            self.http_connections,
            more_routes=(
                functools.partial(add_grpc_connection_routes, table=self.connections),
                functools.partial(add_kafka_connection_routes, listener=lambda: self.kafka),
            ),
            secure=self.security.attach_http,
            moves=self.cluster.moves,
            forward_unload=None if self.cluster.peers is None else self.cluster.peers.unload_topic,
        )
        try:
            self.http_port = await self._http.start(self.security.http_ssl_context())
        except OSError as error:
            raise _cannot_listen(
                "HTTP", "--http HOST:PORT", config.http_address, _bind_failure(error)
            ) from None

    def _advertised_addresses(self) -> BrokerAddresses:
        config = self.config
        return with_advertised_address(
            BrokerAddresses.advertised(
                config.grpc_address,
                self.grpc_port,
                config.http_address,
                self.http_port,
                self.security.settings.tls is not None,
            ),
            config.advertised_address,
        )

    async def _open_kafka(self, addresses: BrokerAddresses) -> tuple[BrokerAddresses, int]:
        """The addresses with the Kafka port's, and this broker's Kafka node id (-1
        with the Kafka port off)."""
        if not self.config.kafka_address:
            return addresses, -1
        kafka_node_id, kafka_address = await self._start_kafka(addresses)
        return replace(addresses, kafka_address=kafka_address), kafka_node_id

    async def _join(self, addresses: BrokerAddresses, kafka_node_id: int) -> None:
        """Registered as a live broker; in a cluster, its part taken there."""
        try:
            info = await self.membership.register(
                addresses, version(), self._load, kafka_node_id, data_dir_id(self.store)
            )
            await self.cluster.join(info.broker_id, self.store, self.registry, self.coordinators)
        except (MetadataStoreError, ShardLogConflictError) as error:
            raise StartupError(str(error)) from None

    # ------------------------------------------------------------ what the steps use

    def _restore_pending_acks(self, topic: Topic) -> None:
        restored = sum(
            restore_pending_acks(coordinator, str(topic.name), topic.subscriptions)
            for coordinator in self.coordinators.local.values()
        )
        remote_acks = self.coordinators.remote_acks
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
            # A group's coordinator on another broker commits its offsets on the
            # partitions this broker owns through the Peer service.
            self._grpc.peer_service.group_offsets = self.kafka.handler.group_offsets_here
        except KafkaStartupError as error:
            raise StartupError(str(error)) from None
        except MetadataStoreError as error:
            raise StartupError(f"cannot read the Kafka consumer groups' records: {error}") from None
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

    def _load(self) -> tuple[dict[str, float], dict[str, float]]:
        """The load report this broker registers and then reports every interval
        (observability/load_report.py): its figures and its busiest topics."""
        if self._load_sampler is None:
            self._load_sampler = LoadSampler(
                self.registry, self._topics_led, lambda: len(self.connections)
            )
        report = self._load_sampler.sample()
        return report.load, report.topic_loads

    def _topics_led(self) -> int:
        ownership = None if self.cluster is None else self.cluster.ownership
        if ownership is None:
            return self.registry.count()  # standalone: every topic is this broker's
        return ownership.led_by(ownership.broker_id)

    async def _sync_metadata(self) -> None:
        # Cursor positions are written without fsync; make them durable periodically.
        while True:
            await asyncio.sleep(self.config.metadata_sync_interval_s)
            await asyncio.get_running_loop().run_in_executor(None, self.store.sync)

    async def stop(self) -> None:
        """Hand over what this broker leads in a cluster, stop accepting, finish what
        is in flight, close ledgers, sync metadata."""
        started = time.monotonic()
        await self._hand_over()
        if self._grpc is not None:
            await self._grpc.not_serving()
        if self.cluster is not None:
            await self.cluster.close()
        if self.membership is not None:
            # Out of the cluster's live list before anything else stops.
            await self.membership.close()
        if self._grpc is not None:
            await self._grpc.stop_guard()
            await self._grpc.stop(SHUTDOWN_GRACE_S)
        if self._http is not None:
            await self._http.stop()
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
        if self.cluster is not None:  # after every coordinator: their ends call peers
            await self.cluster.close_peers()
        if self.replicas is not None:  # before the registry closes the files they share
            self.replicas.close()
        if self.registry is not None:
            await self.registry.close()
        if self.store is not None:
            self.store.close()
        if self.registry is not None:  # a start refused before recovery says nothing more
            log.info("broker stopped after %.1f s", time.monotonic() - started)

    async def _hand_over(self) -> None:
        """In a cluster, before this broker leaves it (a live member still: the next
        leaders are other brokers, and calls meanwhile are sent to them): first its
        transaction coordinator shards (txn/coordinators.py; ends under way finish
        while the topics they write to are still served here), then its topics, both
        within shutdown_hand_over_timeout_s."""
        timeout_s = self.config.shutdown_hand_over_timeout_s
        if not isinstance(self.cluster, InCluster) or timeout_s <= 0:
            return
        started = time.monotonic()
        if self.coordinators is not None:
            await self.coordinators.hand_over(timeout_s)
        await self._hand_over_topics(timeout_s - (time.monotonic() - started))

    async def _hand_over_topics(self, timeout_s: float) -> None:
        """In a cluster, before this broker leaves it: the replicated topics it leads go
        to other members of their ensembles (cluster/topic_moves.py), so their clients
        see no failed call; within `timeout_s`, after which the rest fail over as
        after a crash."""
        moves = None if self.cluster is None else self.cluster.moves
        if moves is None or timeout_s <= 0 or self.membership is None:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await moves.hand_over_all()
        except TimeoutError:
            log.warning(
                "topics not all handed over within what shutdown_hand_over_timeout_s left "
                "them (%g s): "
                "the rest fail over",
                timeout_s,
            )


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
