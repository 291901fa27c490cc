"""Namespaces and their policies in the cluster's metadata store (NamespacePolicies).

`/stableline/namespaces/{tenant}/{namespace}` holds
`{"created": true, "autoTopicCreationOverride": {...}, "persistence": {...}}`:
`created` once a topic was made in the namespace through any broker (it exists from
then on), the override (Pulsar's AutoTopicCreationOverride document) and the
persistence policy (Pulsar's PersistencePolicies document) when an admin set them.
A record written before persistence policies existed reads as having none. A policy may
be set before the namespace has a topic, as on one broker; a key left with
neither is deleted.

Every broker answers from a mirror kept current by a watch, so a policy set
through one broker applies on the others once their watch brings it (a few
milliseconds here); on the broker that set it, when the call returns. Changes are
read-modify-write by compare-and-set, so a policy set through one broker and a
first topic created through another at once both stay.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from stableline.broker.topics.namespace_policies import DEFAULT_NAMESPACE, AutoTopicCreation
from stableline.broker.topics.persistence import PersistencePolicy
from stableline.metadata import ClusterMetadataStore
from stableline.metadata.layout import namespace_path, namespaces_dir, relative_segments
from stableline.metadata.mirror import PrefixMirror
from stableline.metadata.updates import update_key

_OVERRIDE = "autoTopicCreationOverride"
_PERSISTENCE = "persistence"


@dataclass(frozen=True, slots=True)
class NamespaceRecord:
    created: bool = False
    auto_topic_creation: AutoTopicCreation | None = None
    persistence: PersistencePolicy | None = None

    def to_json(self) -> bytes | None:
        """The document; None when there is nothing to keep (the key is deleted)."""
        document: dict[str, object] = {}
        if self.created:
            document["created"] = True
        if self.auto_topic_creation is not None:
            document[_OVERRIDE] = self.auto_topic_creation.to_json()
        if self.persistence is not None:
            document[_PERSISTENCE] = self.persistence.to_json()
        return json.dumps(document, separators=(",", ":")).encode() if document else None

    @classmethod
    def from_json(cls, raw: bytes | None) -> NamespaceRecord:
        if raw is None:
            return cls()
        document = json.loads(raw)
        override = document.get(_OVERRIDE)
        policy = AutoTopicCreation.from_json(override) if override is not None else None
        persistence = document.get(_PERSISTENCE)
        return cls(
            bool(document.get("created", False)),
            policy,
            PersistencePolicy.from_json(persistence) if persistence is not None else None,
        )


class ClusterNamespacePolicies:
    """NamespacePolicies shared by a cluster's brokers."""

    def __init__(self, store: ClusterMetadataStore):
        self.store = store
        self._mirror = PrefixMirror(store, namespaces_dir())
        self._mirror.listeners.append(self._on_change)
        self._records: dict[str, NamespaceRecord] = {}

    async def start(self) -> None:
        await self._mirror.start()

    async def close(self) -> None:
        await self._mirror.close()

    def _on_change(self, path: str) -> None:
        tenant, namespace = relative_segments(namespaces_dir(), path)
        result = self._mirror.get(path)
        if result is None:
            self._records.pop(f"{tenant}/{namespace}", None)
        else:
            self._records[f"{tenant}/{namespace}"] = NamespaceRecord.from_json(result.value)

    # --- reading ----------------------------------------------------------------------

    def exists(self, namespace: str) -> bool:
        record = self._records.get(namespace)
        return namespace == DEFAULT_NAMESPACE or (record is not None and record.created)

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation | None:
        record = self._records.get(namespace)
        return record.auto_topic_creation if record is not None else None

    def persistence(self, namespace: str) -> PersistencePolicy | None:
        record = self._records.get(namespace)
        return record.persistence if record is not None else None

    # --- changing ---------------------------------------------------------------------

    async def add(self, namespace: str) -> None:
        if self.exists(namespace):
            return
        await self._update(namespace, lambda record: replace(record, created=True))

    async def set_auto_topic_creation(self, namespace: str, policy: AutoTopicCreation) -> None:
        await self._update(namespace, lambda record: replace(record, auto_topic_creation=policy))

    async def remove_auto_topic_creation(self, namespace: str) -> bool:
        removed = False

        def without(record: NamespaceRecord) -> NamespaceRecord:
            nonlocal removed
            removed = record.auto_topic_creation is not None
            return replace(record, auto_topic_creation=None)

        await self._update(namespace, without)
        return removed

    async def set_persistence(self, namespace: str, policy: PersistencePolicy) -> None:
        await self._update(namespace, lambda record: replace(record, persistence=policy))

    async def remove_persistence(self, namespace: str) -> bool:
        removed = False

        def without(record: NamespaceRecord) -> NamespaceRecord:
            nonlocal removed
            removed = record.persistence is not None
            return replace(record, persistence=None)

        await self._update(namespace, without)
        return removed

    async def _update(
        self, namespace: str, change: Callable[[NamespaceRecord], NamespaceRecord]
    ) -> None:
        def changed(raw: bytes | None) -> bytes | None:
            old = NamespaceRecord.from_json(raw)
            new = change(old)
            return raw if new == old else new.to_json()

        revision = await update_key(self.store, namespace_path(namespace), changed)
        if revision:
            await self._mirror.caught_up(revision)
