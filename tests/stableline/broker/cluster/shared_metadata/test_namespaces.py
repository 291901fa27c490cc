"""ClusterNamespacePolicies: a namespace made and a policy set through one broker's
view hold on another's, and changes made at once through both are all kept."""

from __future__ import annotations

import asyncio
import json

from stableline.broker.cluster.shared_metadata.namespaces import ClusterNamespacePolicies
from stableline.broker.topics.namespace_policies import AutoTopicCreation
from stableline.broker.topics.persistence import PersistencePolicy
from stableline.metadata.layout import namespace_path

from .conftest import eventually

DISABLED = AutoTopicCreation(False)


async def test_a_policy_set_through_one_view_applies_on_the_other(two_views, tenant):
    mine, theirs = await two_views(ClusterNamespacePolicies)
    namespace = f"{tenant}/ns"
    await mine.set_auto_topic_creation(namespace, DISABLED)
    assert mine.auto_topic_creation(namespace) == DISABLED  # read your writes
    await eventually(lambda: theirs.auto_topic_creation(namespace) == DISABLED, "the policy")
    # A policy does not make the namespace exist; its first topic does.
    assert not theirs.exists(namespace)
    await theirs.add(namespace)
    await eventually(lambda: mine.exists(namespace), "the namespace")
    assert await theirs.remove_auto_topic_creation(namespace)
    assert not await theirs.remove_auto_topic_creation(namespace)
    await eventually(lambda: mine.auto_topic_creation(namespace) is None, "the removal")
    assert mine.exists(namespace)  # a namespace stays


async def test_a_first_topic_and_a_policy_through_two_views_at_once_are_both_kept(
    two_views, tenant
):
    mine, theirs = await two_views(ClusterNamespacePolicies)
    namespaces = [f"{tenant}/ns{i}" for i in range(5)]
    await asyncio.gather(
        *(mine.add(namespace) for namespace in namespaces),
        *(theirs.set_auto_topic_creation(namespace, DISABLED) for namespace in namespaces),
    )
    for view in (mine, theirs):
        await eventually(
            lambda view=view: all(
                view.exists(n) and view.auto_topic_creation(n) == DISABLED for n in namespaces
            ),
            "both changes on every namespace",
        )
    document = json.loads((await mine.store.get(namespace_path(namespaces[0]))).value)
    assert document == {
        "created": True,
        "autoTopicCreationOverride": {
            "allowAutoTopicCreation": False,
            "topicType": "non-partitioned",
        },
    }


async def test_public_default_exists_from_the_start_and_a_key_left_empty_is_deleted(
    two_views, tenant
):
    mine, _ = await two_views(ClusterNamespacePolicies)
    assert mine.exists("public/default")
    namespace = f"{tenant}/empty"
    await mine.set_auto_topic_creation(namespace, DISABLED)
    await mine.remove_auto_topic_creation(namespace)
    assert await mine.store.get(namespace_path(namespace)) is None


async def test_a_persistence_policy_is_shared_kept_beside_the_other_and_removed(two_views, tenant):
    mine, theirs = await two_views(ClusterNamespacePolicies)
    namespace = f"{tenant}/replicated"
    policy = PersistencePolicy(3, 3, 2)
    assert mine.persistence(namespace) is None
    await mine.set_auto_topic_creation(namespace, DISABLED)
    await mine.set_persistence(namespace, policy)
    assert mine.persistence(namespace) == policy  # read your writes
    await eventually(lambda: theirs.persistence(namespace) == policy, "the policy")
    document = json.loads((await mine.store.get(namespace_path(namespace))).value)
    assert document["persistence"] == {
        "bookkeeperEnsemble": 3,
        "bookkeeperWriteQuorum": 3,
        "bookkeeperAckQuorum": 2,
    }
    assert theirs.auto_topic_creation(namespace) == DISABLED  # the other policy stays
    assert await theirs.remove_persistence(namespace)
    assert not await theirs.remove_persistence(namespace)
    await eventually(lambda: mine.persistence(namespace) is None, "the removal")
    assert mine.auto_topic_creation(namespace) == DISABLED
