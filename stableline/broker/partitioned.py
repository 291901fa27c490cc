"""Partitioned topics on the broker: create, grow, describe, delete, stats.

A partitioned topic `T` is its count, kept by PartitionedMetadata, and the ordinary
topics `T-partition-0 .. T-partition-{N-1}` (stableline.partitions), each created
in the registry like any topic and loaded on first use, so each could be owned by
any broker.

Promises:
- Names: a name ending in `-partition-<digits>` is refused as the base of a new
  partitioned topic; a partitioned `T` and a non-partitioned `T` never both exist
  (creating either refuses the other, also while the other's creation is under way).
- Create: 1 <= N <= `max_num_partitions_per_partitioned_topic` (0: no limit), and
  room in the namespace for N more topics. The partitions are created first and
  the count is recorded last, so a recorded count always has its partitions.
- Grow only: the new count is larger than the old (Pulsar refuses a shrink too);
  the new partitions are created before the larger count is recorded.
- Delete: refused while any partition has a connected producer or consumer, unless
  forced; then every partition is deleted and the count forgotten last, so a crash
  midway leaves a partitioned topic whose missing partitions a retry deletes.
- A name ending in -partition-<n> is created only as a partition, by create or
  grow: a first use of one beyond its topic's count, or of a topic being deleted,
  is refused (TopicNotFound), so a consumer reconnecting after a forced delete does
  not bring a partition back.
- One change per partitioned topic at a time (a lock per name).
- Stats: Pulsar's PartitionedTopicStats, the partitions' counters summed and each
  partition's own stats under `partitions`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from stableline.broker import stats
from stableline.broker.config import BrokerConfig
from stableline.broker.partitioned_metadata import PartitionedMetadata
from stableline.broker.registry import TooManyTopicsError, TopicNotFoundError, TopicRegistry
from stableline.partitions import NOT_PARTITIONED, partition_topics, split_partition
from stableline.topic_name import TopicName


class TopicConflictError(Exception):
    """The name is taken: by a topic of the other kind, or a partitioned topic exists."""


class TopicBusyError(Exception):
    """A partition has connected producers or consumers; delete with force to go on."""


class PartitionedTopicNotFoundError(TopicNotFoundError):
    """No partitioned topic has that name."""


class InvalidPartitionCountError(ValueError):
    """The partition count is out of range; the message says the range."""


# Summed from each partition's stats into the partitioned topic's.
_SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "storageSize",
)


class PartitionedTopics:
    def __init__(
        self, config: BrokerConfig, registry: TopicRegistry, metadata: PartitionedMetadata
    ):
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self._locks: dict[str, asyncio.Lock] = {}
        # Partitioned topics whose creation is under way: their base names are taken.
        self._creating: set[str] = set()
        # The count each creation or growth under way makes room for.
        self._making: dict[str, int] = {}
        # Partitioned topics being deleted: their partitions are not made again.
        self._deleting: set[str] = set()
        registry.creation_checks.append(self.check_topic_creation)

    # ------------------------------------------------------------ names

    def partitions(self, name: TopicName) -> int:
        """The count of `name`, NOT_PARTITIONED (0) when it is not partitioned."""
        return self.metadata.partitions(name)

    def check_topic_creation(self, name: TopicName) -> None:
        """Raises TopicConflictError when an ordinary topic may not be called `name`
        (a partitioned topic of that name exists or is being made), and
        TopicNotFoundError for a partition beyond its topic's count: a name ending
        in -partition-<n> is made only as a partition (by create or grow), never by
        a first use, so a consumer reconnecting after its topic was deleted does
        not bring one partition back."""
        split = split_partition(name)
        if split is not None:
            base, index = split
            key = str(base)
            count = 0 if key in self._deleting else self.metadata.partitions(base)
            if index >= max(count, self._making.get(key, 0)):
                raise TopicNotFoundError(
                    f"topic {name} does not exist: a name ending in -partition-<n> is "
                    f"a partition of a partitioned topic, made with it, and {base} has "
                    f"{count} partitions"
                )
        if self.metadata.partitions(name) != NOT_PARTITIONED or str(name) in self._creating:
            raise TopicConflictError(
                f"{name} is a partitioned topic: produce to and subscribe on it with the "
                f"client (it reads every partition), or name one partition, "
                f"{name}-partition-0 .. {name}-partition-{max(self.partitions(name), 1) - 1}"
            )

    def _check_count(self, name: TopicName, count: int) -> None:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InvalidPartitionCountError(
                f"partitioned topic {name}: the number of partitions must be a whole "
                f"number >= 1, not {count!r}"
            )
        limit = self.config.max_num_partitions_per_partitioned_topic
        if limit and count > limit:
            raise InvalidPartitionCountError(
                f"partitioned topic {name}: {count} partitions is more than "
                f"max_num_partitions_per_partitioned_topic ({limit}); ask for fewer or "
                f"raise it in the broker config"
            )

    def _check_room(self, name: TopicName, more: int) -> None:
        limit = self.config.max_topics_per_namespace
        namespace = name.namespace_path
        if limit and self.registry.topics_in(namespace) + more > limit:
            raise TooManyTopicsError(
                f"namespace {namespace} holds {self.registry.topics_in(namespace)} of its "
                f"max_topics_per_namespace {limit} topics: {more} partitions do not fit; "
                f"delete topics or raise max_topics_per_namespace in the broker config"
            )

    def _lock(self, name: TopicName) -> asyncio.Lock:
        return self._locks.setdefault(str(name), asyncio.Lock())

    # ------------------------------------------------------------ changes

    async def create(self, name: TopicName, count: int) -> None:
        """Create partitioned topic `name` with `count` partitions; durable on return."""
        self._check_count(name, count)
        if split_partition(name) is not None:
            raise InvalidPartitionCountError(
                f"{name} names a partition (it ends in -partition-<n>): a partitioned "
                f"topic's name may not"
            )
        async with self._lock(name):
            if self.metadata.partitions(name) != NOT_PARTITIONED:
                raise TopicConflictError(f"partitioned topic {name} already exists")
            if self.registry.taken(name):
                raise TopicConflictError(
                    f"{name} exists as a non-partitioned topic: delete it first or "
                    f"choose another name"
                )
            self._check_room(name, sum(not self.registry.exists(p) for p in self._all(name, count)))
            self._creating.add(str(name))
            self._making[str(name)] = count
            try:
                for partition in self._all(name, count):
                    await self.registry.create(partition)
                await self.metadata.set_partitions(name, count)
            finally:
                self._creating.discard(str(name))
                del self._making[str(name)]

    async def grow(self, name: TopicName, count: int) -> None:
        """Raise `name`'s partition count to `count` (never lower); durable on return."""
        self._check_count(name, count)
        async with self._lock(name):
            old = self._existing(name)
            if count <= old:
                raise InvalidPartitionCountError(
                    f"partitioned topic {name} has {old} partitions: the count only grows "
                    f"(ask for more than {old})"
                )
            new = self._all(name, count)[old:]
            self._check_room(name, sum(not self.registry.exists(p) for p in new))
            self._making[str(name)] = count
            try:
                for partition in new:
                    await self.registry.create(partition)
                await self.metadata.set_partitions(name, count)
            finally:
                del self._making[str(name)]

    async def delete(self, name: TopicName, force: bool = False) -> None:
        """Delete every partition of `name`, then its count."""
        async with self._lock(name):
            count = self._existing(name)
            partitions = self._all(name, count)
            if not force:
                for partition in partitions:
                    busy = self._busy(partition)
                    if busy:
                        raise TopicBusyError(
                            f"partition {partition} has {busy}: close them, or delete "
                            f"with force to disconnect them"
                        )
            self._deleting.add(str(name))
            try:
                for partition in partitions:
                    # Missing: deleted by an earlier, interrupted delete.
                    with contextlib.suppress(TopicNotFoundError):
                        await self.registry.delete(partition)
                await self.metadata.delete(name)
            finally:
                self._deleting.discard(str(name))
        self._locks.pop(str(name), None)

    def _busy(self, partition: TopicName) -> str:
        topic = next((t for t in self.registry.loaded() if t.name == partition), None)
        if topic is None:
            return ""
        consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
        parts = []
        if topic.producers:
            parts.append(f"{len(topic.producers)} connected producer(s)")
        if consumers:
            parts.append(f"{consumers} connected consumer(s)")
        return " and ".join(parts)

    def _existing(self, name: TopicName) -> int:
        count = self.metadata.partitions(name)
        if count == NOT_PARTITIONED:
            raise PartitionedTopicNotFoundError(f"partitioned topic {name} does not exist")
        return count

    @staticmethod
    def _all(name: TopicName, count: int) -> list[TopicName]:
        return partition_topics(name, count)

    # ------------------------------------------------------------ reading

    def metadata_document(self, name: TopicName) -> dict[str, Any]:
        """Pulsar's PartitionedTopicMetadata: {"partitions": N}, 0 when not partitioned."""
        return {"partitions": self.metadata.partitions(name)}

    async def stats(self, name: TopicName) -> dict[str, Any]:
        """Pulsar's PartitionedTopicStats: the sums, and each partition's stats."""
        count = self._existing(name)
        per_partition: dict[str, dict[str, Any]] = {}
        for partition in self._all(name, count):
            topic = await self.registry.get(partition, create=False)
            per_partition[str(partition)] = stats.topic_stats(topic)
        return summed_stats(name, count, per_partition)


def summed_stats(
    name: TopicName, count: int, per_partition: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The partitioned topic's stats from its partitions' (a pure function)."""
    document: dict[str, Any] = {"topic": str(name), "metadata": {"partitions": count}}
    for field in _SUMMED:
        total = sum(p[field] for p in per_partition.values())
        document[field] = round(total, 3) if isinstance(total, float) else total
    messages, size = document["msgInCounter"], document["bytesInCounter"]
    document["averageMsgSize"] = round(size / messages, 3) if messages else 0.0
    document["msgBacklog"] = sum(
        sub["msgBacklog"] for p in per_partition.values() for sub in p["subscriptions"].values()
    )
    document["publishers"] = [pub for p in per_partition.values() for pub in p["publishers"]]
    subscriptions: dict[str, dict[str, Any]] = {}
    for partition_stats in per_partition.values():
        for sub_name, sub in partition_stats["subscriptions"].items():
            total = subscriptions.setdefault(
                sub_name,
                {
                    "type": sub["type"],
                    "subscriptionIsolationLevel": sub["subscriptionIsolationLevel"],
                    "msgBacklog": 0,
                    "msgOutCounter": 0,
                    "bytesOutCounter": 0,
                    "unackedMessages": 0,
                    "consumers": [],
                },
            )
            for field in ("msgBacklog", "msgOutCounter", "bytesOutCounter", "unackedMessages"):
                total[field] += sub[field]
            total["consumers"].extend(sub["consumers"])
    document["subscriptions"] = subscriptions
    document["partitions"] = per_partition
    return document
