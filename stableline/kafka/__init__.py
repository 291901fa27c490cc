"""The Kafka protocol handler (preview): Kafka clients produce and fetch on the
broker's topics through a Kafka port of its own (`serve --kafka HOST:PORT`).

codec (primitive types) -> messages (schemas by API and version) and records
(record batches v2) -> convert (entries <-> batches) -> handler (the APIs) ->
listener (the asyncio server). `start_kafka` is what the broker calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stableline.broker.config import BrokerConfig
    from stableline.broker.coordinators import Coordinators
    from stableline.broker.registry import TopicRegistry
    from stableline.kafka.listener import KafkaListener
    from stableline.metadata import MetadataStore

# Frames up to this much above the largest message are read (a Produce carries a
# batch plus its request); larger ones are refused unread.
FRAME_OVERHEAD_BYTES = 1024 * 1024


class KafkaStartupError(Exception):
    """The Kafka port cannot be opened as configured (one line, for the operator)."""


async def start_kafka(
    config: BrokerConfig,
    registry: TopicRegistry,
    coordinators: Coordinators,
    secure: bool,
    metadata: MetadataStore,
) -> tuple[KafkaListener, int]:
    """Open the Kafka port at config.kafka_address: (the listener, its bound port).
    `metadata` is the cluster's metadata store, where transactional ids are kept."""
    from stableline.kafka.group_coordinator import GroupLimits
    from stableline.kafka.handler import KafkaRequestHandler, KafkaSettings
    from stableline.kafka.listener import KafkaListener
    from stableline.kafka.transactional_ids import TransactionalIds
    from stableline.kafka.txn_coordinator import KafkaTransactionCoordinator

    if secure:
        raise KafkaStartupError(
            "--kafka: the Kafka port has no TLS or SASL yet, so it cannot be opened on a "
            "broker with TLS or authentication; turn it off with --kafka ''"
        )
    host, _, port_text = config.kafka_address.rpartition(":")
    if not host or not port_text.isdigit():
        raise KafkaStartupError(f"--kafka {config.kafka_address!r}: expected HOST:PORT")
    kafka_txns = KafkaTransactionCoordinator(
        TransactionalIds(metadata, config.cluster_name), coordinators
    )
    handler = KafkaRequestHandler(
        registry,
        KafkaSettings(
            namespace=config.kafka_namespace,
            advertised_host=host.strip("[]") if host not in ("0.0.0.0", "::") else "127.0.0.1",
            advertised_port=int(port_text),
            # Security is off here, and then every caller may create (as on gRPC).
            allow_auto_topic_creation=True,
            max_message_bytes=config.max_message_size,
            groups=GroupLimits(
                max_groups=config.kafka_max_groups,
                max_members_per_group=config.kafka_max_group_members,
                max_members=config.kafka_max_group_members_total,
                initial_rebalance_delay_ms=config.kafka_group_initial_rebalance_delay_ms,
            ),
        ),
        coordinators,
        kafka_txns,
    )
    listener = KafkaListener(handler, config.max_message_size + FRAME_OVERHEAD_BYTES)
    try:
        port = await listener.start(host.strip("[]"), int(port_text))
    except OSError as error:
        raise KafkaStartupError(f"--kafka {config.kafka_address}: cannot listen: {error}") from None
    handler.advertise_port(port)
    kafka_txns.start()
    return listener, port
