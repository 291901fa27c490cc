"""Where the broker keeps partitioned topics' partition counts: the one module that
reads and writes them.

Promises:
- `PartitionedMetadata` is the whole interface: the count of a partitioned topic
  (NOT_PARTITIONED, 0, for any other name), every partitioned topic's name, and
  durable writes. A cluster's metadata store can back it later without its callers
  changing.
- The embedded implementation keeps each count in the broker's metadata store
  (LMDB in the data dir, beside the topic names) as `{"partitions": N}`, Pulsar's
  PartitionedTopicMetadata document, and a copy of all of them in memory, read once
  at start, so a look-up (made for every topic creation) costs a dict access.
- A write is durable (fsynced) when `set_partitions` or `delete` returns.
"""

from __future__ import annotations

import json
from typing import Protocol

from managed_ledger import MetadataStore
from stableline.partitions import NOT_PARTITIONED
from stableline.topic_name import TopicName

# The broker's own database in the metadata store (the registry's topic names live there).
_DB = b"broker"
_PREFIX = "partitioned:"


class PartitionedMetadata(Protocol):
    def partitions(self, name: TopicName) -> int:
        """The partition count of `name`, NOT_PARTITIONED (0) unless it is partitioned."""
        ...

    def names(self, namespace: str | None = None) -> list[str]:
        """Every partitioned topic's name (of `namespace` when given), sorted."""
        ...

    async def set_partitions(self, name: TopicName, count: int) -> None:
        """Record `count` partitions for `name`; durable on return."""
        ...

    async def delete(self, name: TopicName) -> None:
        """Forget `name`'s count; durable on return."""
        ...


class EmbeddedPartitionedMetadata:
    """PartitionedMetadata in the broker's own metadata store."""

    def __init__(self, store: MetadataStore):
        self._store = store
        self._counts: dict[str, int] = {}
        for key, value in store.scan_prefix(_DB, _PREFIX):
            count = json.loads(value)["partitions"]
            assert isinstance(count, int) and count > 0, (key, value)
            self._counts[key[len(_PREFIX) :]] = count

    def partitions(self, name: TopicName) -> int:
        return self._counts.get(str(name), NOT_PARTITIONED)

    def names(self, namespace: str | None = None) -> list[str]:
        names = sorted(self._counts)
        if namespace:
            prefix = f"persistent://{namespace}/"
            names = [n for n in names if n.startswith(prefix)]
        return names

    async def set_partitions(self, name: TopicName, count: int) -> None:
        assert count > 0, count
        self._store.put(_DB, _PREFIX + str(name), json.dumps({"partitions": count}).encode())
        await self._store.sync_async()
        self._counts[str(name)] = count

    async def delete(self, name: TopicName) -> None:
        self._store.delete(_DB, _PREFIX + str(name))
        await self._store.sync_async()
        self._counts.pop(str(name), None)
