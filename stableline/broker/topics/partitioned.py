"""Partitioned topics on the broker: create, grow, describe, delete, stats.

A partitioned topic `T` is its count, kept by PartitionedMetadata, and the ordinary
topics `T-partition-0 .. T-partition-{N-1}` (stableline.partitions), each created
in the registry like any topic and loaded on first use, so each could be owned by
any broker. What is asked of one partition (its stats, whether it is in use, its
deletion) goes through `PartitionAccess`: here, this broker's registry
(`LocalPartitions`); in a cluster, the partition's owner (cluster/partitions.py).
With the cluster's metadata store the count is shared by the brokers, so the
partitioned topic made through one broker is served through all.

Promises:
- Names: a name ending in `-partition-<digits>` is refused as the base of a new
  partitioned topic; a partitioned `T` and a non-partitioned `T` never both exist
  (creating either refuses the other, also while the other's creation is under
  way on this broker; across brokers each checks what the cluster's metadata
  showed it a moment before).
- Create: 1 <= N <= `max_num_partitions_per_partitioned_topic` (0: no limit), and
  room in the namespace for N more topics. The partitions are created first and
  the count is recorded last, so a recorded count always has its partitions. Of
  brokers creating one name at once, one records its count; the others get
  TopicConflictError and delete what they made beyond the winner's count.
- Grow only: the new count is larger than the old (Pulsar refuses a shrink too);
  the new partitions are created before the larger count is recorded, over the
  count read (a growth through another broker meanwhile: TopicConflictError).
- Delete: refused while any partition has a connected producer or consumer, unless
  forced; then the topic is marked as being deleted, every partition is deleted
  (at its owner) and the count forgotten last, so a crash midway leaves a
  partitioned topic whose missing partitions a retry deletes.
- A name ending in -partition-<n> is created only as a partition, by create or
  grow: a first use of one beyond its topic's count, or of a topic being deleted,
  is refused (TopicNotFound), so a consumer reconnecting after a forced delete does
  not bring a partition back.
- One change per partitioned topic at a time on this broker (a lock per name).
- Stats: Pulsar's PartitionedTopicStats, the partitions' counters summed and each
  partition's own stats under `partitions`, every subscription with its
  `subscriptionIsolationLevel`; each partition's from its owner, asked at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from stableline.broker.config import BrokerConfig
from stableline.broker.errors import BrokerError
from stableline.broker.topics import stats
from stableline.broker.topics.partition_counts import CountChanged, PartitionedMetadata
from stableline.broker.topics.persistence import PersistencePolicy
from stableline.broker.topics.registry import TooManyTopicsError, TopicNotFoundError, TopicRegistry
from stableline.partitions import NOT_PARTITIONED, partition_topics, split_partition
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)


class TopicConflictError(BrokerError):
    """The name is taken: by a topic of the other kind, or a partitioned topic exists."""

    code = "TopicConflict"


class TopicBusyError(BrokerError):
    """A partition has connected producers or consumers; delete with force to go on."""

    code = "TopicBusy"


class PartitionedTopicNotFoundError(TopicNotFoundError):
    """No partitioned topic has that name."""


class InvalidPartitionCountError(BrokerError, ValueError):
    """The partition count is out of range; the message says the range."""

    code = "InvalidArgument"


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


class PartitionAccess(Protocol):
    """What is asked of one partition, wherever it lives."""

    async def stats(self, partition: TopicName) -> dict[str, Any]:
        """Its stats document (stats.topic_stats); TopicNotFoundError if it is gone."""
        ...

    async def busy(self, partition: TopicName) -> str:
        """Its connected producers and consumers in words; "" when it has none."""
        ...

    async def delete(self, partition: TopicName) -> None:
        """Delete it; TopicNotFoundError if it does not exist."""
        ...


class LocalPartitions:
    """PartitionAccess on one broker: every partition is in its registry."""

    def __init__(self, registry: TopicRegistry):
        self.registry = registry

    async def stats(self, partition: TopicName) -> dict[str, Any]:
        return stats.topic_stats(await self.registry.get(partition, create=False))

    async def busy(self, partition: TopicName) -> str:
        topic = next((t for t in self.registry.loaded() if t.name == partition), None)
        if topic is None:
            return ""
        consumers = sum(len(s.consumers) for s in topic.subscriptions.values())
        return _in_use(len(topic.producers), consumers)

    async def delete(self, partition: TopicName) -> None:
        await self.registry.delete(partition)


def _in_use(producers: int, consumers: int) -> str:
    parts = []
    if producers:
        parts.append(f"{producers} connected producer(s)")
    if consumers:
        parts.append(f"{consumers} connected consumer(s)")
    return " and ".join(parts)


def in_use_from_stats(document: dict[str, Any]) -> str:
    """What `busy` says, from a partition's stats document."""
    consumers = sum(len(sub["consumers"]) for sub in document["subscriptions"].values())
    return _in_use(len(document["publishers"]), consumers)


class PartitionedTopics:
    def __init__(
        self,
        config: BrokerConfig,
        registry: TopicRegistry,
        metadata: PartitionedMetadata,
        access: PartitionAccess | None = None,
    ):
        self.config = config
        self.registry = registry
        self.metadata = metadata
        self.access: PartitionAccess = access or LocalPartitions(registry)
        self._locks: dict[str, asyncio.Lock] = {}
        # Partitioned topics whose creation is under way: their base names are taken.
        self._creating: set[str] = set()
        # The count each creation or growth under way makes room for.
        self._making: dict[str, int] = {}
        registry.creation_checks.append(self.check_topic_creation)

    # ------------------------------------------------------------ names

    def partitions(self, name: TopicName) -> int:
        """The count of `name`, NOT_PARTITIONED (0) when it is not partitioned."""
        return self.metadata.partitions(name)

    async def read_partitions(self, name: TopicName) -> int:
        """The count as the metadata store has it now, for answers to clients."""
        return await self.metadata.read_partitions(name)

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
            count = 0 if self.metadata.deleting(base) else self.metadata.partitions(base)
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

    async def create(
        self, name: TopicName, count: int, persistence: PersistencePolicy | None = None
    ) -> None:
        """Create partitioned topic `name` with `count` partitions; durable on return.
        `persistence`: the policy its partitions are placed by (default: the namespace's)."""
        self._check_count(name, count)
        if split_partition(name) is not None:
            raise InvalidPartitionCountError(
                f"{name} names a partition (it ends in -partition-<n>): a partitioned "
                f"topic's name may not"
            )
        async with self._lock(name):
            if await self.metadata.read_partitions(name) != NOT_PARTITIONED:
                raise TopicConflictError(f"partitioned topic {name} already exists")
            if await self.registry.taken_in_cluster(name):
                raise TopicConflictError(
                    f"{name} exists as a non-partitioned topic: delete it first or "
                    f"choose another name"
                )
            self._check_room(name, sum(not self.registry.exists(p) for p in self._all(name, count)))
            self._creating.add(str(name))
            self._making[str(name)] = count
            try:
                for partition in self._all(name, count):
                    await self.registry.create(partition, persistence=persistence)
                try:
                    await self.metadata.create(name, count)
                except CountChanged as error:
                    await self._delete_beyond_count(name, count)
                    raise TopicConflictError(str(error)) from None
            finally:
                self._creating.discard(str(name))
                del self._making[str(name)]

    async def _delete_beyond_count(self, name: TopicName, made: int) -> None:
        """After another broker's creation of `name` won: delete the partitions this
        one made beyond the winner's count (best effort: none is in use yet)."""
        winner = await self.metadata.read_partitions(name)
        for partition in self._all(name, made)[winner:]:
            try:
                await self.access.delete(partition)
            except TopicNotFoundError:
                pass
            except Exception as error:
                log.warning("could not delete %s, made by a lost creation: %s", partition, error)

    async def grow(self, name: TopicName, count: int) -> None:
        """Raise `name`'s partition count to `count` (never lower); durable on return."""
        self._check_count(name, count)
        async with self._lock(name):
            old = await self._existing(name)
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
                try:
                    await self.metadata.grow(name, old, count)
                except CountChanged as error:
                    raise TopicConflictError(str(error)) from None
            finally:
                del self._making[str(name)]

    async def delete(self, name: TopicName, force: bool = False) -> None:
        """Delete every partition of `name`, then its count."""
        async with self._lock(name):
            count = await self._existing(name, deleting_too=True)
            partitions = self._all(name, count)
            if not force:
                busy = await asyncio.gather(*(self.access.busy(p) for p in partitions))
                for partition, in_use in zip(partitions, busy, strict=True):
                    if in_use:
                        raise TopicBusyError(
                            f"partition {partition} has {in_use}: close them, or delete "
                            f"with force to disconnect them"
                        )
            # Marked before the first partition goes, and kept if this fails midway.
            await self.metadata.mark_deleting(name)
            for partition in partitions:
                # Missing: deleted by an earlier, interrupted delete.
                with contextlib.suppress(TopicNotFoundError):
                    await self.access.delete(partition)
            await self.metadata.delete(name)
        self._locks.pop(str(name), None)

    async def _existing(self, name: TopicName, deleting_too: bool = False) -> int:
        count = await self.metadata.read_partitions(name)
        if count == NOT_PARTITIONED:
            raise PartitionedTopicNotFoundError(f"partitioned topic {name} does not exist")
        if self.metadata.deleting(name) and not deleting_too:
            raise PartitionedTopicNotFoundError(
                f"partitioned topic {name} is being deleted: a delete that stopped midway "
                f"is finished by deleting it again"
            )
        return count

    @staticmethod
    def _all(name: TopicName, count: int) -> list[TopicName]:
        return partition_topics(name, count)

    # ------------------------------------------------------------ reading

    async def metadata_document(self, name: TopicName) -> dict[str, Any]:
        """Pulsar's PartitionedTopicMetadata: {"partitions": N}, 0 when not partitioned."""
        return {"partitions": await self.metadata.read_partitions(name)}

    async def stats(self, name: TopicName) -> dict[str, Any]:
        """Pulsar's PartitionedTopicStats: the sums, and each partition's stats."""
        count = await self._existing(name)
        partitions = self._all(name, count)
        documents = await asyncio.gather(*(self.access.stats(p) for p in partitions))
        per_partition = {str(p): d for p, d in zip(partitions, documents, strict=True)}
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
