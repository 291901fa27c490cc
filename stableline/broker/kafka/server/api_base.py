"""What every group of Kafka APIs shares: the broker's topics, the settings, the
mapping of Kafka topics and partitions to stableline topics, who leads what, and who
may do what.

Topics: a Kafka topic T is the stableline topic persistent://NAMESPACE/T (namespace
from config, public/default by default). When T is a partitioned topic, Kafka
partition i is its partition `T-partition-i` (stableline.partitions); any other
topic is partition 0 of itself.

Nodes: each broker is a Kafka node with the id recorded for it in the cluster's
metadata (stableline.metadata.kafka_nodes; a standalone broker is node 0) at its
advertised Kafka address. A partition's leader is the broker owning its topic
(broker/ownership.py); standalone, this broker leads everything. A request for a
partition another broker owns answers NOT_LEADER_OR_FOLLOWER, and clients refresh
their metadata and go there.

Coordinators: a consumer group's or transactional id's coordinator is the broker
leading the transaction coordinator shard its key hashes to (coordinators.named_shard),
where the stableline transaction of a transactional id lives.

Permissions: with authentication on, every request after SASL runs with its
connection's caller in CURRENT_CALLER (sasl.py); `_topic` checks the action asked
for on the topic as the gRPC side does (produce to write, consume to read), and
answers TOPIC_AUTHORIZATION_FAILED otherwise. With authentication off there is no
caller and every request is allowed.

Each group of APIs is a class of its own module deriving from KafkaApiBase, naming
the requests it answers in HANDLES (api key -> method name); KafkaRequestHandler
(handler.py) is all of them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import ClassVar

from stableline.broker.cluster.ownership import NotOwnerError, TopicUnavailableError
from stableline.broker.errors import BrokerError
from stableline.broker.kafka.coordinator.group_coordinator import GroupLimits
from stableline.broker.kafka.coordinator.idempotence import RecentBatches
from stableline.broker.kafka.coordinator.producer_ids import ProducerIdAllocator
from stableline.broker.kafka.coordinator.txn_coordinator import KafkaTransactionCoordinator
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.records import DEFAULT_MAX_RECORDS_BYTES
from stableline.broker.kafka.server.errors import kafka_error
from stableline.broker.kafka.server.fetch_levels import ClientIsolationLevels
from stableline.broker.kafka.server.request_scope import CURRENT_REQUEST
from stableline.broker.security.caller import CURRENT_CALLER, Caller
from stableline.broker.security.guard import Guard, NotPermitted
from stableline.broker.security.permissions import Action
from stableline.broker.topics.partitioned import PartitionedTopics
from stableline.broker.topics.placement import Placement
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.txn.coordinator_errors import CoordinatorUnavailableError
from stableline.broker.txn.coordinators import Coordinators, named_shard
from stableline.metadata import BrokerInfo
from stableline.partitions import NOT_PARTITIONED, partition_topic
from stableline.topic_name import InvalidTopicNameError, TopicName
from txnbuffer import TransactionBufferNotReadyError

log = logging.getLogger(__name__)

# Kafka's legal topic names.
KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(slots=True)
class KafkaSettings:
    namespace: str
    advertised_host: str
    advertised_port: int
    allow_auto_topic_creation: bool
    max_message_bytes: int
    # The most bytes one Fetch answers, whatever it asks for (max_fetch_bytes).
    max_fetch_bytes: int = 50 * 1024 * 1024

    @property
    def max_records_bytes(self) -> int:
        """What one compressed batch's records may inflate to: 16 times what a
        Produce may carry, 64 MiB at least."""
        return max(DEFAULT_MAX_RECORDS_BYTES, 16 * self.max_message_bytes)

    groups: GroupLimits = field(default_factory=GroupLimits)
    # This broker's Kafka node id (stableline.metadata.kafka_nodes).
    node_id: int = 0
    # max_num_partitions_per_partitioned_topic (0: no limit).
    max_partitions: int = 0
    # Topics, and partitions, one request may name (kafka_max_partitions_per_request).
    max_partitions_per_request: int = 10_000
    # What the compressed records of one Produce may inflate to, all its batches
    # together (kafka_max_produce_inflated_bytes; 0: max_records_bytes).
    max_produce_inflated_bytes: int = 0

    @property
    def produce_inflation_budget(self) -> int:
        """Bytes of decoded records one Produce may cost (compression.InflationBudget)."""
        return self.max_produce_inflated_bytes or self.max_records_bytes


class CoordinatorNodeUnavailable(BrokerError):
    """The broker that coordinates a key is down, or has no Kafka port: answer
    COORDINATOR_NOT_AVAILABLE (clients look the coordinator up again)."""

    code = "CoordinatorUnavailable"


class KafkaApiBase:
    """The state the API groups share; HANDLES names the requests a group answers."""

    HANDLES: ClassVar[dict[m.ApiKey, str]] = {}
    # Kafka's transaction coordinator (txn_coordinator.py); None: transactional ids
    # and batches are refused.
    _kafka_txns: KafkaTransactionCoordinator | None = None

    def __init__(
        self,
        registry: TopicRegistry,
        settings: KafkaSettings,
        coordinators: Coordinators | None = None,
        *,
        partitioned: PartitionedTopics | None = None,
        guard: Guard | None = None,
    ) -> None:
        self._registry = registry
        self._settings = settings
        # The broker's transaction coordinators (None in handler unit tests).
        self._coordinators = coordinators
        # Partitioned topics (None in handler unit tests: every topic is plain).
        self._partitioned = partitioned
        # Authentication and authorization (None, or disabled, when security is off).
        self._guard = guard if guard is not None and guard.enabled else None
        self._producer_ids = ProducerIdAllocator(settings.node_id)
        self._recent_batches = RecentBatches()
        # The isolation level of each client id's latest Fetch (for group commits).
        self._fetch_levels = ClientIsolationLevels()

    # ------------------------------------------------------------ callers

    @staticmethod
    def _caller() -> Caller | None:
        """Who sent the request being answered: None with authentication off."""
        return CURRENT_CALLER.get()

    def _producer_role(self) -> str:
        """Whose Kafka producer ids the caller's are ("" with authentication off)."""
        caller = self._caller()
        return "" if self._guard is None or caller is None else caller.role

    def _refusal(self, action: Action, name: TopicName | None) -> str | None:
        """Why the caller may not do `action` (on `name`); None when it may."""
        caller = self._caller()
        if self._guard is None or caller is None:
            return None
        try:
            self._guard.authorize(caller.role, action, name)
        except NotPermitted as error:
            return str(error)
        return None

    # ------------------------------------------------------------ brokers

    def _this_node(self) -> m.BrokerInfo:
        """This broker as Metadata and FindCoordinator name it."""
        settings = self._settings
        return m.BrokerInfo(settings.node_id, settings.advertised_host, settings.advertised_port)

    def _node_of(self, placement: Placement) -> m.BrokerInfo | None:
        """The Kafka node of a topic's live broker, None when it is not live or its
        Kafka port is off."""
        if placement.here:
            return self._this_node()
        info = self._registry.placement.live_broker(placement.leader)
        return None if info is None else kafka_node(info)

    def _node_of_broker(self, broker_id: str) -> m.BrokerInfo | None:
        """The Kafka node of live broker `broker_id` (this one included: it is
        registered too), None when it is not live or its Kafka port is off."""
        info = self._registry.placement.live_broker(broker_id)
        return None if info is None else kafka_node(info)

    def _live_nodes(self) -> list[m.BrokerInfo]:
        """Every live broker with a Kafka port, this one first, then by node id."""
        this = self._this_node()
        nodes = (kafka_node(info) for info in self._registry.placement.live_brokers())
        others = [node for node in nodes if node is not None and node.node_id != this.node_id]
        return [this, *sorted(others, key=lambda node: node.node_id)]

    async def _coordinator_node(self, key: str, owner: str | None = None) -> m.BrokerInfo:
        """The broker that coordinates `key` (FindCoordinator): the leader of the
        transaction coordinator shard named_shard(owner, key, count), where a
        transactional id's stableline transaction lives. `owner` defaults to the
        caller's role ("" with authentication off), which owns the transactions it
        names; a consumer group belongs to no role: pass owner="". A shard nobody
        leads yet is taken by this broker, as a first transaction of that name here
        would take it. Raises CoordinatorNodeUnavailable when the leader is down or
        has no Kafka port."""
        if self._coordinators is None:
            return self._this_node()
        if owner is None:
            caller = self._caller()
            owner = "" if caller is None else caller.role
        shard = named_shard(owner, key, self._coordinators.shard_count)
        try:
            leader = await self._coordinators.shard_leader(shard)
        except CoordinatorUnavailableError as error:
            raise CoordinatorNodeUnavailable(str(error)) from None
        if leader is None:
            return self._this_node()
        node = kafka_node(leader)
        if node is None:
            raise CoordinatorNodeUnavailable(
                f"coordinator shard {shard} is led by broker {leader.broker_id}, whose "
                f"Kafka port is off"
            )
        return node

    # ------------------------------------------------------------ topics

    def _topic_name(self, kafka_name: str) -> TopicName | None:
        if not KAFKA_TOPIC.fullmatch(kafka_name):
            return None
        try:
            return TopicName.parse(f"persistent://{self._settings.namespace}/{kafka_name}")
        except InvalidTopicNameError:  # "." or "..", or too long with the namespace
            return None

    async def _partition_count(self, name: TopicName, read: bool = False) -> int:
        """Kafka partitions of topic `name`: its count when partitioned, else 0
        (NOT_PARTITIONED). `read`: as the metadata store has it now (answers to
        Metadata); otherwise as this broker last saw it (a dict look-up)."""
        if self._partitioned is None:
            return NOT_PARTITIONED
        if read:
            # Once per topic a request, however many of its partitions it names.
            scope = CURRENT_REQUEST.get()
            if scope is None:
                return await self._partitioned.read_partitions(name)
            count = scope.read_counts.get(name)
            if count is None:
                count = scope.read_counts[name] = await self._partitioned.read_partitions(name)
            return count
        return self._partitioned.partitions(name)

    async def _partition_name(self, kafka_name: str, partition: int) -> TopicName | None:
        """The stableline topic holding Kafka partition `partition` of `kafka_name`,
        None when it names none (a bad name, an index out of range)."""
        name = self._topic_name(kafka_name)
        if name is None or partition < 0:
            return None
        count = await self._partition_count(name)
        if count == NOT_PARTITIONED and partition > 0:
            # Made through another broker a moment ago? Ask the store.
            count = await self._partition_count(name, read=True)
        if count == NOT_PARTITIONED:
            return name if partition == 0 else None
        return partition_topic(name, partition) if partition < count else None

    async def _topic(
        self,
        kafka_name: str,
        partition: int,
        stable: bool = False,
        action: Action = Action.CONSUME,
    ) -> Topic | m.ErrorCode:
        """The partition's topic, or the error code to answer. `action`: what the
        caller does with it (CONSUME to read, PRODUCE to write), checked first.
        With `stable` (a READ_COMMITTED read), once the topic has replayed its log
        after a restart (TopicRegistry.get_stable): its stable position, and so the
        last stable offset, is then never earlier than one told before the restart."""
        name = await self._partition_name(kafka_name, partition)
        if name is None:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        why = self._refusal(action, name)
        if why is not None:
            return self._refused(m.ErrorCode.TOPIC_AUTHORIZATION_FAILED, why)
        try:
            if stable:
                return await self._registry.get_stable(name)
            return await self._registry.get(name, create=False)
        except TopicNotFoundError as error:
            return kafka_error(error)  # UNKNOWN_TOPIC_OR_PARTITION
        except (NotOwnerError, TopicUnavailableError) as error:
            # Another broker leads it (or its leader is down): clients refresh their
            # metadata, find the leader there and retry (NOT_LEADER_OR_FOLLOWER).
            log.debug("kafka: %s", error)
            return kafka_error(error)
        except TransactionBufferNotReadyError as error:
            # What Kafka answers for a partition this broker cannot serve yet (its log
            # still loading): clients refresh metadata, back off and retry.
            return self._refused(kafka_error(error), str(error))

    @staticmethod
    def _refused(code: m.ErrorCode, why: str) -> m.ErrorCode:
        """`code`, noted with its reason: in the request's one summary line
        (request_scope.py), or logged at once outside a request."""
        scope = CURRENT_REQUEST.get()
        if scope is None:
            log.info("kafka: %s", why)
        else:
            scope.note_refusal(code.name, why)
        return code


def kafka_node(info: BrokerInfo) -> m.BrokerInfo | None:
    """A broker's registration as a Kafka node; None when its Kafka port is off."""
    if not info.kafka_address or info.kafka_node_id < 0:
        return None
    host, _, port = info.kafka_address.rpartition(":")
    return m.BrokerInfo(info.kafka_node_id, host.strip("[]"), int(port))
