"""What every group of Kafka APIs shares: the broker's topics, the settings, and the
mapping of Kafka topic names to stableline topics.

A Kafka topic T is the stableline topic persistent://NAMESPACE/T (namespace from
config, public/default by default); a topic is partition 0 of itself (partitioned
topics are not mapped yet). This broker is node 0 and leads every partition.

Each group of APIs is a class of its own module deriving from KafkaApiBase, naming
the requests it answers in HANDLES (api key -> method name); KafkaRequestHandler
(handler.py) is all of them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import ClassVar

from stableline.broker.coordinators import Coordinators
from stableline.broker.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topic import Topic
from stableline.kafka import messages as m
from stableline.kafka.fetch_levels import ClientIsolationLevels
from stableline.kafka.group_coordinator import GroupLimits
from stableline.kafka.producer_ids import ProducerIdAllocator
from stableline.kafka.txn_coordinator import KafkaTransactionCoordinator
from stableline.topic_name import TopicName
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
    groups: GroupLimits = field(default_factory=GroupLimits)


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
    ) -> None:
        self._registry = registry
        self._settings = settings
        # The broker's transaction coordinators (None in handler unit tests).
        self._coordinators = coordinators
        self._producer_ids = ProducerIdAllocator()
        # The isolation level of each client id's latest Fetch (for group commits).
        self._fetch_levels = ClientIsolationLevels()

    # ------------------------------------------------------------ brokers

    def _this_node(self) -> m.BrokerInfo:
        """This broker as Metadata and FindCoordinator name it."""
        settings = self._settings
        return m.BrokerInfo(0, settings.advertised_host, settings.advertised_port)

    async def _coordinator_node(self, key: str) -> m.BrokerInfo:
        """The broker that coordinates the consumer group or transactional id `key`
        (FindCoordinator): this one, while the Kafka port serves one broker."""
        return self._this_node()

    # ------------------------------------------------------------ topics

    def _topic_name(self, kafka_name: str) -> TopicName | None:
        if not KAFKA_TOPIC.fullmatch(kafka_name):
            return None
        return TopicName.parse(f"persistent://{self._settings.namespace}/{kafka_name}")

    async def _topic(
        self, kafka_name: str, partition: int, stable: bool = False
    ) -> Topic | m.ErrorCode:
        """The partition's topic, or the error code to answer. With `stable` (a
        READ_COMMITTED read), once the topic has replayed its log after a restart
        (TopicRegistry.get_stable): its stable position, and so the last stable
        offset, is then never earlier than one told before the restart."""
        name = self._topic_name(kafka_name)
        if name is None or partition != 0:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            if stable:
                return await self._registry.get_stable(name)
            return await self._registry.get(name, create=False)
        except TopicNotFoundError:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except TransactionBufferNotReadyError as error:
            # What Kafka answers for a partition this broker cannot serve yet (its log
            # still loading): clients refresh metadata, back off and retry.
            log.info("kafka: %s", error)
            return m.ErrorCode.NOT_LEADER_OR_FOLLOWER
