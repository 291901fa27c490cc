"""Namespaces and their policies set by an admin: auto topic creation (Pulsar's
`set-auto-topic-creation`, its AutoTopicCreationOverride) and persistence (Pulsar's
`set-persistence`: ensemble, write and ack quorum, topics/persistence.py).

Promises:
- `NamespacePolicies` is the whole interface: whether a namespace exists, making
  it exist (when its first topic is created), and its policies. Two
  implementations: the embedded one here (one broker: its data dir) and the
  cluster's (stableline.broker.cluster.shared_metadata.namespaces: the metadata store
  shared by the brokers, so a policy set through one broker applies on all).
- A namespace exists once a topic was created in it (it stays when its topics are
  deleted, as a Pulsar namespace does) or when it is `public/default`, which every
  broker has from the start, as Pulsar's standalone does.
- A change is durable (written to the metadata store and fsynced) before the call
  that made it returns, and is read back at start; an in-memory copy answers, so
  asking costs one dict look-up.
- A namespace without the policy follows the broker's default (config
  `allow_auto_topic_creation`, see grpc/broker_service.py). Set, it decides for its
  namespace: enabled, topics are created on first use (with authorization on, only
  by a role with `produce` on the topic); disabled, never on first use, whoever
  asks (an admin still creates topics explicitly).
- A namespace without a persistence policy follows the broker's default
  (`default_persistence`, topics/persistence.py); set, it decides the ensemble of
  every topic placed in the namespace from then on (topics placed before keep theirs).
- Topics made on first use are not partitioned, so the only topic type is
  "non-partitioned".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from managed_ledger import LocalStore
from stableline.broker.errors import BrokerError
from stableline.broker.topics.database import BROKER_DB
from stableline.broker.topics.persistence import PersistencePolicy

_PREFIX = "namespace-policy:auto-topic-creation:"
_PERSISTENCE_PREFIX = "namespace-policy:persistence:"
# A namespace made by its first topic (the registry's keys live in the same database).
_NAMESPACE_PREFIX = "namespace:"
NON_PARTITIONED = "non-partitioned"
DEFAULT_NAMESPACE = "public/default"


class InvalidPolicyError(BrokerError, ValueError):
    """A policy body that is not what the path takes."""

    code = "InvalidArgument"


@dataclass(frozen=True, slots=True)
class AutoTopicCreation:
    """Whether topics of a namespace are created by their first use."""

    allowed: bool
    topic_type: str = NON_PARTITIONED

    def __post_init__(self) -> None:
        assert self.topic_type == NON_PARTITIONED, self.topic_type

    def to_json(self) -> dict[str, object]:
        """Pulsar's AutoTopicCreationOverride document."""
        return {"allowAutoTopicCreation": self.allowed, "topicType": self.topic_type}

    @classmethod
    def from_json(cls, document: object) -> AutoTopicCreation:
        """From `{"allowAutoTopicCreation": true, "topicType": "non-partitioned"}`
        (topicType may be left out); anything else raises InvalidPolicyError."""
        example = '{"allowAutoTopicCreation": true, "topicType": "non-partitioned"}'
        if not isinstance(document, dict) or not isinstance(
            document.get("allowAutoTopicCreation"), bool
        ):
            raise InvalidPolicyError(f"the body must be a JSON object such as {example}")
        unknown = set(document) - {"allowAutoTopicCreation", "topicType"}
        if unknown:
            raise InvalidPolicyError(f"unknown fields {sorted(unknown)}: send {example}")
        topic_type = document.get("topicType", NON_PARTITIONED)
        if topic_type != NON_PARTITIONED:
            raise InvalidPolicyError(
                f"topicType {topic_type!r}: topics here are not partitioned, "
                f'the only type is "{NON_PARTITIONED}"'
            )
        return cls(document["allowAutoTopicCreation"])


class NamespacePolicies(Protocol):
    def exists(self, namespace: str) -> bool:
        """True for public/default and every namespace a topic was ever created in."""
        ...

    async def add(self, namespace: str) -> None:
        """Make `namespace` exist (its first topic is being created); durable on return."""
        ...

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation | None:
        """The namespace's policy; None: the broker's default applies."""
        ...

    async def set_auto_topic_creation(self, namespace: str, policy: AutoTopicCreation) -> None: ...

    async def remove_auto_topic_creation(self, namespace: str) -> bool:
        """Back to the broker's default; False when the namespace had no policy."""
        ...

    def persistence(self, namespace: str) -> PersistencePolicy | None:
        """The namespace's persistence policy; None: the broker's default applies."""
        ...

    async def set_persistence(self, namespace: str, policy: PersistencePolicy) -> None: ...

    async def remove_persistence(self, namespace: str) -> bool:
        """Back to the broker's default; False when the namespace had no policy."""
        ...


class EmbeddedNamespacePolicies:
    """Namespaces and their policies in the broker's own metadata store."""

    def __init__(self, store: LocalStore, topic_namespaces: Iterable[str] = ()):
        """`topic_namespaces`: the namespaces of the broker's topics, which exist
        even if written before namespaces were recorded."""
        self._store = store
        self._auto_topic_creation: dict[str, AutoTopicCreation] = {
            key[len(_PREFIX) :]: AutoTopicCreation(**json.loads(raw))
            for key, raw in store.scan_prefix(BROKER_DB, _PREFIX)
        }
        self._persistence: dict[str, PersistencePolicy] = {
            key[len(_PERSISTENCE_PREFIX) :]: PersistencePolicy.from_json(json.loads(raw))
            for key, raw in store.scan_prefix(BROKER_DB, _PERSISTENCE_PREFIX)
        }
        self._namespaces: set[str] = {DEFAULT_NAMESPACE, *topic_namespaces}
        self._namespaces.update(
            key[len(_NAMESPACE_PREFIX) :]
            for key, _ in store.scan_prefix(BROKER_DB, _NAMESPACE_PREFIX)
        )

    def exists(self, namespace: str) -> bool:
        return namespace in self._namespaces

    def recorded(self) -> list[str]:
        """Every namespace this store knows to exist, sorted."""
        return sorted(self._namespaces)

    def policies(self) -> dict[str, AutoTopicCreation]:
        """Every namespace's policy (a copy)."""
        return dict(self._auto_topic_creation)

    async def add(self, namespace: str) -> None:
        if namespace in self._namespaces:
            return
        self._store.put(BROKER_DB, _NAMESPACE_PREFIX + namespace, b"")
        await self._store.sync_async()
        self._namespaces.add(namespace)

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation | None:
        return self._auto_topic_creation.get(namespace)

    async def set_auto_topic_creation(self, namespace: str, policy: AutoTopicCreation) -> None:
        document = {"allowed": policy.allowed, "topic_type": policy.topic_type}
        self._store.put(BROKER_DB, _PREFIX + namespace, json.dumps(document).encode())
        await self._store.sync_async()
        self._auto_topic_creation[namespace] = policy

    async def remove_auto_topic_creation(self, namespace: str) -> bool:
        if namespace not in self._auto_topic_creation:
            return False
        self._store.delete(BROKER_DB, _PREFIX + namespace)
        await self._store.sync_async()
        del self._auto_topic_creation[namespace]
        return True

    def persistence(self, namespace: str) -> PersistencePolicy | None:
        return self._persistence.get(namespace)

    async def set_persistence(self, namespace: str, policy: PersistencePolicy) -> None:
        document = json.dumps(policy.to_json()).encode()
        self._store.put(BROKER_DB, _PERSISTENCE_PREFIX + namespace, document)
        await self._store.sync_async()
        self._persistence[namespace] = policy

    async def remove_persistence(self, namespace: str) -> bool:
        if namespace not in self._persistence:
            return False
        self._store.delete(BROKER_DB, _PERSISTENCE_PREFIX + namespace)
        await self._store.sync_async()
        del self._persistence[namespace]
        return True
