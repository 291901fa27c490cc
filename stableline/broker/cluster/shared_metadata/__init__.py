"""The broker's shared metadata in a cluster: namespaces and their policies, grants,
and partitioned topics' counts, kept in the cluster's metadata store.

Standalone (the embedded store, `make run`) each kind lives in the broker's data
dir (topics/namespace_policies.py, security/permissions.py, topics/partition_counts.py). With
`--metadata-store etcd://...` the broker uses the implementations here instead,
behind the same interfaces, so what is set through one broker holds on all:

- namespaces.py: NamespacePolicies under /stableline/namespaces
- permissions.py: PermissionStore under /stableline/permissions
- partitioned.py: PartitionedMetadata under /stableline/partitioned-topics

Each reads through a mirror of its prefix kept current by a watch
(stableline.metadata.mirror), read at start before the broker serves; each change
is compare-and-set, durable in the store and visible on the broker that made it
when its call returns, and on the others once their watch brings it.
joining.py says what becomes of the broker's own copies when it joins a cluster.
"""

from __future__ import annotations

from stableline.broker.cluster.shared_metadata.namespaces import ClusterNamespacePolicies
from stableline.broker.cluster.shared_metadata.partitioned import ClusterPartitionedMetadata
from stableline.broker.cluster.shared_metadata.permissions import ClusterPermissionStore
from stableline.metadata import ClusterMetadataStore


class SharedMetadata:
    """The three, opened together on one store."""

    def __init__(self, store: ClusterMetadataStore):
        self.namespaces = ClusterNamespacePolicies(store)
        self.permissions = ClusterPermissionStore(store)
        self.partitioned = ClusterPartitionedMetadata(store)

    @classmethod
    async def open(cls, store: ClusterMetadataStore) -> SharedMetadata:
        """Read every key of the three (MetadataStoreError if the store cannot answer)."""
        shared = cls(store)
        try:
            await shared.namespaces.start()
            await shared.permissions.start()
            await shared.partitioned.start()
        except BaseException:
            await shared.close()
            raise
        return shared

    async def close(self) -> None:
        await self.namespaces.close()
        await self.permissions.close()
        await self.partitioned.close()


__all__ = [
    "ClusterNamespacePolicies",
    "ClusterPartitionedMetadata",
    "ClusterPermissionStore",
    "SharedMetadata",
]
