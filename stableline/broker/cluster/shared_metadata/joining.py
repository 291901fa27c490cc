"""What becomes of a broker's own metadata when it first starts in a cluster.

A broker that ran standalone keeps namespaces, their policies, grants and
partitioned topics' counts in its data dir. The first time it starts with a
cluster's metadata store (once per cluster name: a mark in its data dir says it
has joined), it:

- imports each partitioned topic's count the cluster does not have (create-only:
  where the cluster has the name already, the cluster's count stands and a warning
  names both), and places the partitions whose files are here on this broker, so
  the topic is served from its data through any broker; a partition the cluster
  has already placed elsewhere is not served from here (warned);
- imports the namespaces its topics made (they exist cluster-wide from then on);
- does not import namespace policies or grants: they would change what every
  broker of the cluster allows on one broker's word. It warns how many it leaves
  out; an admin sets them again through any broker if they are wanted.

The data dir's copies are left as they were and are not updated while the broker
runs in a cluster; they are in force again only if it runs standalone again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from managed_ledger import LocalStore
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.shared_metadata import SharedMetadata
from stableline.broker.security.permissions import EmbeddedPermissionStore
from stableline.broker.topics.database import BROKER_DB
from stableline.broker.topics.namespace_policies import DEFAULT_NAMESPACE, EmbeddedNamespacePolicies
from stableline.broker.topics.partition_counts import CountChanged, EmbeddedPartitionedMetadata
from stableline.broker.topics.registry import TopicRegistry
from stableline.partitions import partition_topics
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)

_JOINED_PREFIX = "joined-cluster:"


async def join_cluster(
    local: LocalStore,
    shared: SharedMetadata,
    registry: TopicRegistry,
    ownership: TopicOwnership,
    cluster: str,
) -> None:
    """Import this broker's own metadata into `cluster`'s, once (see the module docstring)."""
    if local.get(BROKER_DB, _JOINED_PREFIX + cluster) is not None:
        return
    counts = EmbeddedPartitionedMetadata(local)
    for key in counts.names():
        name = TopicName.parse(key)
        await _import_partitioned(name, counts.partitions(name), shared, registry, ownership)
    namespaces = EmbeddedNamespacePolicies(local, _namespaces_of(registry.names()))
    for namespace in namespaces.recorded():
        if namespace != DEFAULT_NAMESPACE:
            await shared.namespaces.add(namespace)
    policies = len(namespaces.policies())
    grants = EmbeddedPermissionStore(local).granted_resources()
    if policies or grants:
        log.warning(
            "joining cluster %s: %d namespace policies and grants on %d namespaces or "
            "topics in this broker's data dir are not in force in the cluster (they "
            "would apply on every broker); set them again through the admin API "
            "(.../autoTopicCreation, .../permissions) if they are wanted",
            cluster,
            policies,
            grants,
        )
    local.put(BROKER_DB, _JOINED_PREFIX + cluster, b"")
    await local.sync_async()
    log.info(
        "joined cluster %s: %d partitioned topics and %d namespaces of this broker imported",
        cluster,
        len(counts.names()),
        len(namespaces.recorded()) - 1,
    )


async def _import_partitioned(
    name: TopicName,
    count: int,
    shared: SharedMetadata,
    registry: TopicRegistry,
    ownership: TopicOwnership,
) -> None:
    try:
        await shared.partitioned.create(name, count)
    except CountChanged:
        there = await shared.partitioned.read_partitions(name)
        if there != count:
            log.warning(
                "joining: partitioned topic %s has %d partitions in the cluster and %d in "
                "this broker's data dir; the cluster's count stands",
                name,
                there,
                count,
            )
    for partition in partition_topics(name, count):
        if not registry.exists(partition):
            continue
        record = await ownership.place(partition, here=True)
        if record.leader != ownership.broker_id:
            log.warning(
                "joining: partition %s has data here but is placed on broker %s; "
                "its data here is not served",
                partition,
                record.leader,
            )


def _namespaces_of(names: Iterable[str]) -> set[str]:
    return {TopicName.parse(name).namespace_path for name in names}
