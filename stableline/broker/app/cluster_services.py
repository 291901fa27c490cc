"""Standalone or in a cluster: the one place the broker's wiring tells them apart.

A broker runs standalone with the embedded metadata store, or in a cluster with a
shared one (`--metadata-store etcd://...`). What differs is gathered in a
`ClusterServices`: where namespaces, grants and partition counts are kept, which
broker serves each topic (the registry's TopicPlacement), how a partitioned
topic's partitions are reached, and how the transaction coordinator's shards are
led. `Standalone` keeps all of it in this broker's data dir and serves every topic
and shard; `InCluster` shares it through the cluster's metadata store and calls the
other brokers. The broker (app/server.py) builds one as it starts and asks it;
nothing else checks which of the two it runs.

In a cluster `moves` (cluster/topic_moves.py) unloads and transfers the topics this
broker serves; the broker's stop asks it first to hand over the topics it leads.

Lifecycle: open (before anything is served) -> give the core its parts
(`placement`, `shard_leaders`, `remote_acks`, `partition_access`) -> `join` (once
this broker is registered and has its id) -> `close` (first at shutdown: out of the
cluster before the rest stops) -> `close_peers` (last: the coordinators' ends call
the other brokers until then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from managed_ledger import LocalStore, ReplicaLogs
from stableline.broker.cluster.balancer import BalancerSettings
from stableline.broker.cluster.catch_up_throttle import CatchUpThrottle
from stableline.broker.cluster.ledger_recovery import LedgerRecovery
from stableline.broker.cluster.load_balancing import ForwardingMover, LoadBalancing
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.partitions import ClusterPartitions
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.cluster.replication import EnsembleReplication
from stableline.broker.cluster.rereplication import Rereplication
from stableline.broker.cluster.shared_metadata import SharedMetadata
from stableline.broker.cluster.shared_metadata.joining import join_cluster
from stableline.broker.cluster.topic_moves import TopicMoves
from stableline.broker.config import BrokerConfig
from stableline.broker.security.permissions import EmbeddedPermissionStore, PermissionStore
from stableline.broker.topics.namespace_policies import NamespacePolicies
from stableline.broker.topics.partition_counts import (
    EmbeddedPartitionedMetadata,
    PartitionedMetadata,
)
from stableline.broker.topics.partitioned import PartitionAccess
from stableline.broker.topics.persistence import default_persistence
from stableline.broker.topics.placement import StandalonePlacement, TopicPlacement
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.topic_state import TopicState
from stableline.broker.txn.coordinator_shards import (
    DEFAULT_CLUSTER_SHARDS,
    ShardRecords,
    check_shard_count,
    cluster_shard_count,
    recorded_shard_count,
)
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.remote_acks import HeldRemoteAcks, NoRemoteAcks, RemoteAcks
from stableline.broker.txn.shard_leaders import EveryShardHere, RecordedShardLeaders, ShardLeaders
from stableline.metadata import BrokerInfo, ClusterMetadataStore
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)


class ClusterServices(Protocol):
    """What the broker's core is given, standalone or in a cluster."""

    # Which broker serves each topic (the registry's).
    placement: TopicPlacement
    # Namespaces and their policies; None: the registry keeps its own in the data dir.
    namespaces: NamespacePolicies | None
    permissions: PermissionStore
    partition_counts: PartitionedMetadata
    # The cluster's ownership records, for the HTTP cluster routes; None standalone.
    ownership: TopicOwnership | None
    # Unload and transfer of the topics served here, and the hand-over of those led
    # here at shutdown (cluster/topic_moves.py); set by keep_replicas, None standalone.
    moves: TopicMoves | None

    def partition_access(self, registry: TopicRegistry) -> PartitionAccess | None:
        """How a partitioned topic's partitions are reached (None: in this registry)."""
        ...

    # How this broker calls the others; None standalone, where there are none.
    peers: PeerClient | None

    async def shard_leaders(self, local: LocalStore) -> ShardLeaders:
        """Which broker leads each transaction coordinator shard (MetadataStoreError
        when the cluster's shard count cannot be read or recorded)."""
        ...

    def remote_acks(self, local: LocalStore) -> HeldRemoteAcks:
        """Where acks of transactions led elsewhere are recorded (standalone: none are)."""
        ...

    async def start_coordinators(self, coordinators: Coordinators) -> None:
        """Start the coordinators that need no broker id (standalone: all of them)."""
        ...

    def keep_replicas(self, replicas: ReplicaLogs, registry: TopicRegistry) -> None:
        """This broker's copies of other brokers' topics, and the topics it serves:
        replicated topics are taken and recovered with them (cluster/ledger_recovery.py)."""
        ...

    async def join(
        self,
        broker_id: str,
        local: LocalStore,
        registry: TopicRegistry,
        coordinators: Coordinators,
    ) -> None:
        """This broker is registered as `broker_id`: take its part in the cluster."""
        ...

    async def close(self) -> None: ...

    async def close_peers(self) -> None: ...


class Standalone:
    """The embedded store: this broker keeps everything and serves every topic."""

    def __init__(self, local: LocalStore, shard_count: int = 1):
        self.placement: TopicPlacement = StandalonePlacement()
        self.namespaces: NamespacePolicies | None = None
        self.permissions: PermissionStore = EmbeddedPermissionStore(local)
        self.partition_counts: PartitionedMetadata = EmbeddedPartitionedMetadata(local)
        self.ownership: TopicOwnership | None = None
        self.moves: TopicMoves | None = None
        self.peers: PeerClient | None = None
        self._shard_count = shard_count

    def partition_access(self, registry: TopicRegistry) -> PartitionAccess | None:
        return None

    async def shard_leaders(self, local: LocalStore) -> ShardLeaders:
        return EveryShardHere(self._shard_count)

    def remote_acks(self, local: LocalStore) -> HeldRemoteAcks:
        return NoRemoteAcks()

    async def start_coordinators(self, coordinators: Coordinators) -> None:
        await coordinators.start()

    def keep_replicas(self, replicas: ReplicaLogs, registry: TopicRegistry) -> None:
        return None  # one copy of everything, here

    async def join(
        self, broker_id: str, local: LocalStore, registry: TopicRegistry, coordinators: Coordinators
    ) -> None:
        return None

    async def close(self) -> None:
        return None

    async def close_peers(self) -> None:
        return None


class InCluster:
    """A shared metadata store: topics placed over the brokers, metadata shared."""

    def __init__(
        self,
        config: BrokerConfig,
        store: ClusterMetadataStore,
        shared: SharedMetadata,
        peers: PeerClient,
    ):
        self._config = config
        self._store = store
        self._shared = shared
        namespaces, default = shared.namespaces, default_persistence(config)
        self.ownership = TopicOwnership(
            store,
            config.cluster_name,
            lambda namespace: namespaces.persistence(namespace) or default,
        )
        self.placement: TopicPlacement = self.ownership
        self.namespaces: NamespacePolicies | None = shared.namespaces
        self.permissions: PermissionStore = shared.permissions
        self.partition_counts: PartitionedMetadata = shared.partitioned
        self.peers = peers
        self.moves: TopicMoves | None = None
        # The balancer (cluster/load_balancing.py), started at join when enabled.
        self.balancing: LoadBalancing | None = None
        # Old entries sent to members catching up, over all this broker's topics.
        self.throttle = CatchUpThrottle(config.rereplication_rate_bytes_per_s)
        # Replaces lost and draining members of the topics led here (keep_replicas).
        self.rereplication: Rereplication | None = None
        # Drops this broker's copies of topics whose ensembles replaced it (keep_replicas).
        self._drop_replaced_copies: Callable[[], Coroutine[Any, Any, None]] | None = None
        # Background work the cluster's callbacks start (letting go of a topic, taking
        # one, making a member's copies again), kept until it ends.
        self._letting_go: set[asyncio.Task] = set()

    def partition_access(self, registry: TopicRegistry) -> PartitionAccess | None:
        # A partitioned topic's partitions are asked of their owners.
        return ClusterPartitions(registry, self.ownership, self.peers)

    async def shard_leaders(self, local: LocalStore) -> ShardLeaders:
        """The shards led here are known once this broker has its id (join); until
        then transaction calls wait for them."""
        config = self._config
        shard_count = await cluster_shard_count(
            self._store,
            config.cluster_name,
            config.transaction_coordinator_shards
            or recorded_shard_count(local, config.cluster_name)
            or DEFAULT_CLUSTER_SHARDS,
        )
        check_shard_count(
            local, config.cluster_name, shard_count, config.transaction_coordinator_shards
        )
        return RecordedShardLeaders(
            ShardRecords(self._store, config.cluster_name, shard_count),
            self.ownership,
            local,
            self.peers,
        )

    def remote_acks(self, local: LocalStore) -> HeldRemoteAcks:
        return RemoteAcks(local)

    async def start_coordinators(self, coordinators: Coordinators) -> None:
        return None  # at join, once the shards this broker leads are known

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._letting_go.add(task)
        task.add_done_callback(self._letting_go.discard)

    def keep_replicas(self, replicas: ReplicaLogs, registry: TopicRegistry) -> None:
        def let_go(name: TopicName) -> None:
            # Another broker took the topic: its streams end, its clients look again.
            self._spawn(registry.unload(name), f"let-go:{name}")

        async def take(name: TopicName) -> None:
            try:
                await registry.get(name, create=False)
            except Exception as error:  # its first use takes it then
                log.warning("topic %s not taken after its leader left: %s", name, error)

        def succeed(name: TopicName) -> None:
            self._spawn(take(name), f"take:{name}")

        def handed(name: TopicName) -> None:
            # Another broker handed the topic here: taken now, not on its first use,
            # so the clients following it find it served (unless it is loading).
            if registry.state(name) is TopicState.UNLOADED:
                succeed(name)

        async def remake(info: BrokerInfo) -> None:
            # A member back on a data dir its topics' records do not know for it: the
            # writers here make its copies again.
            for topic in registry.loaded():
                replication = topic.ledger.replication
                if not isinstance(replication, EnsembleReplication):
                    continue
                record = await self.ownership.record(topic.name)
                known = None if record is None else record.data_dirs.get(info.broker_id)
                if known and known != info.data_dir_id:
                    replication.remake(info.broker_id)

        def member_back(info: BrokerInfo) -> None:
            self._spawn(remake(info), f"remake:{info.broker_id}")

        def retired(topic: Topic) -> None:
            # The write gate closed after this broker took the topic: its epoch is over.
            if isinstance(topic.ledger.replication, EnsembleReplication):
                topic.ledger.replication.retire()

        def writers() -> dict[str, EnsembleReplication]:
            return {
                str(topic.name): topic.ledger.replication
                for topic in registry.loaded()
                if isinstance(topic.ledger.replication, EnsembleReplication)
            }

        async def open_topic(name: TopicName) -> None:
            await registry.get(name, create=False)

        async def drop_if_replaced(name: TopicName) -> None:
            # A copy of a topic whose ensemble no longer names this broker (it was
            # replaced while away or draining): nothing will read or count it again.
            storage = name.storage_name
            if not replicas.holds(storage) or registry.state(name) is not TopicState.UNLOADED:
                return
            record = await self.ownership.record(name)
            if record is None or not record.replicated:
                return
            if self.ownership.broker_id in record.ensemble:
                return
            await replicas.drop(storage)
            log.info(
                "topic %s: this broker's copy dropped (its ensemble is %s)", name, record.ensemble
            )

        def changed(name: TopicName) -> None:
            if replicas.holds(name.storage_name):
                self._spawn(drop_if_replaced(name), f"drop-copy:{name}")

        async def drop_replaced_copies() -> None:
            for storage in replicas.names():
                try:
                    await drop_if_replaced(TopicName.parse("persistent://" + storage))
                except Exception as error:
                    log.warning("copy of %s not checked against its record: %r", storage, error)

        self._drop_replaced_copies = drop_replaced_copies
        registry.on_retired = retired
        self.ownership.on_changed = changed
        self.ownership.on_member_back = member_back
        self.ownership.recovery = LedgerRecovery(
            self.ownership, self.peers, replicas, let_go, self.throttle
        )

        async def move_away(name: TopicName) -> str:
            assert self.moves is not None
            return await self.moves.transfer(name, None)

        self.rereplication = Rereplication(
            self.ownership,
            writers,
            open_topic,
            self._config.replication_grace_period_s,
            move_away=move_away,
        )
        self.ownership.on_taken = let_go
        self.ownership.on_successor = succeed
        self.ownership.on_handed = handed
        self.moves = TopicMoves(self.ownership, registry)

    async def join(
        self, broker_id: str, local: LocalStore, registry: TopicRegistry, coordinators: Coordinators
    ) -> None:
        def leader_gone(gone: str) -> None:
            self._spawn(coordinators.leader_gone(gone), f"shards-of:{gone}")

        self.ownership.on_gone = leader_gone
        await self.ownership.start(broker_id)
        await join_cluster(local, self._shared, registry, self.ownership, self._config.cluster_name)
        await coordinators.start(broker_id)
        self._start_balancing()
        if self.rereplication is not None:
            self.rereplication.start()
        if self._drop_replaced_copies is not None:
            self._spawn(self._drop_replaced_copies(), "drop-replaced-copies")

    def _start_balancing(self) -> None:
        config = self._config
        if not config.load_balancer_enabled:
            return
        settings = BalancerSettings(
            threshold=config.load_balancer_threshold,
            min_excess=config.load_balancer_min_excess,
            consecutive_reports=config.load_balancer_consecutive_reports,
            max_moves_per_minute=config.load_balancer_max_moves_per_minute,
            move_cooldown_s=config.load_balancer_move_cooldown_s,
            max_copies_per_broker=config.load_balancer_max_copies_per_broker,
        )
        self.balancing = LoadBalancing(
            self._store,
            config.cluster_name,
            self.ownership,
            # Topics move where they are served: here, or asked of their server.
            None
            if self.moves is None
            else ForwardingMover(self.ownership, self.moves, self.peers.unload_topic),
            settings,
            config.load_report_interval_s,
        )
        self.balancing.start()

    async def close(self) -> None:
        if self.balancing is not None:
            await self.balancing.close()
        if self.rereplication is not None:
            await self.rereplication.close()
        await self.ownership.close()
        await self._shared.close()

    async def close_peers(self) -> None:
        await self.peers.close()
