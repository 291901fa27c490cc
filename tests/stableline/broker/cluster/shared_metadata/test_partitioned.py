"""ClusterPartitionedMetadata: two brokers' views of partitioned topics' counts agree,
and of two changes made at once through both exactly one wins."""

from __future__ import annotations

import asyncio

import pytest

from stableline.broker.cluster.shared_metadata.partitioned import ClusterPartitionedMetadata
from stableline.broker.topics.partition_counts import CountChanged
from stableline.topic_name import TopicName

from .conftest import eventually


async def test_a_count_created_through_one_view_is_read_through_the_other(two_views, tenant):
    mine, theirs = await two_views(ClusterPartitionedMetadata)
    name = TopicName(tenant, "ns", "orders")
    await mine.create(name, 6)
    assert mine.partitions(name) == 6  # read your writes
    # Answers to clients read a name not known as partitioned through: no watch delay.
    assert await theirs.read_partitions(name) == 6
    await eventually(lambda: theirs.names(f"{tenant}/ns") == [str(name)], "the name listed")
    assert theirs.partitions(TopicName(tenant, "ns", "plain")) == 0
    assert await theirs.read_partitions(TopicName(tenant, "ns", "plain")) == 0


async def test_of_two_views_creating_one_name_at_once_exactly_one_wins(two_views, tenant):
    mine, theirs = await two_views(ClusterPartitionedMetadata)
    name = TopicName(tenant, "ns", "race")
    outcomes = await asyncio.gather(
        mine.create(name, 3), theirs.create(name, 5), return_exceptions=True
    )
    lost = [o for o in outcomes if isinstance(o, CountChanged)]
    assert len(lost) == 1 and outcomes.count(None) == 1, outcomes
    winner = 3 if outcomes[0] is None else 5
    assert f"has {winner} partitions now" in str(lost[0])
    await eventually(
        lambda: mine.partitions(name) == theirs.partitions(name) == winner, "one count everywhere"
    )


async def test_growth_applies_only_over_the_count_read(two_views, tenant):
    mine, theirs = await two_views(ClusterPartitionedMetadata)
    name = TopicName(tenant, "ns", "grown")
    await mine.create(name, 2)
    await theirs.grow(name, 2, 4)
    with pytest.raises(CountChanged, match="has 4 partitions now"):
        await mine.grow(name, 2, 3)  # it saw 2; another broker made it 4
    await eventually(lambda: mine.partitions(name) == 4, "the growth seen")
    await mine.grow(name, 4, 8)
    assert mine.partitions(name) == 8


async def test_a_deletion_mark_is_seen_by_every_view_and_stops_growth(two_views, tenant):
    mine, theirs = await two_views(ClusterPartitionedMetadata)
    name = TopicName(tenant, "ns", "doomed")
    await mine.create(name, 3)
    await mine.mark_deleting(name)
    assert mine.deleting(name) and mine.partitions(name) == 3
    await eventually(lambda: theirs.deleting(name), "the mark seen by the other view")
    with pytest.raises(CountChanged, match="being deleted"):
        await theirs.grow(name, 3, 4)
    await mine.delete(name)
    assert mine.partitions(name) == 0 and not mine.deleting(name)
    await eventually(lambda: theirs.partitions(name) == 0, "the deletion seen")
    await mine.delete(name)  # deleting again is a no-op
    await mine.create(name, 1)  # the name is free again
