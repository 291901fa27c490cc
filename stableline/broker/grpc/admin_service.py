"""The control plane over gRPC: the same documents the HTTP admin serves."""

from __future__ import annotations

import json

from stableline._proto import admin_pb2 as pb
from stableline._proto import admin_pb2_grpc
from stableline.broker.cluster.topic_moves import TopicMoves, move_topic
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import abort
from stableline.broker.topics import stats
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.topic_name import TopicName


class AdminService(admin_pb2_grpc.AdminServicer):
    def __init__(
        self,
        registry: TopicRegistry,
        coordinators: Coordinators,
        partitioned: PartitionedTopics,
        moves: TopicMoves | None = None,
    ):
        self.registry = registry
        self.coordinators = coordinators
        self.partitioned = partitioned
        self.moves = moves  # the cluster's; None standalone

    async def ListTopics(self, request, context) -> pb.ListTopicsResponse:
        return pb.ListTopicsResponse(topics=self.registry.cluster_names(request.namespace or None))

    async def CreateTopic(self, request, context) -> pb.CreateTopicResponse:
        try:
            name = TopicName.parse(request.topic)
            created = await self.registry.create(name)  # loaded on first use
        except Exception as error:
            await abort(context, error)
        return pb.CreateTopicResponse(topic=str(name), created=created)

    async def DeleteTopic(self, request, context) -> pb.DeleteTopicResponse:
        try:
            name = TopicName.parse(request.topic)
            await self.registry.delete(name)
        except Exception as error:
            await abort(context, error)
        return pb.DeleteTopicResponse(topic=str(name))

    async def GetStats(self, request, context) -> pb.StatsResponse:
        try:
            topic = await self.registry.get(TopicName.parse(request.topic), create=False)
        except Exception as error:
            await abort(context, error)
        return pb.StatsResponse(json=json.dumps(stats.topic_stats(topic)))

    async def GetInternalStats(self, request, context) -> pb.StatsResponse:
        try:
            topic = await self.registry.get(TopicName.parse(request.topic), create=False)
        except Exception as error:
            await abort(context, error)
        return pb.StatsResponse(json=json.dumps(stats.internal_stats(topic)))

    async def GetTransactionBufferStats(self, request, context) -> pb.StatsResponse:
        try:
            topic = await self.registry.get(TopicName.parse(request.topic), create=False)
        except Exception as error:
            await abort(context, error)
        return pb.StatsResponse(json=json.dumps(topic.buffer.stats()))

    async def GetTransactionMetadata(self, request, context) -> pb.StatsResponse:
        try:
            txn_id = convert.txn_id(request)
            meta = (await self.coordinators.leading(txn_id)).get(txn_id)
        except Exception as error:
            await abort(context, error)
        return pb.StatsResponse(json=json.dumps(meta.describe()))

    async def CreatePartitionedTopic(self, request, context) -> pb.PartitionedTopicMetadata:
        try:
            name = TopicName.parse(request.topic)
            await self.partitioned.create(name, request.partitions)
        except Exception as error:
            await abort(context, error)
        return pb.PartitionedTopicMetadata(topic=str(name), partitions=request.partitions)

    async def UpdatePartitionedTopic(self, request, context) -> pb.PartitionedTopicMetadata:
        try:
            name = TopicName.parse(request.topic)
            await self.partitioned.grow(name, request.partitions)
        except Exception as error:
            await abort(context, error)
        return pb.PartitionedTopicMetadata(topic=str(name), partitions=request.partitions)

    async def GetPartitionedTopicMetadata(self, request, context) -> pb.PartitionedTopicMetadata:
        try:
            name = TopicName.parse(request.topic)
        except Exception as error:
            await abort(context, error)
        return pb.PartitionedTopicMetadata(
            topic=str(name), partitions=await self.partitioned.read_partitions(name)
        )

    async def DeletePartitionedTopic(self, request, context) -> pb.DeleteTopicResponse:
        try:
            name = TopicName.parse(request.topic)
            await self.partitioned.delete(name, force=request.force)
        except Exception as error:
            await abort(context, error)
        return pb.DeleteTopicResponse(topic=str(name))

    async def GetPartitionedStats(self, request, context) -> pb.StatsResponse:
        try:
            document = await self.partitioned.stats(TopicName.parse(request.topic))
        except Exception as error:
            await abort(context, error)
        return pb.StatsResponse(json=json.dumps(document))

    async def TransferTopic(self, request, context) -> pb.TransferTopicResponse:
        try:
            name = TopicName.parse(request.topic)
            serving = await move_topic(self.registry, self.moves, name, request.broker or None)
        except Exception as error:
            await abort(context, error)
        return pb.TransferTopicResponse(broker=serving)
