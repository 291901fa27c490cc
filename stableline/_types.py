"""Values users see: enums, message ids, messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from stableline._proto import broker_pb2 as pb

_MAX = 2**63 - 1


class ConsumerType(enum.Enum):
    Exclusive = pb.SUBSCRIPTION_TYPE_EXCLUSIVE
    Shared = pb.SUBSCRIPTION_TYPE_SHARED
    Failover = pb.SUBSCRIPTION_TYPE_FAILOVER
    KeyShared = pb.SUBSCRIPTION_TYPE_KEY_SHARED


class InitialPosition(enum.Enum):
    Latest = pb.INITIAL_POSITION_LATEST
    Earliest = pb.INITIAL_POSITION_EARLIEST


class IsolationLevel(enum.Enum):
    READ_COMMITTED = pb.ISOLATION_LEVEL_READ_COMMITTED
    READ_UNCOMMITTED = pb.ISOLATION_LEVEL_READ_UNCOMMITTED

    @classmethod
    def parse(cls, text: str | IsolationLevel) -> IsolationLevel:
        if isinstance(text, cls):
            return text
        normalized = str(text).strip().upper().replace("-", "_")
        try:
            return cls[normalized]
        except KeyError:
            raise ValueError(
                f"unknown isolation level {text!r}: use read_committed or read_uncommitted"
            ) from None


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """(ledger_id, entry_id, batch_index); ordered as the topic's log."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        parts = text.split(":")
        try:
            if len(parts) == 2:
                return cls(int(parts[0]), int(parts[1]))
            if len(parts) == 3:
                return cls(int(parts[0]), int(parts[1]), int(parts[2]))
        except ValueError:
            pass
        raise ValueError(f"not a message id {text!r}: expected 'ledger:entry[:batch]'")

    def to_proto(self) -> pb.MessageIdData:
        return pb.MessageIdData(
            ledger_id=self.ledger_id, entry_id=self.entry_id, batch_index=self.batch_index
        )


MessageId.earliest = MessageId(-1, -1, -1)
MessageId.latest = MessageId(_MAX, _MAX, -1)


class DeliveredEntry:
    """What the messages of one delivered entry share; made once per entry."""

    __slots__ = ("entry_id", "ledger_id", "metadata", "num_messages", "redelivery_count", "topic")

    def __init__(
        self,
        topic: str,
        ledger_id: int,
        entry_id: int,
        metadata: pb.EntryMetadata,
        redelivery_count: int,
    ):
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.metadata = metadata
        self.num_messages = metadata.num_messages
        self.redelivery_count = redelivery_count


class Message:
    """One received message. Its id and fields are read from the entry lazily."""

    __slots__ = ("_entry", "_index", "_message")

    def __init__(self, entry: DeliveredEntry, index: int, message: pb.SingleMessage):
        self._entry = entry
        self._index = index
        self._message = message

    def data(self) -> bytes:
        return self._message.payload

    def value(self) -> bytes:
        return self._message.payload

    def message_id(self) -> MessageId:
        entry = self._entry
        return MessageId(entry.ledger_id, entry.entry_id, self._index)

    def partition_key(self) -> str | None:
        return self._message.partition_key if self._message.has_partition_key else None

    def properties(self) -> dict[str, str]:
        return dict(self._message.properties)

    def publish_timestamp(self) -> int:
        return self._entry.metadata.publish_time_ms

    def event_timestamp(self) -> int:
        return self._message.event_time_ms

    def txn_id(self) -> tuple[int, int] | None:
        metadata = self._entry.metadata
        if not metadata.HasField("txn_id"):
            return None
        return (metadata.txn_id.most_bits, metadata.txn_id.least_bits)

    def producer_name(self) -> str:
        return self._entry.metadata.producer_name

    def redelivery_count(self) -> int:
        return self._entry.redelivery_count

    def topic_name(self) -> str:
        return self._entry.topic

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self._message.payload)} bytes)"


def messages_of(topic: str, entry: pb.EntryDelivery, skip_through: int = -1) -> list[Message]:
    """Decode a delivered entry into its messages, leaving out acknowledged indexes."""
    batch = pb.MessageBatch.FromString(entry.payload)
    delivered = DeliveredEntry(
        topic, entry.ledger_id, entry.entry_id, entry.metadata, entry.redelivery_count
    )
    if skip_through < 0 and not entry.acked_batch_indexes:
        return [Message(delivered, index, single) for index, single in enumerate(batch.messages)]
    skipped = set(entry.acked_batch_indexes)
    return [
        Message(delivered, index, single)
        for index, single in enumerate(batch.messages)
        if index > skip_through and index not in skipped
    ]


def parse_service_url(url: str) -> tuple[str, bool]:
    """'host:port', 'stableline://host:port' or 'stableline+ssl://host:port' -> (target, tls)."""
    tls = False
    target = url
    if "://" in url:
        scheme, target = url.split("://", 1)
        if scheme in ("stableline+ssl", "pulsar+ssl"):
            tls = True
        elif scheme not in ("stableline", "pulsar", "grpc"):
            raise ValueError(
                f"service URL {url!r}: scheme must be stableline:// or stableline+ssl://"
            )
    target = target.rstrip("/")
    if ":" not in target:
        raise ValueError(f"service URL {url!r} needs a port, e.g. 127.0.0.1:6650")
    return target, tls
