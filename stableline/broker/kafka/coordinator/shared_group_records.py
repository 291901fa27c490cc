"""Consumer groups' records (group_records.py) in the cluster's metadata store.

A group's coordinator is the leader of a transaction coordinator shard, which moves
to another broker when its leader dies; the group's index and owner role move with
it by living in the cluster's store (layout.kafka_groups_dir):

- `.../groups/{group}/partitions/{topic}`: {"partitions": [sorted numbers]}, one
  key per Kafka topic, so a value is bounded by a topic's partition count and one
  commit on many new partitions of a topic is one write;
- `.../groups/{group}/owner`: the owning role's name.

Every broker reads them from a mirror kept current by a watch (metadata/mirror.py,
as the namespaces' policies are read), so reads cost nothing; the mirror holds
every group of the cluster (a few bytes per group and topic). Writes are
read-modify-write by compare-and-set (metadata/updates.py) and idempotent: noting
partitions the mirror already lists writes nothing, so the store is written only
when a group commits on a partition for the first time, or is claimed. A write is
durable in the store when its call returns, and seen by this broker's reads then
too (the writer waits for its watch to bring the write back); a new coordinator
reads the group's records as soon as its watch has brought them, milliseconds
after they were written.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable

from stableline.metadata import ClusterMetadataStore
from stableline.metadata.layout import (
    kafka_group_key_of,
    kafka_group_owner_path,
    kafka_group_partitions_path,
    kafka_groups_dir,
)
from stableline.metadata.mirror import PrefixMirror
from stableline.metadata.updates import update_key


def encode_partitions(partitions: Iterable[int]) -> bytes:
    return json.dumps({"partitions": sorted(set(partitions))}, separators=(",", ":")).encode()


def decode_partitions(raw: bytes) -> tuple[int, ...]:
    return tuple(int(each) for each in json.loads(raw)["partitions"])


class SharedGroupRecords:
    """GroupRecords shared by a cluster's brokers."""

    def __init__(self, store: ClusterMetadataStore, cluster: str) -> None:
        self._store = store
        self._cluster = cluster
        self._mirror = PrefixMirror(store, kafka_groups_dir(cluster))
        self._mirror.listeners.append(self._on_change)
        # group -> Kafka topic -> partitions, and group -> owner: what the mirror
        # holds, decoded once per change.
        self._indexes: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        self._owners: dict[str, str] = {}

    async def start(self) -> None:
        """Read every group's records (MetadataStoreError if the store cannot answer)."""
        await self._mirror.start()

    async def close(self) -> None:
        await self._mirror.close()

    def _on_change(self, path: str) -> None:
        group_id, kafka_topic = kafka_group_key_of(self._cluster, path)
        result = self._mirror.get(path)
        if kafka_topic is None:
            if result is None:
                self._owners.pop(group_id, None)
            else:
                self._owners[group_id] = result.value.decode()
            return
        index = self._indexes[group_id]
        if result is None:
            index.pop(kafka_topic, None)
        else:
            index[kafka_topic] = decode_partitions(result.value)
        if not index:
            del self._indexes[group_id]

    # ------------------------------------------------------------ index

    def partitions(self, group_id: str) -> list[tuple[str, int]]:
        index = self._indexes.get(group_id, {})
        return [
            (kafka_topic, partition)
            for kafka_topic in sorted(index)
            for partition in index[kafka_topic]
        ]

    def has_partitions(self, group_id: str) -> bool:
        return bool(self._indexes.get(group_id))

    def groups(self) -> list[str]:
        return sorted(group_id for group_id, index in self._indexes.items() if index)

    async def note(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        index = self._indexes.get(group_id, {})
        new: dict[str, set[int]] = defaultdict(set)
        for kafka_topic, partition in partitions:
            if partition not in index.get(kafka_topic, ()):
                new[kafka_topic].add(partition)
        for kafka_topic, added in sorted(new.items()):

            def with_added(raw: bytes | None, added: set[int] = added) -> bytes | None:
                held = decode_partitions(raw) if raw is not None else ()
                if added.issubset(held):
                    return raw
                return encode_partitions((*held, *added))

            await self._write(
                kafka_group_partitions_path(self._cluster, group_id, kafka_topic), with_added
            )

    async def forget(self, group_id: str, kafka_topic: str, partition: int) -> None:
        if partition not in self._indexes.get(group_id, {}).get(kafka_topic, ()):
            return

        def without(raw: bytes | None) -> bytes | None:
            if raw is None:
                return None
            held = decode_partitions(raw)
            if partition not in held:
                return raw
            kept = [each for each in held if each != partition]
            return encode_partitions(kept) if kept else None

        await self._write(
            kafka_group_partitions_path(self._cluster, group_id, kafka_topic), without
        )

    # ------------------------------------------------------------ owner

    def owner(self, group_id: str) -> str | None:
        return self._owners.get(group_id)

    async def claim(self, group_id: str, role: str, replacing: str | None) -> str | None:
        expected = None if replacing is None else replacing.encode()
        found: list[bytes | None] = []

        def claimed(raw: bytes | None) -> bytes | None:
            found.append(raw)
            return role.encode() if raw == expected else raw

        await self._write(kafka_group_owner_path(self._cluster, group_id), claimed)
        # The last value `claimed` saw is the store's: ours if it matched, else the
        # claim of whoever came first.
        last = found[-1]
        if last == expected:
            return role
        return None if last is None else last.decode()

    async def _write(self, path: str, change: Callable[[bytes | None], bytes | None]) -> None:
        revision = await update_key(self._store, path, change)
        if revision:
            await self._mirror.caught_up(revision)
