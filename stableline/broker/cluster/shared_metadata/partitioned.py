"""Partitioned topics' counts in the cluster's metadata store (PartitionedMetadata).

`/stableline/partitioned-topics/{tenant}/{namespace}/{topic}` holds Pulsar's
PartitionedTopicMetadata document, `{"partitions": N}`, with `"deleted": true`
while a deletion is under way. Every broker reads the counts from a mirror kept
current by a watch (stableline.metadata.mirror), so the check made for every topic
creation costs a dict access; `read_partitions`, which answers clients, reads a
name the mirror does not hold through, so a topic created through another broker
a moment ago is seen as partitioned at once.

Changes are compare-and-set: a creation only if the key is absent, a growth or a
deletion mark only over the version read, so of two brokers creating or growing one
topic at once exactly one wins and the other gets CountChanged naming what is
there now. Each change is durable in the store, and in this broker's mirror, when
its call returns.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from stableline.broker.topics.partition_counts import CountChanged
from stableline.metadata import (
    AlreadyExists,
    BadVersion,
    ClusterMetadataStore,
    MetadataStoreUnavailable,
    NotFound,
)
from stableline.metadata.layout import (
    partitioned_topic_path,
    partitioned_topics_dir,
    relative_segments,
)
from stableline.metadata.mirror import PrefixMirror
from stableline.metadata.updates import update_key
from stableline.partitions import NOT_PARTITIONED
from stableline.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class PartitionedTopicRecord:
    partitions: int
    deleted: bool = False

    def __post_init__(self) -> None:
        assert isinstance(self.partitions, int) and self.partitions > 0, self

    def to_json(self) -> bytes:
        document: dict[str, object] = {"partitions": self.partitions}
        if self.deleted:
            document["deleted"] = True
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> PartitionedTopicRecord:
        document = json.loads(raw)
        return cls(document["partitions"], bool(document.get("deleted", False)))


def _path(name: TopicName) -> str:
    return partitioned_topic_path(name.storage_name)


class ClusterPartitionedMetadata:
    """PartitionedMetadata shared by a cluster's brokers."""

    def __init__(self, store: ClusterMetadataStore):
        self.store = store
        self._mirror = PrefixMirror(store, partitioned_topics_dir())
        self._mirror.listeners.append(self._on_change)
        # Topic name -> its record, decoded from the mirror.
        self._records: dict[str, PartitionedTopicRecord] = {}

    async def start(self) -> None:
        await self._mirror.start()

    async def close(self) -> None:
        await self._mirror.close()

    def _on_change(self, path: str) -> None:
        tenant, namespace, topic = relative_segments(partitioned_topics_dir(), path)
        key = str(TopicName(tenant, namespace, topic))
        result = self._mirror.get(path)
        if result is None:
            self._records.pop(key, None)
        else:
            self._records[key] = PartitionedTopicRecord.from_json(result.value)

    # --- reading ----------------------------------------------------------------------

    def partitions(self, name: TopicName) -> int:
        record = self._records.get(str(name))
        return record.partitions if record is not None else NOT_PARTITIONED

    async def read_partitions(self, name: TopicName) -> int:
        if str(name) not in self._records:
            # etcd away: the watched copy answers (a topic made partitioned elsewhere
            # in the last moments may read as plain until it is back).
            with contextlib.suppress(MetadataStoreUnavailable):
                await self._mirror.refresh(_path(name))
        return self.partitions(name)

    def deleting(self, name: TopicName) -> bool:
        record = self._records.get(str(name))
        return record is not None and record.deleted

    def names(self, namespace: str | None = None) -> list[str]:
        names = sorted(self._records)
        if namespace:
            prefix = f"persistent://{namespace}/"
            names = [n for n in names if n.startswith(prefix)]
        return names

    # --- changing ---------------------------------------------------------------------

    async def create(self, name: TopicName, count: int) -> None:
        record = PartitionedTopicRecord(count)
        try:
            stat = await self.store.put(_path(name), record.to_json(), -1)
        except AlreadyExists:
            raise CountChanged(await self._now(name)) from None
        await self._mirror.caught_up(stat.modified_revision)

    async def grow(self, name: TopicName, old: int, count: int) -> None:
        assert count > old, (old, count)
        current = await self.store.get(_path(name))
        if current is None:
            raise CountChanged(await self._now(name))
        record = PartitionedTopicRecord.from_json(current.value)
        if record.partitions != old or record.deleted:
            raise CountChanged(await self._now(name))
        try:
            stat = await self.store.put(
                _path(name), PartitionedTopicRecord(count).to_json(), current.stat.version
            )
        except BadVersion:
            raise CountChanged(await self._now(name)) from None
        await self._mirror.caught_up(stat.modified_revision)

    async def mark_deleting(self, name: TopicName) -> None:
        def marked(raw: bytes | None) -> bytes | None:
            if raw is None:
                return None  # deleted meanwhile: nothing to mark
            record = PartitionedTopicRecord.from_json(raw)
            return PartitionedTopicRecord(record.partitions, deleted=True).to_json()

        revision = await update_key(self.store, _path(name), marked)
        if revision:
            await self._mirror.caught_up(revision)

    async def delete(self, name: TopicName) -> None:
        try:
            revision = await self.store.delete(_path(name))
        except NotFound:
            return
        await self._mirror.caught_up(revision)

    async def _now(self, name: TopicName) -> str:
        """What `name` is in the store now, for a CountChanged message."""
        result = await self._mirror.refresh(_path(name))
        if result is None:
            return f"partitioned topic {name} was deleted meanwhile (by another broker)"
        record = PartitionedTopicRecord.from_json(result.value)
        if record.deleted:
            return f"partitioned topic {name} is being deleted (through another broker)"
        return (
            f"partitioned topic {name} has {record.partitions} partitions now (changed "
            f"meanwhile, through this or another broker)"
        )
