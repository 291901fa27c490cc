"""The options of a client, producer, consumer and reader: one frozen value each, the
only place their defaults are written.

Both faces take these as keyword arguments (`create_producer(topic, ...)` in
`stableline` and `stableline.aio`), build the value, and hand it on; their
signatures name each default as `DEFAULTS.field`, so a default changes here or
nowhere. A value is checked once, when made: a bad option raises ValueError
before anything is opened, and enum options given as their text or number come
out as the enum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stableline._auth import AuthenticationToken
from stableline._keys import BatchingType, KeySharedPolicy
from stableline._routing import MessageRoutingMode, RoutedMessage
from stableline._types import ConsumerType, InitialPosition, IsolationLevel, MessageId
from stableline.aio._reconnect import Backoff


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a client reaches its brokers: time limit, credentials, TLS, reconnect waits.

    A CA or client certificate turns TLS on even on a stableline:// URL. After
    operation_timeout_seconds without a broker, pending calls fail with
    BrokerUnavailable; connection_backoff (None: Backoff()) spaces the attempts.
    """

    operation_timeout_seconds: float = 30.0
    authentication: AuthenticationToken | None = None
    tls_trust_certs_file_path: str | Path | None = None
    tls_certificate_file_path: str | Path | None = None
    tls_private_key_file_path: str | Path | None = None
    connection_backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if not self.operation_timeout_seconds > 0:
            raise ValueError("operation_timeout_seconds must be > 0")

    @property
    def backoff(self) -> Backoff:
        return self.connection_backoff or Backoff()

    @property
    def wants_tls(self) -> bool:
        """A CA or client certificate was given: TLS whatever the URL's scheme says."""
        return any(
            path is not None
            for path in (
                self.tls_trust_certs_file_path,
                self.tls_certificate_file_path,
                self.tls_private_key_file_path,
            )
        )


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    """A producer's batching and queue. Past max_pending_messages unacknowledged,
    send() waits when block_if_queue_full, else raises ProducerQueueIsFull."""

    producer_name: str | None = None
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: float = 1
    # Pulsar's Python client allows 1000; with batches of up to 1000 messages that
    # would leave one batch in flight, so the default is larger.
    max_pending_messages: int = 100_000
    block_if_queue_full: bool = False
    # A batch holds messages of one partition key at most: Default ends a batch
    # where the key changes (send order kept), KeyBased groups a batching window's
    # messages by key (order kept per key).
    batching_type: BatchingType = BatchingType.Default
    # On a partitioned topic: where messages without a key go (stableline._routing).
    message_routing_mode: MessageRoutingMode = MessageRoutingMode.RoundRobinPartition
    message_router: Callable[[RoutedMessage, int], int] | None = None
    # On a partitioned topic: how often the partition count is read again, so a grown
    # topic's new partitions are produced to (Pulsar's autoUpdatePartitionsInterval;
    # 0: never, Pulsar's autoUpdatePartitions=false).
    partitions_update_interval_s: float = 60.0

    def __post_init__(self) -> None:
        _check_interval(self.partitions_update_interval_s)
        object.__setattr__(self, "batching_type", BatchingType(self.batching_type))
        mode = MessageRoutingMode(self.message_routing_mode)
        object.__setattr__(self, "message_routing_mode", mode)
        if (mode is MessageRoutingMode.CustomPartition) != (self.message_router is not None):
            raise ValueError(
                "message_router(message, num_partitions) is given with, and only with, "
                "message_routing_mode=MessageRoutingMode.CustomPartition"
            )
        if self.batching_max_messages < 1:
            raise ValueError("batching_max_messages must be >= 1")
        if self.max_pending_messages < 1:
            raise ValueError("max_pending_messages must be >= 1")


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """A consumer's subscription type, start, isolation, receiver queue, redelivery
    and, for Key_Shared, its key split."""

    consumer_type: ConsumerType = ConsumerType.Exclusive
    initial_position: InitialPosition = InitialPosition.Latest
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    ack_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    priority_level: int = 0
    # Key_Shared only: how the subscription's key hashes are split among consumers
    # (None: the broker's AUTO_SPLIT).
    key_shared_policy: KeySharedPolicy | None = None
    # The blocking face's acknowledge groups acks as Pulsar's clients do (the C++ and
    # Python clients' ack grouping time, default 100 ms, and max size, 1000): the ids
    # go as one request once the time is up or the group is full. 0: no grouping,
    # every acknowledge waits for the broker's answer. The asyncio face's acknowledge
    # is awaited and always waits (pass a list to group).
    ack_grouping_time_ms: int = 100
    ack_grouping_max_size: int = 1000
    # On a partitioned topic: how often the partition count is read again, so a grown
    # topic's new partitions are consumed too, from their earliest message (0: never).
    partitions_update_interval_s: float = 60.0

    def __post_init__(self) -> None:
        _check_interval(self.partitions_update_interval_s)
        object.__setattr__(self, "consumer_type", ConsumerType(self.consumer_type))
        if self.ack_grouping_time_ms < 0:
            raise ValueError("ack_grouping_time_ms must be >= 0 (0: no grouping)")
        if self.ack_grouping_max_size < 1:
            raise ValueError("ack_grouping_max_size must be >= 1")
        object.__setattr__(self, "initial_position", InitialPosition(self.initial_position))
        object.__setattr__(self, "isolation_level", IsolationLevel.parse(self.isolation_level))
        if self.receiver_queue_size < 1:
            raise ValueError("receiver_queue_size must be >= 1")
        if self.ack_timeout_ms < 0 or self.negative_ack_redelivery_delay_ms < 0:
            raise ValueError("ack_timeout_ms and negative_ack_redelivery_delay_ms must be >= 0")


def _check_interval(seconds: float) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(
            f"partitions_update_interval_s must be a number of seconds >= 0 (0: never), "
            f"not {seconds!r}"
        )


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """Where a reader starts (exclusive; earliest and latest as named) and what it sees."""

    start_message_id: MessageId = MessageId.earliest
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED

    def __post_init__(self) -> None:
        if not isinstance(self.start_message_id, MessageId):
            raise TypeError(
                f"start_message_id must be a MessageId, not {type(self.start_message_id).__name__}"
            )
        object.__setattr__(self, "isolation_level", IsolationLevel.parse(self.isolation_level))


# The defaults, for the signatures of both faces.
CLIENT_DEFAULTS = ClientOptions()
PRODUCER_DEFAULTS = ProducerOptions()
CONSUMER_DEFAULTS = ConsumerOptions()
READER_DEFAULTS = ReaderOptions()
# Arguments of single calls, shared the same way.
TRANSACTION_TIMEOUT_MS = 60_000
BATCH_RECEIVE_MAX_MESSAGES = 100
BATCH_RECEIVE_TIMEOUT_MS = 100
