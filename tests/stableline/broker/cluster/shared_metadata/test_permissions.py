"""ClusterPermissionStore: a grant made through one broker's view is enforced by
another's, a revocation there re-checks the open streams here, and grants of two
roles on one namespace through two brokers at once are both kept."""

from __future__ import annotations

import asyncio

from stableline.broker.cluster.shared_metadata.permissions import ClusterPermissionStore
from stableline.broker.security.permissions import Action, Authorizer
from stableline.topic_name import TopicName

from .conftest import eventually


async def test_a_grant_through_one_view_is_enforced_by_the_other(two_views, tenant):
    mine, theirs = await two_views(ClusterPermissionStore)
    enforcing = Authorizer(theirs, superuser_roles=["admin"])
    topic = TopicName(tenant, "shop", "orders")
    assert not enforcing.allows("alice", Action.PRODUCE, topic)
    await mine.grant_namespace(f"{tenant}/shop", "alice", [Action.PRODUCE])
    assert mine.allows("alice", Action.PRODUCE, topic)  # read your writes
    await eventually(lambda: enforcing.allows("alice", Action.PRODUCE, topic), "the grant")
    assert not enforcing.allows("alice", Action.CONSUME, topic)
    await mine.grant_topic(topic, "bob", [Action.CONSUME])
    await eventually(lambda: enforcing.allows("bob", Action.CONSUME, topic), "the topic grant")
    assert theirs.effective_grants(topic) == {
        "alice": {Action.PRODUCE},
        "bob": {Action.CONSUME},
    }
    await mine.forget_topic(topic)
    await eventually(lambda: not enforcing.allows("bob", Action.CONSUME, topic), "forgotten")
    assert enforcing.allows("alice", Action.PRODUCE, topic)  # the namespace's grant stays


async def test_a_revocation_through_one_view_rechecks_the_others_open_streams(two_views, tenant):
    mine, theirs = await two_views(ClusterPermissionStore)
    await mine.grant_namespace(f"{tenant}/shop", "alice", [Action.CONSUME])
    topic = TopicName(tenant, "shop", "t")
    # The grant's own change reaches the other view first (else it would count as
    # the revocation's re-check below).
    await eventually(lambda: theirs.allows("alice", Action.CONSUME, topic), "the grant seen")
    rechecks: list[bool] = []
    theirs.change_listeners.append(lambda: rechecks.append(True))
    assert await mine.revoke_namespace(f"{tenant}/shop", "alice")
    await eventually(lambda: bool(rechecks), "the other view's streams re-checked")
    assert not theirs.allows("alice", Action.CONSUME, topic)
    assert not await theirs.revoke_namespace(f"{tenant}/shop", "alice")


async def test_roles_granted_on_one_namespace_through_two_views_at_once_are_all_kept(
    two_views, tenant
):
    mine, theirs = await two_views(ClusterPermissionStore)
    namespace = f"{tenant}/busy"
    await asyncio.gather(
        *(mine.grant_namespace(namespace, f"m{i}", [Action.PRODUCE]) for i in range(5)),
        *(theirs.grant_namespace(namespace, f"t{i}", [Action.CONSUME]) for i in range(5)),
    )
    expected = {f"m{i}" for i in range(5)} | {f"t{i}" for i in range(5)}
    for view in (mine, theirs):
        await eventually(
            lambda view=view: set(view.namespace_grants(namespace)) == expected,
            "all ten roles on both views",
        )
