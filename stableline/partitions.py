"""Partitioned-topic names, shared by the broker and the client.

A partitioned topic `T` with N partitions is the N ordinary topics `T-partition-0`
.. `T-partition-{N-1}` plus its count, kept by the broker's partitioned metadata.
Each partition is a topic like any other (its own log, buffer, subscriptions), so
any broker may own any partition. A name that ends in `-partition-<digits>` names a
partition and may not be the base name of a partitioned topic.
"""

from __future__ import annotations

import re

from stableline.topic_name import TopicName

PARTITION_SUFFIX = "-partition-"
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]*)$")
# The count when a topic is not partitioned, as Pulsar's PartitionedTopicMetadata says.
NOT_PARTITIONED = 0


def partition_topic(base: TopicName, index: int) -> TopicName:
    """The topic holding partition `index` of the partitioned topic `base`."""
    assert index >= 0, index
    return TopicName(base.tenant, base.namespace, f"{base.local_name}{PARTITION_SUFFIX}{index}")


def partition_topics(base: TopicName, count: int) -> list[TopicName]:
    """Every partition of `base` with `count` partitions, in index order."""
    return [partition_topic(base, index) for index in range(count)]


def split_partition(name: TopicName) -> tuple[TopicName, int] | None:
    """(base topic, index) when `name` names a partition; None otherwise."""
    match = _PARTITION.match(name.local_name)
    if match is None:
        return None
    return TopicName(name.tenant, name.namespace, match["base"]), int(match["index"])
