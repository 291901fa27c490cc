"""The Kafka protocol handler: Kafka clients produce and fetch on the broker's
topics through a Kafka port of its own (`serve --kafka HOST:PORT`, 127.0.0.1:9092
by default).

codec (primitive types) -> messages* (schemas by API and version) and records
(record batches v2) -> convert (entries <-> batches) -> api_* (the APIs, by group)
-> handler (dispatch) with sasl (each connection's authentication) -> listener
(the asyncio server, TLS when the broker has it). `start_kafka` is what the broker
calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stableline.broker.errors import BrokerError

if TYPE_CHECKING:
    from stableline.broker.app.security import BrokerSecurity
    from stableline.broker.config import BrokerConfig
    from stableline.broker.connections.caps import PortCaps
    from stableline.broker.kafka.server.listener import KafkaListener
    from stableline.broker.topics.partitioned import PartitionedTopics
    from stableline.broker.topics.registry import TopicRegistry
    from stableline.broker.txn.coordinators import Coordinators
    from stableline.metadata import ClusterMetadataStore

# Frames up to this much above the largest message are read (a Produce carries a
# batch plus its request); larger ones are refused unread.
FRAME_OVERHEAD_BYTES = 1024 * 1024


class KafkaStartupError(BrokerError):
    """The Kafka port cannot be opened as configured (one line, for the operator)."""

    code = "Internal"


async def start_kafka(
    config: BrokerConfig,
    registry: TopicRegistry,
    coordinators: Coordinators,
    partitioned: PartitionedTopics,
    security: BrokerSecurity,
    node_id: int,
    advertised_host: str,
    metadata: ClusterMetadataStore,
    caps: PortCaps | None = None,
) -> tuple[KafkaListener, int]:
    """Open the Kafka port at config.kafka_address as Kafka node `node_id`, told to
    clients at `advertised_host`: (the listener, its bound port). With the broker's
    TLS it speaks TLS (SSL, or SASL_SSL); with its token authentication it asks for
    SASL/PLAIN (SASL_PLAINTEXT, or SASL_SSL); an OSError if it cannot listen.
    `metadata` is the cluster's metadata store, where transactional ids are kept,
    and in a cluster (a metadata store URL) the consumer groups' indexes and owners
    too (standalone those stay in the broker's own store, as its offsets do);
    `caps` the port's connection caps (connections/caps.py; the configured ones when
    None). MetadataStoreError when the groups' records cannot be read."""
    from stableline.broker.connections.caps import PortCaps
    from stableline.broker.kafka.coordinator.group_coordinator import GroupLimits
    from stableline.broker.kafka.coordinator.group_records import (
        GroupRecords,
        LocalGroupRecords,
    )
    from stableline.broker.kafka.coordinator.shared_group_records import SharedGroupRecords
    from stableline.broker.kafka.coordinator.transactional_ids import TransactionalIds
    from stableline.broker.kafka.coordinator.txn_coordinator import KafkaTransactionCoordinator
    from stableline.broker.kafka.server.handler import KafkaRequestHandler, KafkaSettings
    from stableline.broker.kafka.server.listener import KafkaConnectionLimits, KafkaListener

    host, _, port_text = config.kafka_address.rpartition(":")
    if not host or not port_text.isdigit():
        raise KafkaStartupError(f"--kafka {config.kafka_address!r}: expected HOST:PORT")
    kafka_txns = KafkaTransactionCoordinator(
        TransactionalIds(metadata, config.cluster_name), coordinators
    )
    group_records: GroupRecords = LocalGroupRecords(registry.store)
    if config.metadata_store_url:
        shared = SharedGroupRecords(metadata, config.cluster_name)
        await shared.start()  # every group's records, before a group request is answered
        group_records = shared
    handler = KafkaRequestHandler(
        registry,
        KafkaSettings(
            namespace=config.kafka_namespace,
            advertised_host=advertised_host,
            advertised_port=int(port_text),
            allow_auto_topic_creation=config.allow_auto_topic_creation,
            max_message_bytes=config.max_message_size,
            max_fetch_bytes=config.max_fetch_bytes,
            groups=GroupLimits(
                max_groups=config.kafka_max_groups,
                max_members_per_group=config.kafka_max_group_members,
                max_members=config.kafka_max_group_members_total,
                initial_rebalance_delay_ms=config.kafka_group_initial_rebalance_delay_ms,
                max_groups_per_role=config.kafka_max_groups_per_role
                or max(1, config.kafka_max_groups // 10),
                max_members_per_role=config.kafka_max_group_members_per_role
                or max(1, config.kafka_max_group_members_total // 10),
                min_session_timeout_ms=config.kafka_group_min_session_timeout_ms,
                max_session_timeout_ms=config.kafka_group_max_session_timeout_ms,
            ),
            node_id=node_id,
            max_partitions=config.max_num_partitions_per_partitioned_topic,
            max_partitions_per_request=config.kafka_max_partitions_per_request,
            max_produce_inflated_bytes=config.kafka_max_produce_inflated_bytes,
        ),
        coordinators,
        partitioned=partitioned,
        guard=security.guard,
        kafka_txns=kafka_txns,
        group_records=group_records,
    )
    listener = KafkaListener(
        handler,
        config.max_message_size + FRAME_OVERHEAD_BYTES,
        security.http_ssl_context(),  # the same certificate and client CA as HTTPS
        KafkaConnectionLimits(
            caps
            or PortCaps.of(config.kafka_max_connections, config.kafka_max_connections_per_address),
            config.connection_authentication_timeout_s,
            config.kafka_connections_max_idle_ms / 1000,
        ),
    )
    try:
        port = await listener.start(host.strip("[]"), int(port_text))  # OSError: the caller's
    except BaseException:
        await group_records.close()
        raise
    handler.advertise_port(port)
    kafka_txns.start()
    return listener, port
