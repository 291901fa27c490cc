"""Partitioned topics for the Spark source and sink, resolved on the driver.

A read of a partitioned topic `T` reads its partitions `T-partition-i` as topics of
their own: each is planned (its stable position pinned) and split like any topic, so
its partitions are read in parallel, one input partition per topic partition at
least (a partition holding nothing makes none). A start or end of `earliest` or
`latest` given for `T` holds for each partition; a position names one partition
("ledger:entry" means nothing across partitions), so it is given per partition.
A write to `T` learns the count once, at planning; each row goes where a producer
would send it (stableline._routing): by its key's hash, else whole batches in turn.
"""

from __future__ import annotations

import dataclasses

from stableline._proto import admin_pb2 as admin_pb
from stableline._proto import admin_pb2_grpc
from stableline.partitions import partition_topics
from stableline.spark._connection import Connection
from stableline.spark._options import EARLIEST, LATEST, OptionError, SourceOptions
from stableline.spark._write import WriteOptions
from stableline.topic_name import TopicName


def partition_count(connection: Connection, topic: str) -> int:
    """How many partitions `topic` has (0: it is not partitioned), asked of the first
    named broker that answers."""

    def ask(broker: Connection) -> int:
        with broker.channel() as channel:
            stub = admin_pb2_grpc.AdminStub(channel)
            response = broker.call(
                stub.GetPartitionedTopicMetadata, admin_pb.TopicRequest(topic=topic)
            )
        return response.partitions

    return connection.any_broker(ask)


def expand_read(options: SourceOptions) -> SourceOptions:
    """`options` with every partitioned topic replaced by its partitions."""
    topics: list[str] = []
    starting: dict[str, str] = {}
    ending: dict[str, str] = {}
    for topic in options.topics:
        count = partition_count(options.connection, topic)
        if not count:
            topics.append(topic)
            starting[topic], ending[topic] = options.starting[topic], options.ending[topic]
            continue
        for option, positions in (
            ("startingPositions", options.starting),
            ("endingPositions", options.ending),
        ):
            if positions[topic] not in (EARLIEST, LATEST):
                raise OptionError(
                    f"option '{option}': {topic} is a partitioned topic ({count} "
                    f"partitions) and a position names one partition: read the "
                    f"partitions by name (option 'topics': {topic}-partition-0,...) to "
                    f"give each its own, or give earliest or latest for all"
                )
        for partition in partition_topics(TopicName.parse(topic), count):
            name = str(partition)
            topics.append(name)
            starting[name], ending[name] = options.starting[topic], options.ending[topic]
    return dataclasses.replace(options, topics=tuple(topics), starting=starting, ending=ending)


def resolve_write(options: WriteOptions) -> WriteOptions:
    """`options` with the partition count of the topic written (0: not partitioned)."""
    return dataclasses.replace(
        options, partitions=partition_count(options.connection, options.topic)
    )
