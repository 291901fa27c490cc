"""ClusterServices: standalone or in a cluster, the broker asks one object. Standalone
keeps everything in the data dir and leads every coordinator shard at once; in a
cluster (here: a one-broker cluster on an embedded metadata store) topics are placed by
the ownership records, partitions are asked of their owners, and the shards led here
are known only once the broker joined with its id."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore
from stableline.broker.app.cluster_services import InCluster, Standalone
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.partitions import ClusterPartitions
from stableline.broker.cluster.shared_metadata import SharedMetadata
from stableline.broker.config import load_config
from stableline.broker.security.permissions import EmbeddedPermissionStore
from stableline.broker.topics.partition_counts import EmbeddedPartitionedMetadata
from stableline.broker.topics.placement import StandalonePlacement
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import BrokerParticipant
from stableline.broker.txn.remote_acks import NoRemoteAcks, RemoteAcks
from stableline.broker.txn.shard_leaders import EveryShardHere, RecordedShardLeaders
from stableline.metadata.embedded import EmbeddedMetadataStore
from txnbuffer import TransactionLimits

BROKER_ID = "127.0.0.1:6650"


class ClosingPeers:
    """Stands in for the calls to other brokers: only its close is asked here."""

    closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def config(tmp_path):
    return load_config(
        None,
        {"data_dir": tmp_path / "data", "fsync": False, "transaction_coordinator_shards": 2},
    )


@pytest.fixture
async def local(config):
    store = LocalStore(config.metadata_dir)
    yield store
    store.close()


@pytest.fixture
async def cluster_store(tmp_path):
    store = EmbeddedMetadataStore(tmp_path / "cluster", fsync=False)
    yield store
    await store.close()


async def _core(config, local, services):
    registry = TopicRegistry(config, local, services.namespaces, placement=services.placement)
    remote_acks = services.remote_acks(local)
    participant = BrokerParticipant(registry, services.peers, remote_acks)
    coordinators = Coordinators(
        local,
        participant,
        TransactionLimits(),
        await services.shard_leaders(local),
        remote_acks=remote_acks,
    )
    return registry, participant, coordinators


async def test_standalone_keeps_everything_here_and_leads_every_shard_at_once(config, local):
    services = Standalone(local, config.transaction_coordinator_shards)
    assert isinstance(services.placement, StandalonePlacement)
    assert services.ownership is None and services.namespaces is None
    assert isinstance(services.permissions, EmbeddedPermissionStore)
    assert isinstance(services.partition_counts, EmbeddedPartitionedMetadata)
    registry, participant, coordinators = await _core(config, local, services)
    assert services.partition_access(registry) is None
    assert services.peers is None
    assert isinstance(participant.remote_acks, NoRemoteAcks)
    assert isinstance(coordinators.leaders, EveryShardHere)
    await services.start_coordinators(coordinators)
    assert sorted(coordinators.local) == [0, 1] and coordinators.ready.is_set()
    await services.join(BROKER_ID, local, registry, coordinators)
    await services.close()
    await services.close_peers()
    await coordinators.close()
    await registry.close()


async def test_in_a_cluster_topics_are_placed_and_shards_wait_for_the_join(
    config, local, cluster_store
):
    shared = await SharedMetadata.open(cluster_store)
    peers = ClosingPeers()
    services = InCluster(config, cluster_store, shared, peers)
    assert isinstance(services.ownership, TopicOwnership)
    assert services.placement is services.ownership
    assert services.namespaces is shared.namespaces
    assert services.permissions is shared.permissions
    assert services.partition_counts is shared.partitioned
    registry, participant, coordinators = await _core(config, local, services)
    assert isinstance(services.partition_access(registry), ClusterPartitions)

    assert participant.peers is peers and coordinators.leaders.peers is peers
    assert isinstance(coordinators.remote_acks, RemoteAcks)
    assert participant.remote_acks is coordinators.remote_acks
    assert isinstance(coordinators.leaders, RecordedShardLeaders)
    assert coordinators.shard_count == 2
    await services.start_coordinators(coordinators)
    assert not coordinators.ready.is_set()  # the shards led here need this broker's id

    await services.join(BROKER_ID, local, registry, coordinators)
    assert services.ownership.broker_id == BROKER_ID
    assert coordinators.ready.is_set()

    await services.close()
    assert not peers.closed  # the coordinators' ends may still call the other brokers
    await services.close_peers()
    assert peers.closed
    await coordinators.close()
    await registry.close()
