"""Where the broker keeps partitioned topics' partition counts: the one interface that
reads and writes them, and its embedded implementation.

Promises:
- `PartitionedMetadata` is the whole interface: the count of a partitioned topic
  (NOT_PARTITIONED, 0, for any other name), whether it is being deleted, every
  partitioned topic's name, and durable writes that check what they change: a
  creation fails if the name has a count already, a growth if the count is no
  longer the one the caller saw (`CountChanged`), so two brokers changing one
  topic at once cannot both win.
- Two implementations: the embedded one here (one broker: its data dir), and the
  cluster's (stableline.broker.cluster.shared_metadata.partitioned: the metadata store
  shared by the brokers), whose callers are the same.
- The embedded implementation keeps each count in the broker's metadata store
  (LMDB in the data dir, beside the topic names) as `{"partitions": N}`, Pulsar's
  PartitionedTopicMetadata document, and a copy of all of them in memory, read once
  at start, so a look-up (made for every topic creation) costs a dict access. A
  deletion under way is marked in memory only (a restart forgets it; a retried
  delete finishes the work).
- A write is durable (fsynced) when it returns.
"""

from __future__ import annotations

import json
from typing import Protocol

from managed_ledger import LocalStore
from stableline.broker.errors import BrokerError
from stableline.broker.topics.database import BROKER_DB
from stableline.partitions import NOT_PARTITIONED
from stableline.topic_name import TopicName

# The broker's own database in the metadata store (the registry's topic names live there).
_PREFIX = "partitioned:"


class CountChanged(BrokerError):
    """The partitioned topic was created, grown or deleted meanwhile (by another
    broker): the message says what it is now."""

    code = "TopicConflict"


class PartitionedMetadata(Protocol):
    def partitions(self, name: TopicName) -> int:
        """The partition count of `name`, NOT_PARTITIONED (0) unless it is
        partitioned, as this broker knows it (in a cluster: current to within the
        watch's delay)."""
        ...

    async def read_partitions(self, name: TopicName) -> int:
        """The count as the store has it now, for answers to clients (in a cluster a
        name this broker does not know as partitioned is read through)."""
        ...

    def deleting(self, name: TopicName) -> bool:
        """Whether a deletion of `name` is under way (its partitions are not made again)."""
        ...

    def names(self, namespace: str | None = None) -> list[str]:
        """Every partitioned topic's name (of `namespace` when given), sorted."""
        ...

    async def create(self, name: TopicName, count: int) -> None:
        """Record `count` partitions for a new `name`; CountChanged if it has a count."""
        ...

    async def grow(self, name: TopicName, old: int, count: int) -> None:
        """Raise `name`'s count from `old` to `count`; CountChanged unless it is at
        `old` and not being deleted."""
        ...

    async def mark_deleting(self, name: TopicName) -> None:
        """Mark a deletion of `name` as under way."""
        ...

    async def delete(self, name: TopicName) -> None:
        """Forget `name`'s count (and its mark)."""
        ...


class EmbeddedPartitionedMetadata:
    """PartitionedMetadata in the broker's own metadata store."""

    def __init__(self, store: LocalStore):
        self._store = store
        self._counts: dict[str, int] = {}
        self._deleting: set[str] = set()
        for key, value in store.scan_prefix(BROKER_DB, _PREFIX):
            count = json.loads(value)["partitions"]
            assert isinstance(count, int) and count > 0, (key, value)
            self._counts[key[len(_PREFIX) :]] = count

    def partitions(self, name: TopicName) -> int:
        return self._counts.get(str(name), NOT_PARTITIONED)

    async def read_partitions(self, name: TopicName) -> int:
        return self.partitions(name)

    def deleting(self, name: TopicName) -> bool:
        return str(name) in self._deleting

    def names(self, namespace: str | None = None) -> list[str]:
        names = sorted(self._counts)
        if namespace:
            prefix = f"persistent://{namespace}/"
            names = [n for n in names if n.startswith(prefix)]
        return names

    async def create(self, name: TopicName, count: int) -> None:
        if str(name) in self._counts:
            raise CountChanged(
                f"partitioned topic {name} exists with {self._counts[str(name)]} partitions"
            )
        await self._write(name, count)

    async def grow(self, name: TopicName, old: int, count: int) -> None:
        assert count > old, (old, count)
        if self.partitions(name) != old or self.deleting(name):
            raise CountChanged(f"partitioned topic {name} changed meanwhile")
        await self._write(name, count)

    async def _write(self, name: TopicName, count: int) -> None:
        assert count > 0, count
        self._store.put(BROKER_DB, _PREFIX + str(name), json.dumps({"partitions": count}).encode())
        await self._store.sync_async()
        self._counts[str(name)] = count

    async def mark_deleting(self, name: TopicName) -> None:
        self._deleting.add(str(name))

    async def delete(self, name: TopicName) -> None:
        self._store.delete(BROKER_DB, _PREFIX + str(name))
        await self._store.sync_async()
        self._counts.pop(str(name), None)
        self._deleting.discard(str(name))
