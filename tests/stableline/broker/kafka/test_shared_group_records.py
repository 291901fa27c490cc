"""Consumer groups' index and owner in the cluster's metadata store (SharedGroupRecords),
as two brokers' views see them: on a real etcd (two sessions) and on the embedded
store. What one coordinator wrote, the next reads; writes are idempotent and of two
at once both changes are kept, or exactly one claim wins."""

from __future__ import annotations

import asyncio
import json

import pytest

from managed_ledger import LocalStore
from stableline.broker.kafka.coordinator.group_records import LocalGroupRecords
from stableline.broker.kafka.coordinator.shared_group_records import SharedGroupRecords
from stableline.metadata.layout import kafka_group_owner_path, kafka_group_partitions_path
from tests.metadata.conftest import etcd, etcd_binary, open_store, root  # noqa: F401 - fixtures
from tests.stableline.broker.cluster.shared_metadata.conftest import eventually

# Any subscription name is a group id, and a Kafka topic name is a topic: both are
# encoded into one path segment each.
ODD_GROUP = "a group/../with%20odd@chars"


@pytest.fixture
async def two_views(open_store, root):  # noqa: F811 - the fixtures imported above
    """Two started SharedGroupRecords of one new cluster, as two brokers hold them."""
    first = await open_store()
    second = await open_store() if open_store.kind == "etcd" else first
    cluster = "c" + root.removeprefix("/test-")
    views = [SharedGroupRecords(first, cluster), SharedGroupRecords(second, cluster)]
    for view in views:
        await view.start()
    yield (*views, cluster)
    for view in views:
        await view.close()


async def test_an_index_written_through_one_view_is_read_through_the_other(two_views):
    mine, theirs, cluster = two_views
    await mine.note(ODD_GROUP, [("orders", 2), ("orders", 0), ("audit", 1)])
    expected = [("audit", 1), ("orders", 0), ("orders", 2)]
    assert mine.partitions(ODD_GROUP) == expected  # read your writes
    await eventually(lambda: theirs.partitions(ODD_GROUP) == expected, "the index")
    assert theirs.has_partitions(ODD_GROUP) and not theirs.has_partitions("other")
    assert theirs.groups() == [ODD_GROUP]
    # One key per topic, its partitions sorted.
    found = await mine._store.get(kafka_group_partitions_path(cluster, ODD_GROUP, "orders"))
    assert json.loads(found.value) == {"partitions": [0, 2]}


async def test_noting_what_is_noted_writes_nothing(two_views):
    mine, theirs, cluster = two_views
    await mine.note("g", [("orders", 0), ("orders", 1)])
    path = kafka_group_partitions_path(cluster, "g", "orders")
    before = (await mine._store.get(path)).stat
    await mine.note("g", [("orders", 1), ("orders", 0)])
    await eventually(lambda: theirs.partitions("g") == [("orders", 0), ("orders", 1)], "the index")
    await theirs.note("g", [("orders", 0)])
    assert (await mine._store.get(path)).stat == before


async def test_partitions_noted_through_two_views_at_once_are_all_kept(two_views):
    mine, theirs, _cluster = two_views
    await asyncio.gather(
        *(mine.note("g", [("orders", p)]) for p in range(0, 8, 2)),
        *(theirs.note("g", [("orders", p)]) for p in range(1, 8, 2)),
    )
    every = [("orders", p) for p in range(8)]
    for view in (mine, theirs):
        await eventually(lambda view=view: view.partitions("g") == every, "every partition")


async def test_a_forgotten_partition_leaves_the_index_and_the_last_one_the_store(two_views):
    mine, theirs, cluster = two_views
    await mine.note("g", [("orders", 0), ("orders", 1)])
    await eventually(lambda: theirs.has_partitions("g"), "the index")
    await theirs.forget("g", "orders", 0)
    assert theirs.partitions("g") == [("orders", 1)]
    await theirs.forget("g", "orders", 7)  # never noted: nothing to do
    await mine.forget("g", "orders", 1)
    assert not mine.has_partitions("g") and mine.groups() == []
    await eventually(lambda: theirs.groups() == [], "the group gone")
    assert await mine._store.get(kafka_group_partitions_path(cluster, "g", "orders")) is None


async def test_a_claim_is_read_by_the_other_view_and_a_stale_claim_loses(two_views):
    mine, theirs, cluster = two_views
    assert await mine.claim(ODD_GROUP, "alice", None) == "alice"
    assert mine.owner(ODD_GROUP) == "alice"
    await eventually(lambda: theirs.owner(ODD_GROUP) == "alice", "the owner")
    # bob read "nobody" before alice's claim reached him: his claim loses to hers.
    assert await theirs.claim(ODD_GROUP, "bob", None) == "alice"
    # Claimed again over the owner read (the group fell unused): the new owner.
    assert await theirs.claim(ODD_GROUP, "bob", "alice") == "bob"
    assert (await mine._store.get(kafka_group_owner_path(cluster, ODD_GROUP))).value == b"bob"
    await eventually(lambda: mine.owner(ODD_GROUP) == "bob", "the new owner")
    # An index and an owner of one group are apart.
    assert mine.partitions(ODD_GROUP) == [] and mine.groups() == []


async def test_of_two_roles_claiming_a_group_through_two_views_at_once_one_wins(two_views):
    mine, theirs, _cluster = two_views
    outcomes = await asyncio.gather(mine.claim("g", "alice", None), theirs.claim("g", "bob", None))
    assert outcomes[0] == outcomes[1] and outcomes[0] in ("alice", "bob"), outcomes
    for view in (mine, theirs):
        await eventually(lambda view=view: view.owner("g") == outcomes[0], "one owner")


async def test_the_broker_store_keeps_the_same_records(tmp_path):
    store = LocalStore(tmp_path / "store")
    try:
        records = LocalGroupRecords(store)
        await records.note("g", [("orders", 10), ("orders", 2), ("audit", 0)])
        await records.note("g", [("orders", 2)])
        assert records.partitions("g") == [("audit", 0), ("orders", 2), ("orders", 10)]
        await records.forget("g", "audit", 0)
        assert records.groups() == ["g"] and records.has_partitions("g")
        assert await records.claim("g", "alice", None) == "alice"
        assert await records.claim("g", "bob", None) == "alice"
        assert await records.claim("g", "bob", "alice") == "bob"
        assert LocalGroupRecords(store).owner("g") == "bob"
    finally:
        store.close()
