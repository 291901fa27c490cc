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
    from stableline.broker.partitioned import PartitionedTopics
    from stableline.broker.registry import TopicRegistry
    from stableline.kafka.listener import KafkaListener

# Frames up to this much above the largest message are read (a Produce carries a
# batch plus its request); larger ones are refused unread.
FRAME_OVERHEAD_BYTES = 1024 * 1024


class KafkaStartupError(Exception):
    """The Kafka port cannot be opened as configured (one line, for the operator)."""


async def start_kafka(
    config: BrokerConfig,
    registry: TopicRegistry,
    coordinators: Coordinators,
    partitioned: PartitionedTopics,
    secure: bool,
    node_id: int,
    advertised_host: str,
) -> tuple[KafkaListener, int]:
    """Open the Kafka port at config.kafka_address as Kafka node `node_id`, told to
    clients at `advertised_host`: (the listener, its bound port)."""
    from stableline.kafka.handler import KafkaRequestHandler, KafkaSettings
    from stableline.kafka.listener import KafkaListener

    if secure:
        raise KafkaStartupError(
            "--kafka: the Kafka port has no TLS or SASL yet, so it cannot be opened on a "
            "broker with TLS or authentication; turn it off with --kafka ''"
        )
    host, _, port_text = config.kafka_address.rpartition(":")
    if not host or not port_text.isdigit():
        raise KafkaStartupError(f"--kafka {config.kafka_address!r}: expected HOST:PORT")
    handler = KafkaRequestHandler(
        registry,
        KafkaSettings(
            namespace=config.kafka_namespace,
            advertised_host=advertised_host,
            advertised_port=int(port_text),
            allow_auto_topic_creation=config.allow_auto_topic_creation,
            max_message_bytes=config.max_message_size,
            node_id=node_id,
        ),
        coordinators,
        partitioned=partitioned,
    )
    listener = KafkaListener(handler, config.max_message_size + FRAME_OVERHEAD_BYTES)
    port = await listener.start(host.strip("[]"), int(port_text))  # OSError: the caller's
    handler.advertise_port(port)
    return listener, port
