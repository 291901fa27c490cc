"""Per-namespace policies set by an admin; today one: auto topic creation (Pulsar's
`set-auto-topic-creation`, its AutoTopicCreationOverride).

Promises:
- A policy is durable (written to the metadata store and fsynced) before the call
  that set or removed it returns, and is read back at start; an in-memory copy
  answers, so asking costs one dict look-up.
- A namespace without the policy follows the broker's default (config
  `allow_auto_topic_creation`, see grpc_broker.py). Set, it decides for its
  namespace: enabled, topics are created on first use (with authorization on, only
  by a role with `produce` on the topic); disabled, never on first use, whoever
  asks (an admin still creates topics explicitly).
- Topics here are not partitioned, so the only topic type is "non-partitioned".
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from managed_ledger import MetadataStore

POLICIES_DB = b"broker"
_PREFIX = "namespace-policy:auto-topic-creation:"
NON_PARTITIONED = "non-partitioned"


class InvalidPolicyError(ValueError):
    """A policy body that is not what the path takes."""


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


class NamespacePolicies:
    """The namespaces' policies, durable in the metadata store."""

    def __init__(self, store: MetadataStore):
        self._store = store
        self._auto_topic_creation: dict[str, AutoTopicCreation] = {
            key[len(_PREFIX) :]: AutoTopicCreation(**json.loads(raw))
            for key, raw in store.scan_prefix(POLICIES_DB, _PREFIX)
        }

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation | None:
        """The namespace's policy; None: the broker's default applies."""
        return self._auto_topic_creation.get(namespace)

    async def set_auto_topic_creation(self, namespace: str, policy: AutoTopicCreation) -> None:
        document = {"allowed": policy.allowed, "topic_type": policy.topic_type}
        self._store.put(POLICIES_DB, _PREFIX + namespace, json.dumps(document).encode())
        await self._store.sync_async()
        self._auto_topic_creation[namespace] = policy

    async def remove_auto_topic_creation(self, namespace: str) -> bool:
        """Back to the broker's default; False when the namespace had no policy."""
        if namespace not in self._auto_topic_creation:
            return False
        self._store.delete(POLICIES_DB, _PREFIX + namespace)
        await self._store.sync_async()
        del self._auto_topic_creation[namespace]
        return True
