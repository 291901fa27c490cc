"""ApiVersions and Metadata: what this broker serves, and where each partition lives.

Metadata names every live broker of the cluster that has a Kafka port (api_base's
nodes: the same node ids on every broker) and, per topic, each partition with its
owner as leader: a partitioned topic's count as the metadata store has it now,
any other topic as partition 0. A partition whose owner is down (or has its Kafka
port off) is listed with LEADER_NOT_AVAILABLE and leader -1, which clients retry.

A topic asked for by name that does not exist is created, as Kafka does, when the
request allows it and the caller's first Produce would create it on the gRPC side
(the namespace's auto topic creation policy, produce permission with authorization
on): a plain topic, placed like any topic (on the least-loaded broker in a
cluster). A placement the cluster refuses (its metadata store away) answers
LEADER_NOT_AVAILABLE, retried; a full namespace or a name that may not be created
answers UNKNOWN_TOPIC_OR_PARTITION, with the reason in the broker's log.

A listing (no topics named) shows the topics the caller may look up (produce or
consume), a partitioned topic once, never its partitions on their own.
"""

from __future__ import annotations

import logging

from stableline.broker.cluster.ownership import TopicUnavailableError
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.kafka.server.api_base import KAFKA_TOPIC, KafkaApiBase
from stableline.broker.security.caller import may_create_on_first_use
from stableline.broker.security.permissions import Action
from stableline.broker.topics.partitioned import TopicConflictError
from stableline.broker.topics.persistence import NotEnoughBrokersError
from stableline.broker.topics.registry import TooManyTopicsError, TopicNotFoundError
from stableline.partitions import NOT_PARTITIONED, partition_topics, split_partition
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)


class MetadataApis(KafkaApiBase):
    HANDLES = {m.ApiKey.API_VERSIONS: "_api_versions", m.ApiKey.METADATA: "_metadata"}

    # ------------------------------------------------------------ ApiVersions

    async def _api_versions(self, reader: Reader, header: m.RequestHeader) -> bytes:
        m.read_api_versions(reader, header.api_version)
        return m.write_api_versions(header.api_version)

    # ------------------------------------------------------------ Metadata

    async def _metadata(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_metadata(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        topics: list[m.TopicMetadata] = []
        if request.topics is None:
            for short in self._kafka_topics():
                name = self._topic_name(short)
                if name is not None and self._refusal(Action.LOOKUP, name) is None:
                    # The counts as last seen: the listing came from the same copy.
                    topics.append(await self._topic_metadata(short, False, read=False))
        else:
            for short in dict.fromkeys(request.topics):  # a topic named twice, once
                topics.append(await self._topic_metadata(short, request.allow_auto_topic_creation))
        nodes = self._live_nodes()
        # Any broker creates and deletes topics; the lowest id is named so that every
        # broker names the same one.
        controller = min(node.node_id for node in nodes)
        return m.write_metadata(header.api_version, nodes, controller, topics)

    def _kafka_topics(self) -> list[str]:
        """Every topic of the Kafka namespace with a Kafka-legal name: in a cluster
        those placed on any broker, a partitioned topic once (not its partitions)."""
        namespace = self._settings.namespace
        prefix = f"persistent://{namespace}/"
        names = set(self._registry.names(namespace)) | self._registry.placement.placed_names(prefix)
        partitioned = set()
        if self._partitioned is not None:
            partitioned = set(self._partitioned.metadata.names(namespace))
        shown = set(partitioned)
        for full in names:
            split = split_partition(TopicName.parse(full))
            if split is not None and str(split[0]) in partitioned:
                continue  # a partition, listed as its topic
            shown.add(full)
        shorts = (full[len(prefix) :] for full in shown)
        return sorted(short for short in shorts if KAFKA_TOPIC.fullmatch(short))

    async def _topic_metadata(
        self, short: str, auto_create: bool, read: bool = True
    ) -> m.TopicMetadata:
        """`read`: the partition count as the metadata store has it now (a topic
        asked for by name), else as this broker last saw it."""
        name = self._topic_name(short)
        if name is None:
            return m.TopicMetadata(short, m.ErrorCode.INVALID_TOPIC_EXCEPTION, [])
        why = self._refusal(Action.LOOKUP, name)
        if why is not None:
            error = self._refused(m.ErrorCode.TOPIC_AUTHORIZATION_FAILED, why)
            return m.TopicMetadata(short, error, [])
        try:
            count = await self._partition_count(name, read=read)
            if count != NOT_PARTITIONED:
                if self._partitioned is not None and self._partitioned.metadata.deleting(name):
                    return m.TopicMetadata(short, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
                partitions = partition_topics(name, count)
            else:
                if not await self._registry.taken_in_cluster(name):
                    error = await self._create(name) if auto_create else None
                    if error is None and not auto_create:
                        error = m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if error is not None:
                        return m.TopicMetadata(short, error, [])
                partitions = [name]
            described = [
                await self._partition_metadata(index, partition)
                for index, partition in enumerate(partitions)
            ]
        except NotEnoughBrokersError as error:
            # Too few live brokers to place it by its policy: clients retry, as for a
            # topic Kafka is still creating.
            code = self._refused(m.ErrorCode.LEADER_NOT_AVAILABLE, f"metadata of {name}: {error}")
            return m.TopicMetadata(short, code, [])
        except TopicUnavailableError as error:
            # The cluster's metadata store cannot be read now: clients retry.
            code = self._refused(m.ErrorCode.LEADER_NOT_AVAILABLE, f"metadata of {name}: {error}")
            return m.TopicMetadata(short, code, [])
        return m.TopicMetadata(short, m.ErrorCode.NONE, described)

    async def _partition_metadata(self, index: int, partition: TopicName) -> m.PartitionMetadata:
        """The partition with its owner as leader (this broker, standalone)."""
        # Its files here and no record yet (made before this broker joined a
        # cluster, or standalone): this broker places it on itself when it is used.
        placement = await self._registry.placement.placement_of(
            partition, place=not self._registry.exists(partition)
        )
        if placement is None:
            return m.PartitionMetadata(index, self._settings.node_id)
        node = self._node_of(placement)
        if node is None:
            return m.PartitionMetadata(index, -1, m.ErrorCode.LEADER_NOT_AVAILABLE, placement.epoch)
        # The ensemble's members known as Kafka nodes (live, Kafka port on), the
        # leader first: a member that is down is not in sync, and its node is unknown.
        members = [self._node_of_broker(broker) for broker in placement.ensemble]
        replicas = tuple(member.node_id for member in members if member is not None)
        return m.PartitionMetadata(
            index, node.node_id, m.ErrorCode.NONE, placement.epoch, replicas, replicas
        )

    async def _create(self, name: TopicName) -> m.ErrorCode | None:
        """Create `name` on its first Metadata, as its first Produce would: None when
        created (or another made it meanwhile), else the error to answer."""
        caller = self._caller()
        policy = self._registry.namespace_policies.auto_topic_creation(name.namespace_path)
        if not may_create_on_first_use(
            caller, name, self._settings.allow_auto_topic_creation, policy
        ):
            # Kafka answers a topic it does not create this way; a consumer waits for it.
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            await self._registry.create(name)
        except (TooManyTopicsError, TopicNotFoundError) as error:
            log.warning("kafka: cannot create %s: %s", name, error)
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except TopicConflictError as error:
            # Made partitioned meanwhile: the client asks again and sees it so.
            log.info("kafka: %s", error)
            return m.ErrorCode.LEADER_NOT_AVAILABLE
        return None
