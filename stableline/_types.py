"""Values users see: enums, message ids, messages, lookup answers."""

from __future__ import annotations

import enum
import operator
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import ClassVar

from dispatcher import IsolationLevel
from stableline._proto import broker_pb2 as pb
from stableline.wire import plain_layout

_MAX = 2**63 - 1


class ConsumerType(enum.Enum):
    Exclusive = pb.SUBSCRIPTION_TYPE_EXCLUSIVE
    Shared = pb.SUBSCRIPTION_TYPE_SHARED
    Failover = pb.SUBSCRIPTION_TYPE_FAILOVER
    KeyShared = pb.SUBSCRIPTION_TYPE_KEY_SHARED


class InitialPosition(enum.Enum):
    Latest = pb.INITIAL_POSITION_LATEST
    Earliest = pb.INITIAL_POSITION_EARLIEST


# The one isolation level, the dispatcher's (PIP-298), and its code on the wire.
ISOLATION_LEVEL_PROTO: dict[IsolationLevel, int] = {
    IsolationLevel.READ_COMMITTED: pb.ISOLATION_LEVEL_READ_COMMITTED,
    IsolationLevel.READ_UNCOMMITTED: pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
}


class TransactionState(enum.StrEnum):
    """Where a client's transaction stands. A str: `txn.state == "COMMITTED"` holds and
    it prints as its name."""

    OPEN = "OPEN"
    """Sends and acks may join it; nobody has ended it yet."""
    COMMITTED = "COMMITTED"
    """The coordinator committed it: everything in it is visible, for good."""
    ABORTED = "ABORTED"
    """The coordinator aborted it: nothing in it is ever visible."""


class IdPart(int):
    """A part of a MessageId, read as an attribute: an int that may also be called.

    `msg_id.ledger_id` is the number (`== 5`, `+ 1`, prints as `5`) and
    `msg_id.ledger_id()`, pulsar-client's spelling, returns it as a plain int. Made
    only when a part is read, so a MessageId holds plain ints and costs nothing more
    to make (scripts/bench/bench_message_id.py measures both).
    """

    __slots__ = ()

    # int.__int__ of a subclass gives the exact int, in C: no Python frame per call.
    __call__ = int.__int__


class MessageId(tuple):
    """(ledger_id, entry_id, batch_index); ordered as the topic's log.

    A tuple: made, compared and hashed in C, as every send_async callback and every
    received message makes one (it unpacks, `ledger, entry, batch = msg_id`, and
    equals the plain tuple of its parts). Immutable, as the frozen value it was.
    Its parts read as attributes or, as in pulsar-client, as calls:
    `msg_id.ledger_id == msg_id.ledger_id()` (see IdPart). Code on a hot path
    unpacks or indexes instead, which makes no IdPart.
    """

    __slots__ = ()

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __new__(cls, ledger_id: int, entry_id: int, batch_index: int = -1) -> MessageId:
        return tuple.__new__(cls, (ledger_id, entry_id, batch_index))

    ledger_id = property(
        lambda self: IdPart(self[0]), doc="The ledger holding the entry (an IdPart)."
    )
    entry_id = property(
        lambda self: IdPart(self[1]), doc="The entry within its ledger (an IdPart)."
    )
    batch_index = property(
        lambda self: IdPart(self[2]),
        doc="The message within the entry's batch; -1: the entry (an IdPart).",
    )

    def __getnewargs__(self) -> tuple[int, int, int]:
        return tuple(self)

    def __repr__(self) -> str:
        ledger_id, entry_id, batch_index = self
        return f"MessageId(ledger_id={ledger_id}, entry_id={entry_id}, batch_index={batch_index})"

    def __str__(self) -> str:
        ledger_id, entry_id, batch_index = self
        return f"{ledger_id}:{entry_id}:{batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """The MessageId that str() wrote: 'ledger:entry[:batch]', or for a message of
        a partitioned topic Pulsar's 'ledger:entry:partition:batch'."""
        parts = text.split(":")
        try:
            if len(parts) == 2:
                return cls(int(parts[0]), int(parts[1]))
            if len(parts) == 3:
                return cls(int(parts[0]), int(parts[1]), int(parts[2]))
            if len(parts) == 4:
                ledger_id, entry_id, partition, batch_index = map(int, parts)
                if partition >= 0:
                    return PartitionedMessageId(ledger_id, entry_id, batch_index, partition)
        except ValueError:
            pass
        raise ValueError(
            f"not a message id {text!r}: expected 'ledger:entry[:batch]' or "
            "'ledger:entry:partition:batch' (partition >= 0)"
        )

    # A partition's index for a message of a partitioned topic (PartitionedMessageId).
    _partition: ClassVar[int] = -1
    partition = property(
        lambda self: IdPart(self._partition),
        doc="Pulsar's partition index, -1 unless of a partitioned topic (an IdPart).",
    )

    def serialize(self) -> bytes:
        """Bytes for MessageId.deserialize (the wire's MessageIdData; its partition
        field is set only for a message of a partitioned topic)."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        """The MessageId that serialize() wrote (a PartitionedMessageId when it carries
        a partition); ValueError for other bytes."""
        try:
            message = pb.MessageIdData.FromString(data)
        except Exception as error:  # protobuf's DecodeError
            raise ValueError(f"not a serialized message id: {error}") from None
        if message.HasField("partition"):
            if message.partition < 0:
                raise ValueError(f"not a serialized message id: partition {message.partition}")
            return PartitionedMessageId(
                message.ledger_id, message.entry_id, message.batch_index, message.partition
            )
        return cls(message.ledger_id, message.entry_id, message.batch_index)

    def to_proto(self) -> pb.MessageIdData:
        ledger_id, entry_id, batch_index = self
        return pb.MessageIdData(ledger_id=ledger_id, entry_id=entry_id, batch_index=batch_index)


class PartitionedMessageId(MessageId):
    """The MessageId of a message of partition `partition()` of a partitioned topic;
    equal to the plain MessageId of its position (the partition rides beside it)."""

    def __new__(
        cls, ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1
    ) -> PartitionedMessageId:
        self = tuple.__new__(cls, (ledger_id, entry_id, batch_index))
        self._partition = partition
        return self

    def __getnewargs__(self) -> tuple[int, int, int, int]:
        return (*self, self._partition)

    def __repr__(self) -> str:
        ledger_id, entry_id, batch_index = self
        return (
            f"MessageId(ledger_id={ledger_id}, entry_id={entry_id}, "
            f"batch_index={batch_index}, partition={self._partition})"
        )

    def __str__(self) -> str:
        # Pulsar's order for a partition's message id: ledger:entry:partition:batch.
        ledger_id, entry_id, batch_index = self
        return f"{ledger_id}:{entry_id}:{self._partition}:{batch_index}"

    def serialize(self) -> bytes:
        # to_proto() stays the position alone (acks and seeks to the partition's
        # topic); the bytes a user keeps carry the partition too.
        message = self.to_proto()
        if self._partition >= 0:
            message.partition = self._partition
        return message.SerializeToString()


MessageId.earliest = MessageId(-1, -1, -1)
MessageId.latest = MessageId(_MAX, _MAX, -1)


@dataclass(frozen=True, slots=True)
class LookupResult:
    """Which broker serves a topic (`client.lookup_topic`), as Pulsar's lookup answers."""

    topic: str  # the topic's full name
    broker_url: str  # the broker's service URL, as Client() takes it (Pulsar's brokerUrl)
    http_url: str  # its HTTP admin URL
    grpc_address: str  # host:port of its gRPC port
    http_address: str  # host:port of its HTTP port
    tls: bool  # both ports speak TLS

    @classmethod
    def from_proto(cls, response: pb.LookupResponse) -> LookupResult:
        """The answer to a Lookup call; ValueError for one this client cannot follow."""
        if response.action != pb.LOOKUP_ACTION_CONNECT:
            raise ValueError(
                f"the broker answered the lookup of {response.topic or 'the topic'} with "
                f"action {response.action}, which this client does not know: upgrade it"
            )
        return cls(
            response.topic,
            response.service_url,
            response.http_url,
            response.grpc_address,
            response.http_address,
            response.tls,
        )


# The project's text forms on the client's side: a position is "ledger:entry", a
# transaction id "most:least". The engines' Position and TxnId (managed_ledger) make
# and parse the same text; the client never imports the engines, so the forms are
# written twice and tests/stableline/test_text_forms.py holds both sides to one.
_POSITION_TEXT = re.compile(r"(-?[0-9]+):(-?[0-9]+)")  # ASCII digits, as the engines'


def position_text(position: MessageId) -> str:
    """ "ledger:entry" of the entry a message id names (its batch index left out)."""
    return f"{position[0]}:{position[1]}"


def parse_position(text: str) -> MessageId:
    """ "ledger:entry" -> the MessageId of that whole entry (batch index -1)."""
    match = _POSITION_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(
            f"not a position {text!r}: expected 'ledger_id:entry_id', two whole "
            "numbers (e.g. '3:120'; -1 stands before the first)"
        )
    return MessageId(int(match[1]), int(match[2]))


def txn_id_text(txn_id: tuple[int, int]) -> str:
    """ "most:least": how a transaction id (`txn.id`, `msg.txn_id()`) is written."""
    most_bits, least_bits = txn_id
    return f"{most_bits}:{least_bits}"


class DeliveredEntry:
    """What the messages of one delivered entry share; made once per entry.

    The batch is decoded only when a message's fields are first asked for, and not
    at all for a batch of plain messages of one length: their payloads are sliced.
    """

    __slots__ = (
        "_layout",
        "_messages",
        "entry_id",
        "ledger_id",
        "metadata",
        "num_messages",
        "partition",
        "payload",
        "redelivery_count",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        ledger_id: int,
        entry_id: int,
        metadata: pb.EntryMetadata,
        redelivery_count: int,
        payload: bytes,
    ):
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.metadata = metadata
        self.num_messages = metadata.num_messages
        self.redelivery_count = redelivery_count
        self.payload = payload
        self._layout = plain_layout(payload)
        self._messages = None
        self.partition = -1  # its partition's index when of a partitioned topic

    @classmethod
    def of(cls, topic: str, entry: pb.EntryDelivery, partition: int = -1) -> DeliveredEntry:
        delivered = cls(
            topic,
            entry.ledger_id,
            entry.entry_id,
            entry.metadata,
            entry.redelivery_count,
            entry.payload,
        )
        delivered.partition = partition
        return delivered

    def value(self, index: int) -> bytes:
        layout = self._layout
        if layout is None:
            return self.single(index).payload
        prefix_length, stride = layout
        start = index * stride
        return self.payload[start + prefix_length : start + stride]

    def values(self, indexes: Sequence[int]) -> list[bytes]:
        layout = self._layout
        if layout is None:
            messages = self._decoded()
            return [messages[i].payload for i in indexes]
        prefix_length, stride = layout
        payload = self.payload
        return [payload[i * stride + prefix_length : (i + 1) * stride] for i in indexes]

    def single(self, index: int) -> pb.SingleMessage:
        """Message `index` with its key, properties and event time (plain: none)."""
        if self._layout is not None:
            return _PLAIN
        return self._decoded()[index]

    def _decoded(self):
        if self._messages is None:
            self._messages = pb.MessageBatch.FromString(self.payload).messages
        return self._messages

    def message_count(self) -> int:
        """How many messages the batch holds (metadata may say 0 for old entries)."""
        if self._layout is not None:
            return len(self.payload) // self._layout[1]
        return len(self._decoded())


_PLAIN = pb.SingleMessage()


class Message(tuple):
    """One received message: (entry, index). Its id and fields are read from the entry
    lazily. A tuple, so a batch's messages are made in C (Messages.__iter__)."""

    __slots__ = ()

    def __new__(cls, entry: DeliveredEntry, index: int) -> Message:
        return tuple.__new__(cls, (entry, index))

    _entry = property(operator.itemgetter(0))
    _index = property(operator.itemgetter(1))

    def data(self) -> bytes:
        entry, index = self
        return entry.value(index)

    def value(self) -> bytes:
        entry, index = self
        return entry.value(index)

    def message_id(self) -> MessageId:
        entry, index = self
        if entry.partition >= 0:
            return PartitionedMessageId(entry.ledger_id, entry.entry_id, index, entry.partition)
        return tuple.__new__(MessageId, (entry.ledger_id, entry.entry_id, index))

    def partition_key(self) -> str | None:
        entry, index = self
        single = entry.single(index)
        return single.partition_key if single.has_partition_key else None

    def properties(self) -> dict[str, str]:
        entry, index = self
        return dict(entry.single(index).properties)

    def publish_timestamp(self) -> int:
        return self[0].metadata.publish_time_ms

    def event_timestamp(self) -> int:
        entry, index = self
        return entry.single(index).event_time_ms

    def txn_id(self) -> tuple[int, int] | None:
        metadata = self[0].metadata
        if not metadata.HasField("txn_id"):
            return None
        return (metadata.txn_id.most_bits, metadata.txn_id.least_bits)

    def producer_name(self) -> str:
        return self[0].metadata.producer_name

    def redelivery_count(self) -> int:
        return self[0].redelivery_count

    def topic_name(self) -> str:
        return self[0].topic

    def __getnewargs__(self):
        return tuple(self)

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self.value())} bytes)"


def message_indexes(entry: DeliveredEntry, skip: Iterable[int] = (), skip_through: int = -1):
    """The indexes of the entry's messages still to deliver: a range when none are
    left out, as is usual, so a run of messages costs nothing per message."""
    count = entry.message_count()
    skipped = set(skip)
    if not skipped:
        return range(skip_through + 1, count)
    return [i for i in range(skip_through + 1, count) if i not in skipped]


def messages_of(topic: str, entry: pb.EntryDelivery, skip_through: int = -1) -> list[Message]:
    """A delivered entry's messages, leaving out acknowledged indexes."""
    delivered = DeliveredEntry.of(topic, entry)
    indexes = message_indexes(delivered, entry.acked_batch_indexes, skip_through)
    return [Message(delivered, index) for index in indexes]


class Messages(Sequence[Message]):
    """What batch_receive returns, as Pulsar's Messages: a sequence of Message made
    only when looked at. It holds runs of (entry, indexes), so receiving and
    acknowledging a batch costs per entry, not per message; `values()` gives all
    payloads at once."""

    __slots__ = ("_length", "_runs")

    def __init__(self, runs: list[tuple[DeliveredEntry, Sequence[int]]] | None = None):
        self._runs = runs or []
        self._length = sum(len(indexes) for _, indexes in self._runs)

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Message]:
        for entry, indexes in self._runs:
            # Message's tuple.__new__ called from C: no Python frame per message.
            yield from map(tuple.__new__, repeat(Message), zip(repeat(entry), indexes))

    def __getitem__(self, item):
        if isinstance(item, slice):
            return list(self)[item]
        position = item + self._length if item < 0 else item
        if not 0 <= position < self._length:
            raise IndexError("Messages index out of range")
        for entry, indexes in self._runs:
            if position < len(indexes):
                return Message(entry, indexes[position])
            position -= len(indexes)
        raise AssertionError("unreachable: the runs add up to the length")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Messages | list | tuple):
            return len(self) == len(other) and all(
                a.message_id() == b.message_id() for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def values(self) -> list[bytes]:
        """Every message's payload, in order."""
        out: list[bytes] = []
        for entry, indexes in self._runs:
            out += entry.values(indexes)
        return out

    def runs(self) -> list[tuple[DeliveredEntry, Sequence[int]]]:
        return self._runs

    def __repr__(self) -> str:
        return f"Messages({self._length} messages in {len(self._runs)} entries)"


def service_addresses(url: str) -> tuple[tuple[str, ...], bool]:
    """A service URL naming one broker or several of a cluster ("h1:6650,h2:6650",
    one scheme for all) -> (each broker's host:port, tls)."""
    target, tls = parse_service_url(url)
    addresses = tuple(address.strip() for address in target.split(",") if address.strip())
    if not addresses:
        raise ValueError(f"service URL {url!r} names no broker, e.g. 127.0.0.1:6650")
    for address in addresses:
        parse_service_url(address)  # each needs a port
    return addresses, tls


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
