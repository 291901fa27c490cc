"""The Authorizer's rule for partitions: a grant on a partitioned topic covers its
partitions; the base's grants count only while the partitioned metadata says the
base is partitioned."""

from __future__ import annotations

from stableline.broker.security.permissions import Action, Authorizer, EmbeddedPermissionStore
from stableline.topic_name import TopicName

BASE = TopicName.parse("persistent://t/n/orders")
PARTITION = TopicName.parse("persistent://t/n/orders-partition-3")


async def test_a_base_grant_covers_partitions_only_while_the_base_is_partitioned(store):
    permissions = EmbeddedPermissionStore(store)
    await permissions.grant_topic(BASE, "reader", [Action.CONSUME])
    counts = {BASE: 4}
    authorizer = Authorizer(permissions, (), lambda name: counts.get(name, 0))
    assert authorizer.allows("reader", Action.CONSUME, PARTITION)
    assert authorizer.allows("reader", Action.LOOKUP, PARTITION)
    assert not authorizer.allows("reader", Action.PRODUCE, PARTITION)
    assert not authorizer.allows("other", Action.CONSUME, PARTITION)
    counts.clear()  # deleted: its former partitions get nothing from the base
    assert not authorizer.allows("reader", Action.CONSUME, PARTITION)
    assert not Authorizer(permissions, ()).allows("reader", Action.CONSUME, PARTITION)
