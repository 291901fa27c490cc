"""A consumer group's own small records: its index and its owner role.

A group's committed offsets are its subscriptions' cursors (group_offsets.py), kept
with each partition's topic. What the group's coordinator needs besides them is
small and changes rarely:

- the group's index: which (topic, partition)s it has committed on, for OffsetFetch
  of every partition, ListGroups and DescribeGroups of a group with no member;
  changed when the group first commits on a partition, or finds its subscription
  gone;
- its owner role, with authorization on (group_access.py): set once, when a role
  claims the group.

`GroupRecords` is the interface; reads answer at once (no I/O), writes are durable
when they return and idempotent (noting what is noted already writes nothing).
Standalone the records are keys of the broker's own store (`LocalGroupRecords`, this
module: "kafka-group:" and "kafka-group-owner:" keys in BROKER_DB); in a cluster
they live in the cluster's metadata store (shared_group_records.py), so that they
follow the group to whichever broker coordinates it next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from managed_ledger import LocalStore
from stableline.broker.topics.database import BROKER_DB

_INDEX_PREFIX = "kafka-group:"
_OWNER_PREFIX = "kafka-group-owner:"


class GroupRecords(Protocol):
    """The index and owner of every consumer group (see the module docstring)."""

    # ------------------------------------------------------------ index

    def partitions(self, group_id: str) -> list[tuple[str, int]]:
        """The (Kafka topic, partition)s the group has committed on, sorted."""
        ...

    def has_partitions(self, group_id: str) -> bool: ...

    def groups(self) -> list[str]:
        """Every group with at least one partition in its index, in name order."""
        ...

    async def note(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """The index lists these partitions too; durable once this returns
        (MetadataStoreError when the cluster's store cannot take it now)."""
        ...

    async def forget(self, group_id: str, kafka_topic: str, partition: int) -> None:
        """The index no longer lists the partition (its subscription is gone)."""
        ...

    # ------------------------------------------------------------ owner

    def owner(self, group_id: str) -> str | None:
        """The role that owns the group (None: nobody)."""
        ...

    async def claim(self, group_id: str, role: str, replacing: str | None) -> str | None:
        """Make `role` the owner, if the owner is still `replacing` (what the caller
        read); durable once this returns. The owner afterwards: `role`, or whoever
        claimed the group meanwhile (then the caller's claim lost)."""
        ...

    async def close(self) -> None: ...


def _index_key(group_id: str, kafka_topic: str, partition: int) -> str:
    return f"{_INDEX_PREFIX}{group_id}\x00{kafka_topic}\x00{partition}"


class LocalGroupRecords:
    """GroupRecords in the broker's own store (a lone broker)."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    def partitions(self, group_id: str) -> list[tuple[str, int]]:
        prefix = f"{_INDEX_PREFIX}{group_id}\x00"
        found = []
        for key, _value in self._store.scan_prefix(BROKER_DB, prefix):
            kafka_topic, _, partition = key[len(prefix) :].partition("\x00")
            found.append((kafka_topic, int(partition)))
        return sorted(found)

    def has_partitions(self, group_id: str) -> bool:
        prefix = f"{_INDEX_PREFIX}{group_id}\x00"
        return next(self._store.scan_prefix(BROKER_DB, prefix), None) is not None

    def groups(self) -> list[str]:
        groups: list[str] = []
        for key, _value in self._store.scan_prefix(BROKER_DB, _INDEX_PREFIX):
            group_id = key[len(_INDEX_PREFIX) :].split("\x00", 1)[0]
            if not groups or groups[-1] != group_id:
                groups.append(group_id)
        return groups

    async def note(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        # Written with the store's next sync, as the cursors of the commit are.
        for kafka_topic, partition in partitions:
            key = _index_key(group_id, kafka_topic, partition)
            if self._store.get(BROKER_DB, key) is None:
                self._store.put(BROKER_DB, key, kafka_topic.encode())

    async def forget(self, group_id: str, kafka_topic: str, partition: int) -> None:
        key = _index_key(group_id, kafka_topic, partition)
        if self._store.get(BROKER_DB, key) is not None:
            self._store.delete(BROKER_DB, key)

    def owner(self, group_id: str) -> str | None:
        raw = self._store.get(BROKER_DB, _OWNER_PREFIX + group_id)
        return None if raw is None else raw.decode()

    async def claim(self, group_id: str, role: str, replacing: str | None) -> str | None:
        current = self.owner(group_id)
        if current != replacing:
            return current
        # Put before the fsync: a request on this broker sees the claim at once.
        self._store.put(BROKER_DB, _OWNER_PREFIX + group_id, role.encode())
        await self._store.sync_async()
        return role

    async def close(self) -> None:
        return None
