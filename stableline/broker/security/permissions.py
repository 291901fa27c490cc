"""Who may do what: roles, actions, grants per namespace and per topic (Pulsar's model).

Grants are `role -> {produce, consume}` on a namespace (every topic in it) or on
one topic; a role may act on a topic when either level grants the action.
`admin` (topics, stats, permissions themselves) is never granted: it belongs to
the superuser roles of the config. `PermissionStore` is the one interface: checks
answer from an in-memory copy, and a grant or revocation is durable (written
through and fsynced) before it is acknowledged, so it survives a restart or a
crash. Two implementations: `EmbeddedPermissionStore` here (one broker: its data
dir) and the cluster's (stableline.broker.cluster.shared_metadata.permissions: the
metadata store shared by the brokers, so a grant made through one is enforced by
all).
"""

from __future__ import annotations

import abc
import enum
import json
from collections.abc import Callable, Iterable

from managed_ledger import LocalStore
from stableline.broker.errors import BrokerError
from stableline.broker.topics.database import BROKER_DB
from stableline.partitions import split_partition
from stableline.topic_name import InvalidTopicNameError, TopicName

_PREFIX = "permission:"
_NAMESPACE_PREFIX = _PREFIX + "namespace:"
_TOPIC_PREFIX = _PREFIX + "topic:"
# Roles granted on one namespace or one topic; a bound on what a grant can grow to.
MAX_ROLES_PER_RESOURCE = 10_000
MAX_ROLE_LENGTH = 256


class Action(enum.Enum):
    PRODUCE = "produce"
    """Publish to the topic (and create it by doing so)."""
    CONSUME = "consume"
    """Subscribe to, read and acknowledge on the topic."""
    LOOKUP = "lookup"
    """Ask which broker serves the topic: never granted, implied by produce or consume
    (Pulsar's canLookup)."""
    ADMIN = "admin"
    """Everything else (topics, stats, permissions): never granted, superusers only."""


GRANTABLE = (Action.PRODUCE, Action.CONSUME)


class InvalidPermissionError(BrokerError, ValueError):
    """A grant names an unknown action, an empty role, or a bad namespace."""

    code = "InvalidArgument"


def parse_actions(values: object) -> frozenset[Action]:
    """A JSON list such as ["produce", "consume"] -> actions; anything else is refused."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InvalidPermissionError(
            'the body must be a JSON list of actions, e.g. ["produce", "consume"]'
        )
    actions = set()
    grantable = {a.value: a for a in GRANTABLE}
    for value in values:
        action = grantable.get(value.lower())
        if action is None:
            raise InvalidPermissionError(
                f"unknown action {value!r}: grantable actions are "
                f"{', '.join(sorted(grantable))} (admin belongs to superuser roles)"
            )
        actions.add(action)
    return frozenset(actions)


def check_role(role: str) -> str:
    if not role or len(role) > MAX_ROLE_LENGTH or any(c.isspace() for c in role):
        raise InvalidPermissionError(
            f"role {role[:40]!r} must be 1..{MAX_ROLE_LENGTH} characters without spaces"
        )
    return role


def namespace_path(tenant: str, namespace: str) -> str:
    """'tenant/namespace', checked with the same rules as topic names."""
    try:
        return TopicName.parse(f"persistent://{tenant}/{namespace}/_").namespace_path
    except InvalidTopicNameError:
        raise InvalidPermissionError(
            f"invalid namespace {tenant}/{namespace}: parts may only contain letters, "
            "digits and _ . = : -"
        ) from None


class Scope(enum.Enum):
    NAMESPACE = "namespace"
    """Every topic of one namespace ("tenant/namespace")."""
    TOPIC = "topic"
    """One topic ("persistent://tenant/namespace/topic")."""


def encode_grants(grants: dict[str, frozenset[Action]]) -> bytes:
    document = {role: sorted(a.value for a in actions) for role, actions in grants.items()}
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def decode_grants(raw: bytes) -> dict[str, frozenset[Action]]:
    return {
        role: frozenset(Action(a) for a in actions) for role, actions in json.loads(raw).items()
    }


def with_role(
    grants: dict[str, frozenset[Action]],
    resource: str,
    role: str,
    actions: frozenset[Action] | None,
) -> dict[str, frozenset[Action]] | None:
    """`grants` with `role` given `actions` (None: removed); None when nothing changes.
    InvalidPermissionError when the resource has MAX_ROLES_PER_RESOURCE roles already."""
    if actions is None:
        if role not in grants:
            return None
        return {r: a for r, a in grants.items() if r != role}
    assert Action.ADMIN not in actions, "admin is never granted"
    if role not in grants and len(grants) >= MAX_ROLES_PER_RESOURCE:
        raise InvalidPermissionError(
            f"{resource} already has {MAX_ROLES_PER_RESOURCE} roles granted"
        )
    return {**grants, role: actions}


class PermissionStore(abc.ABC):
    """Namespace and topic grants: checks answer from memory; a change is durable
    before its call returns, and then `change_listeners` are called."""

    def __init__(self) -> None:
        # Called after every durable change of grants (open streams are re-checked).
        self.change_listeners: list[Callable[[], None]] = []
        self._namespaces: dict[str, dict[str, frozenset[Action]]] = {}
        self._topics: dict[str, dict[str, frozenset[Action]]] = {}

    # -------------------------------------------------------------- reading

    def namespace_grants(self, namespace: str) -> dict[str, frozenset[Action]]:
        return dict(self._namespaces.get(namespace, {}))

    def effective_grants(self, topic: TopicName) -> dict[str, frozenset[Action]]:
        """What each role may do on the topic: its namespace's grants joined with its own."""
        merged = self.namespace_grants(topic.namespace_path)
        for role, actions in self._topics.get(str(topic), {}).items():
            merged[role] = merged.get(role, frozenset()) | actions
        return merged

    def allows(self, role: str, action: Action, topic: TopicName) -> bool:
        if action is Action.ADMIN:
            return False
        if action in self._namespaces.get(topic.namespace_path, {}).get(role, ()):
            return True
        return action in self._topics.get(str(topic), {}).get(role, ())

    def granted_resources(self) -> int:
        """How many namespaces and topics have grants."""
        return len(self._namespaces) + len(self._topics)

    # -------------------------------------------------------------- changing

    async def grant_namespace(self, namespace: str, role: str, actions: Iterable[Action]) -> None:
        await self._set(Scope.NAMESPACE, namespace, check_role(role), frozenset(actions))

    async def revoke_namespace(self, namespace: str, role: str) -> bool:
        return await self._set(Scope.NAMESPACE, namespace, check_role(role), None)

    async def grant_topic(self, topic: TopicName, role: str, actions: Iterable[Action]) -> None:
        await self._set(Scope.TOPIC, str(topic), check_role(role), frozenset(actions))

    async def revoke_topic(self, topic: TopicName, role: str) -> bool:
        return await self._set(Scope.TOPIC, str(topic), check_role(role), None)

    @abc.abstractmethod
    async def forget_topic(self, topic: TopicName) -> None:
        """Drop every grant on a deleted topic (its namespace's grants stay), so a
        topic created later under the same name starts with none."""

    @abc.abstractmethod
    async def _set(
        self, scope: Scope, resource: str, role: str, actions: frozenset[Action] | None
    ) -> bool:
        """Replace (or with None remove) one role's grant; True if something changed."""

    def _table(self, scope: Scope) -> dict[str, dict[str, frozenset[Action]]]:
        return self._namespaces if scope is Scope.NAMESPACE else self._topics

    def _changed(self) -> None:
        for listener in self.change_listeners:
            listener()


class EmbeddedPermissionStore(PermissionStore):
    """Grants in the broker's own metadata store (LMDB in its data dir)."""

    def __init__(self, store: LocalStore):
        super().__init__()
        self._store = store
        for key, raw in store.scan_prefix(BROKER_DB, _PREFIX):
            if key.startswith(_NAMESPACE_PREFIX):
                self._namespaces[key[len(_NAMESPACE_PREFIX) :]] = decode_grants(raw)
            elif key.startswith(_TOPIC_PREFIX):
                self._topics[key[len(_TOPIC_PREFIX) :]] = decode_grants(raw)

    async def forget_topic(self, topic: TopicName) -> None:
        if self._topics.pop(str(topic), None) is None:
            return
        self._store.delete(BROKER_DB, _TOPIC_PREFIX + str(topic))
        await self._store.sync_async()
        self._changed()

    async def _set(
        self, scope: Scope, resource: str, role: str, actions: frozenset[Action] | None
    ) -> bool:
        table = self._table(scope)
        grants = with_role(table.get(resource, {}), resource, role, actions)
        if grants is None:
            return False
        prefix = _NAMESPACE_PREFIX if scope is Scope.NAMESPACE else _TOPIC_PREFIX
        if grants:
            self._store.put(BROKER_DB, prefix + resource, encode_grants(grants))
            table[resource] = grants
        else:
            self._store.delete(BROKER_DB, prefix + resource)
            table.pop(resource, None)
        # A grant or revocation is acknowledged only once it would survive a crash.
        await self._store.sync_async()
        self._changed()
        return True


class Authorizer:
    """The one place that decides: superusers may do anything, others what is granted.

    A grant on a partitioned topic `T` applies to its partitions `T-partition-i`, as
    Pulsar's does: a partition is checked against its own grants, then (when
    `partition_counts` says T is partitioned) against T's. A topic merely named like
    a partition, whose base is not a partitioned topic, gets nothing from the base."""

    def __init__(
        self,
        permissions: PermissionStore,
        superuser_roles: Iterable[str],
        partition_counts: Callable[[TopicName], int] | None = None,
    ):
        self.permissions = permissions
        self.superuser_roles = frozenset(superuser_roles)
        # A partitioned topic's count (0: not partitioned), from the broker's
        # partitioned metadata; set once that is open (None: no topic is partitioned).
        self.partition_counts = partition_counts

    def allows(self, role: str, action: Action, topic: TopicName | None = None) -> bool:
        if role in self.superuser_roles:
            return True
        if action is Action.ADMIN or topic is None:
            return False
        if action is Action.LOOKUP:  # either grantable right implies it
            return any(self._granted(role, right, topic) for right in GRANTABLE)
        return self._granted(role, action, topic)

    def _granted(self, role: str, action: Action, topic: TopicName) -> bool:
        if self.permissions.allows(role, action, topic):
            return True
        base = self._partitioned_base(topic)
        return base is not None and self.permissions.allows(role, action, base)

    def _partitioned_base(self, topic: TopicName) -> TopicName | None:
        """The partitioned topic `topic` is a partition of, None if it is none."""
        if self.partition_counts is None:
            return None
        split = split_partition(topic)
        if split is None:
            return None
        base, _index = split
        return base if self.partition_counts(base) > 0 else None
