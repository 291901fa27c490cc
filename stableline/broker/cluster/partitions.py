"""PartitionAccess in a cluster: each partition is asked of the broker that owns it.

A partitioned topic's partitions are placed over the cluster's brokers, so its
stats, the check that none is in use, and its deletion reach every owner: a
partition this broker owns (or that has no ownership record but files here) is
asked of the registry, any other of its owner (the PeerClient, peers.py).

Promises:
- Each partition's stats come from its owner, so partitioned-stats sums every
  partition wherever it is, each with its subscriptions' isolation levels.
- A partition whose owner is down raises TopicUnavailableError (naming it): the
  partitioned call fails as a whole, retryable, rather than sum a part.
- A partition with no ownership record and no files here was never placed (a
  creation stopped midway): it has no stats (TopicNotFoundError) and nothing to
  delete.
- Deleting a partition at its owner deletes its files there and its ownership
  record, so a later first use cannot find the old placement.
"""

from __future__ import annotations

from typing import Any

from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.topics.partitioned import LocalPartitions, in_use_from_stats
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName


class ClusterPartitions:
    def __init__(self, registry: TopicRegistry, ownership: TopicOwnership, peers: PeerClient):
        self.local = LocalPartitions(registry)
        self.registry = registry
        self.ownership = ownership
        self.peers = peers

    async def _owner(self, partition: TopicName) -> BrokerInfo | None:
        """The partition's owner when another broker; None when it is this one."""
        await self.ownership.wait_started()
        record = await self.ownership.record(partition)
        if record is None:
            if self.registry.exists(partition):
                return None  # its files are here: this broker places it on use
            raise TopicNotFoundError(f"partition {partition} was never placed on a broker")
        if self.ownership.serving_id(record) == self.ownership.broker_id:
            return None
        return self.ownership.owner_of(partition, record)

    async def stats(self, partition: TopicName) -> dict[str, Any]:
        owner = await self._owner(partition)
        if owner is None:
            return await self.local.stats(partition)
        return await self.peers.topic_stats(owner, partition)

    async def busy(self, partition: TopicName) -> str:
        try:
            owner = await self._owner(partition)
        except TopicNotFoundError:
            return ""
        if owner is None:
            return await self.local.busy(partition)
        try:
            return in_use_from_stats(await self.peers.topic_stats(owner, partition))
        except TopicNotFoundError:
            return ""

    async def delete(self, partition: TopicName) -> None:
        owner = await self._owner(partition)
        if owner is None:
            await self.local.delete(partition)
        else:
            await self.peers.delete_topic(owner, partition)
