"""Permission logic: grants per namespace and topic, superusers, persistence in LMDB."""

from __future__ import annotations

import pytest

from managed_ledger import LocalStore
from stableline.broker.security.guard import Guard, NotPermitted
from stableline.broker.security.permissions import (
    Action,
    Authorizer,
    EmbeddedPermissionStore,
    InvalidPermissionError,
    namespace_path,
    parse_actions,
)
from stableline.broker.security.tokens import TokenVerifier, create_secret_key
from stableline.topic_name import TopicName

ORDERS = TopicName.parse("persistent://acme/shop/orders")
OTHER_NS = TopicName.parse("persistent://acme/billing/orders")


async def test_namespace_grant_covers_every_topic_of_that_namespace_only(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_namespace("acme/shop", "alice", [Action.PRODUCE])
    assert permissions.allows("alice", Action.PRODUCE, ORDERS)
    assert permissions.allows("alice", Action.PRODUCE, TopicName.parse("acme/shop/returns"))
    assert not permissions.allows("alice", Action.CONSUME, ORDERS)
    assert not permissions.allows("alice", Action.PRODUCE, OTHER_NS)
    assert not permissions.allows("bob", Action.PRODUCE, ORDERS)


async def test_topic_grant_covers_that_topic_only(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_topic(ORDERS, "bob", [Action.CONSUME])
    assert permissions.allows("bob", Action.CONSUME, ORDERS)
    assert not permissions.allows("bob", Action.CONSUME, TopicName.parse("acme/shop/returns"))
    assert not permissions.allows("bob", Action.PRODUCE, ORDERS)


async def test_effective_grants_join_namespace_and_topic_levels(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_namespace("acme/shop", "alice", [Action.PRODUCE])
    await permissions.grant_topic(ORDERS, "alice", [Action.CONSUME])
    await permissions.grant_topic(ORDERS, "bob", [Action.CONSUME])
    assert permissions.effective_grants(ORDERS) == {
        "alice": {Action.PRODUCE, Action.CONSUME},
        "bob": {Action.CONSUME},
    }


async def test_a_grant_replaces_the_roles_actions_and_revoke_removes_them(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_namespace("acme/shop", "alice", [Action.PRODUCE, Action.CONSUME])
    await permissions.grant_namespace("acme/shop", "alice", [Action.CONSUME])
    assert not permissions.allows("alice", Action.PRODUCE, ORDERS)
    assert await permissions.revoke_namespace("acme/shop", "alice")
    assert not permissions.allows("alice", Action.CONSUME, ORDERS)
    assert not await permissions.revoke_namespace("acme/shop", "alice")
    assert permissions.namespace_grants("acme/shop") == {}


async def test_grants_survive_reopening_the_store(tmp_path):
    store = LocalStore(tmp_path / "metadata")
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_namespace("acme/shop", "alice", [Action.PRODUCE])
    await permissions.grant_topic(ORDERS, "bob", [Action.CONSUME])
    await permissions.grant_topic(OTHER_NS, "carol", [Action.CONSUME])
    await permissions.revoke_topic(OTHER_NS, "carol")
    store.close()
    reopened = EmbeddedPermissionStore(LocalStore(tmp_path / "metadata"))
    assert reopened.allows("alice", Action.PRODUCE, ORDERS)
    assert reopened.allows("bob", Action.CONSUME, ORDERS)
    assert not reopened.allows("carol", Action.CONSUME, OTHER_NS)


async def test_admin_is_never_granted_and_belongs_to_superusers(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_namespace("acme/shop", "alice", [Action.PRODUCE, Action.CONSUME])
    authorizer = Authorizer(permissions, ["root"])
    assert not authorizer.allows("alice", Action.ADMIN)
    assert not authorizer.allows("alice", Action.ADMIN, ORDERS)
    assert authorizer.allows("root", Action.ADMIN)
    assert authorizer.allows("root", Action.PRODUCE, OTHER_NS)
    assert authorizer.allows("alice", Action.PRODUCE, ORDERS)
    with pytest.raises(InvalidPermissionError, match="superuser"):
        parse_actions(["admin"])


def test_actions_must_be_a_json_list_of_known_names():
    assert parse_actions(["produce", "CONSUME"]) == {Action.PRODUCE, Action.CONSUME}
    assert parse_actions([]) == frozenset()
    for bad in ("produce", None, {"produce": True}, [1], ["functions"]):
        with pytest.raises(InvalidPermissionError):
            parse_actions(bad)


async def test_bad_roles_and_namespaces_are_refused(store):
    permissions = EmbeddedPermissionStore(store)
    for role in ("", "a b", "x" * 300):
        with pytest.raises(InvalidPermissionError):
            await permissions.grant_namespace("acme/shop", role, [Action.PRODUCE])
    with pytest.raises(InvalidPermissionError):
        namespace_path("acme", "sh/op")


async def test_guard_names_the_grant_that_would_allow_a_refused_action(store):
    permissions = EmbeddedPermissionStore(store)
    guard = Guard(TokenVerifier(secret_key=create_secret_key()), Authorizer(permissions, ["root"]))
    with pytest.raises(NotPermitted, match=r"POST /admin/v2/namespaces/acme/shop/permissions/eve"):
        guard.authorize("eve", Action.CONSUME, ORDERS)
    with pytest.raises(NotPermitted, match="superuser"):
        guard.authorize("eve", Action.ADMIN)
    guard.authorize("root", Action.ADMIN)


def test_guard_without_authorization_lets_every_authenticated_role_act():
    guard = Guard(TokenVerifier(secret_key=create_secret_key()), None)
    guard.authorize("anyone", Action.ADMIN)
    guard.authorize("anyone", Action.PRODUCE, ORDERS)
