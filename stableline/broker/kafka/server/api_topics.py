"""CreateTopics and DeleteTopics: Kafka's admin clients making and removing topics.

CreateTopics makes, per topic: with one partition a plain topic, with more a
partitioned topic of that many (`T-partition-0..N-1`), both placed over the
cluster's brokers as an admin's creation would be. num_partitions -1 means one,
Kafka's num.partitions default. The replication factor is the topic's persistence
policy (topics/persistence.py): -1 takes its namespace's (else the broker's
default); n places each partition on an ensemble of n brokers, each entry written to
all n (E = Qw = n) and acknowledged at Qa = min(n, the namespace's ack quorum). Why
that Qa: the ack quorum plays Kafka's min.insync.replicas, a broker-wide setting a
topic inherits unless it overrides it (topic configs are not taken here), so the
namespace's (3/3/2 gives 2, as Kafka clusters of factor 3 usually set it); capped at
n, since a topic of factor 1 under min.insync.replicas 2 could take no acks=all
write at all in Kafka, which no one asks for on purpose. A factor below 1 (other
than -1), or larger than the live brokers, is INVALID_REPLICATION_FACTOR, saying
how many are live; manual replica assignments are refused (INVALID_REPLICA_ASSIGNMENT) and so are
topic configs (INVALID_CONFIG: retention here is the broker's, retention_time_s).
A name taken by any topic, plain or partitioned, is TOPIC_ALREADY_EXISTS; a count
outside 1..max_num_partitions_per_partitioned_topic is INVALID_PARTITIONS; a
namespace without room is POLICY_VIOLATION. validate_only checks all of it and
makes nothing. A name asked twice in one request is INVALID_REQUEST for both.

DeleteTopics deletes a plain topic at its owner, or every partition of a
partitioned topic then its count, whoever is connected to it (Kafka deletes
regardless; SDK producers and consumers of it are ended). An unknown topic is
UNKNOWN_TOPIC_OR_PARTITION.

Both are an admin's act: with authorization on, only superuser roles may (the
gRPC Admin CreateTopic and DeleteTopic need the same); others get
TOPIC_AUTHORIZATION_FAILED and nothing changes. When the cluster cannot place or
reach a topic now (its metadata store or the owner away) the answer is
LEADER_NOT_AVAILABLE, which admin clients may retry.
"""

from __future__ import annotations

from collections import Counter

from stableline.broker.cluster.ownership import TopicUnavailableError
from stableline.broker.cluster.peer_admin import PeerCallError
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_topics as mt
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.kafka.server.api_base import KafkaApiBase
from stableline.broker.kafka.server.errors import kafka_error
from stableline.broker.security.permissions import Action
from stableline.broker.topics.partitioned import (
    InvalidPartitionCountError,
    TopicConflictError,
)
from stableline.broker.topics.persistence import NotEnoughBrokersError, PersistencePolicy
from stableline.broker.topics.registry import TooManyTopicsError, TopicNotFoundError
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.partitions import NOT_PARTITIONED, split_partition
from stableline.topic_name import TopicName

# Kafka's "the broker's default" replication factor.
DEFAULT_REPLICATION_FACTOR = -1


class TopicsApis(KafkaApiBase):
    HANDLES = {m.ApiKey.CREATE_TOPICS: "_create_topics", m.ApiKey.DELETE_TOPICS: "_delete_topics"}

    # ------------------------------------------------------------ CreateTopics

    async def _create_topics(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = mt.read_create_topics(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        asked = Counter(topic.name for topic in request.topics)
        results = []
        for topic in request.topics:
            if asked[topic.name] > 1:
                result = mt.TopicResult(
                    topic.name,
                    m.ErrorCode.INVALID_REQUEST,
                    f"topic {topic.name} is asked for {asked[topic.name]} times",
                )
            else:
                result = await self._create_topic(topic, request.validate_only)
            if result.error != m.ErrorCode.NONE:
                self._refused(result.error, f"{topic.name}: {result.error_message}")
            results.append(result)
        return mt.write_create_topics(header.api_version, results)

    async def _create_topic(self, topic: mt.CreatableTopic, validate_only: bool) -> mt.TopicResult:
        def refused(error: m.ErrorCode, why: str) -> mt.TopicResult:
            return mt.TopicResult(topic.name, error, why)

        name = self._topic_name(topic.name)
        if name is None or split_partition(name) is not None:
            return refused(
                m.ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"{topic.name!r} is not a topic name that can be made here: use 1-249 of "
                "letters, digits, '.', '_' and '-', not ending in -partition-<n> (the name "
                "of a partitioned topic's partition)",
            )
        why = self._refusal(Action.ADMIN, name)
        if why is not None:
            return refused(m.ErrorCode.TOPIC_AUTHORIZATION_FAILED, why)
        count = 1 if topic.num_partitions == -1 else topic.num_partitions
        if count < 1:
            return refused(
                m.ErrorCode.INVALID_PARTITIONS,
                f"{topic.num_partitions} partitions: ask for 1 or more (or -1 for one)",
            )
        factor = topic.replication_factor
        if factor < 1 and factor != DEFAULT_REPLICATION_FACTOR:
            return refused(
                m.ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {factor}: ask for 1 or more copies, or -1 for the "
                f"namespace's persistence policy",
            )
        persistence = self._persistence(name, factor)
        live = len(self._registry.placement.live_brokers()) or 1  # standalone: this one
        if persistence.ensemble_size > live:
            return refused(
                m.ErrorCode.INVALID_REPLICATION_FACTOR,
                str(NotEnoughBrokersError(f"topic {name}", name.namespace_path, live, persistence)),
            )
        if topic.assignments:
            return refused(
                m.ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "partitions are placed by the cluster (on the least-loaded broker), not "
                "by the client: leave the assignments out",
            )
        if topic.configs:
            return refused(
                m.ErrorCode.INVALID_CONFIG,
                f"topic configs are not taken ({', '.join(n for n, _ in topic.configs)}): "
                "retention is the broker's (retention_time_s); leave them out",
            )
        try:
            if await self._topic_exists(name):
                return refused(m.ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name} already exists")
            if count > 1:
                limit = self._settings.max_partitions
                if limit and count > limit:
                    return refused(
                        m.ErrorCode.INVALID_PARTITIONS,
                        f"{count} partitions is more than this broker's "
                        f"max_num_partitions_per_partitioned_topic ({limit})",
                    )
            if validate_only:
                return mt.TopicResult(topic.name, m.ErrorCode.NONE)
            await self._make(
                name, count, None if factor == DEFAULT_REPLICATION_FACTOR else persistence
            )
        except (TopicConflictError, TooManyTopicsError) as error:
            return refused(kafka_error(error), str(error))  # TOPIC_ALREADY_EXISTS, POLICY_VIOLATION
        except InvalidPartitionCountError as error:
            return refused(m.ErrorCode.INVALID_PARTITIONS, str(error))
        except TopicNotFoundError as error:  # a creation check refused the name
            return refused(m.ErrorCode.INVALID_TOPIC_EXCEPTION, str(error))
        except NotEnoughBrokersError as error:  # a broker left since the count above
            return refused(m.ErrorCode.INVALID_REPLICATION_FACTOR, str(error))
        except (TopicUnavailableError, PeerCallError, BrokerFencedError) as error:
            return refused(m.ErrorCode.LEADER_NOT_AVAILABLE, str(error))
        return mt.TopicResult(topic.name, m.ErrorCode.NONE)

    def _persistence(self, name: TopicName, factor: int) -> PersistencePolicy:
        """The policy a replication factor asks for (see the module docstring)."""
        namespaces = self._registry.persistence_of(name.namespace_path)
        if factor == DEFAULT_REPLICATION_FACTOR:
            return namespaces
        return PersistencePolicy(factor, factor, min(factor, namespaces.ack_quorum))

    async def _topic_exists(self, name: TopicName) -> bool:
        """Whether any topic, plain or partitioned, has this name in the cluster."""
        if await self._partition_count(name, read=True) != NOT_PARTITIONED:
            return True
        return await self._registry.taken_in_cluster(name)

    async def _make(
        self, name: TopicName, count: int, persistence: PersistencePolicy | None
    ) -> None:
        """Create the topic; `persistence`: the policy its partitions (or it) are
        placed by (None: the namespace's)."""
        if count > 1:
            assert self._partitioned is not None, "partitioned topics need PartitionedTopics"
            await self._partitioned.create(name, count, persistence)
        elif not await self._registry.create(name, persistence=persistence):
            raise TopicConflictError(f"topic {name} already exists")

    # ------------------------------------------------------------ DeleteTopics

    async def _delete_topics(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = mt.read_delete_topics(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        results = []
        for kafka_name in request.names:
            error, why = await self._delete_topic(kafka_name)
            if error != m.ErrorCode.NONE:
                self._refused(error, f"{kafka_name}: {why}")
            results.append(mt.TopicResult(kafka_name, error, why))
        return mt.write_delete_topics(header.api_version, results)

    async def _delete_topic(self, kafka_name: str) -> tuple[m.ErrorCode, str | None]:
        name = self._topic_name(kafka_name)
        if name is None:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{kafka_name!r} names no topic"
        why = self._refusal(Action.ADMIN, name)
        if why is not None:
            return m.ErrorCode.TOPIC_AUTHORIZATION_FAILED, why
        try:
            if await self._partition_count(name, read=True) != NOT_PARTITIONED:
                assert self._partitioned is not None
                await self._partitioned.delete(name, force=True)
            elif self._partitioned is not None:
                # At its owner, wherever it is (this broker's registry standalone).
                await self._partitioned.access.delete(name)
            else:
                await self._registry.delete(name)
        except TopicNotFoundError as error:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(error)
        except (TopicUnavailableError, PeerCallError, BrokerFencedError) as error:
            return m.ErrorCode.LEADER_NOT_AVAILABLE, str(error)
        return m.ErrorCode.NONE, None
