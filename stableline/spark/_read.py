"""Reading topics for Spark: plans on the driver, reads on the executors.

The driver pins, per topic, the end of the read at the bound for the isolation
level when the read starts (maxReadPosition for READ_COMMITTED, the LAC for
READ_UNCOMMITTED), so a batch is a consistent snapshot and every transaction
in it is decided. Each partition is a range of entries inside one ledger; an
executor reads it with Fetch (no subscription) and, at READ_COMMITTED, drops
the entries of the aborted transactions Fetch lists (ledgers whose abort index
is empty cost no lookup on the broker). Nothing here holds a connection
between calls, so plans pickle to executors in other processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from stableline._aborted_filter import AbortedFilter
from stableline._errors import from_rpc_error
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2_grpc
from stableline._proto import broker_pb2 as pb
from stableline._types import IsolationLevel
from stableline.aio._batch import plain_prefix
from stableline.spark._options import EARLIEST, LATEST, SourceOptions

FIELDS = ["key", "value", "topic", "message_id", "publish_time", "properties", "txn_id"]
SCHEMA = (
    "key string, value binary, topic string, message_id string, publish_time timestamp, "
    "properties map<string,string>, txn_id string"
)
ROWS_PER_RECORD_BATCH = 10_000
_NO_PROPERTIES: list = []
# Entries per Fetch: a client batch of 1,000 small messages is ~100 KB an entry.
FETCH_MAX_ENTRIES = 64
RPC_TIMEOUT_S = 30.0
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1)]


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """(ledger_id, entry_id), ordered; a plain value that pickles to executors."""

    ledger_id: int
    entry_id: int

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger_id, entry_id = text.split(":")
        return cls(int(ledger_id), int(entry_id))

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    def after(self) -> Position:
        return Position(self.ledger_id, self.entry_id + 1)


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries first..last (inclusive) of one ledger of one topic: a Spark partition."""

    service: str
    topic: str
    isolation: int  # IsolationLevel value
    ledger_id: int
    first_entry: int
    last_entry: int


@dataclass(frozen=True, slots=True)
class TopicLayout:
    ledgers: tuple[tuple[int, int, int], ...]  # (ledger id, entries, bytes), oldest first
    bound: Position  # the last position readable at the isolation level, now

    @property
    def earliest(self) -> Position:
        return Position(self.ledgers[0][0], 0) if self.ledgers else self.bound.after()


def _rpc(call, *args):
    try:
        return call(*args, timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None


def topic_layout(service: str, topic: str, isolation: IsolationLevel) -> TopicLayout:
    """The topic's ledgers and its bound for the isolation level, asked of the broker."""
    with grpc.insecure_channel(service) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        request = admin_pb2.TopicRequest(topic=topic)
        internal = json.loads(_rpc(admin.GetInternalStats, request).json)
        buffer = json.loads(_rpc(admin.GetTransactionBufferStats, request).json)
    bound_text = (
        buffer["maxReadPosition"]
        if isolation is IsolationLevel.READ_COMMITTED
        else buffer["lastConfirmedEntry"]
    )
    ledgers = tuple(
        (i["ledgerId"], i["entries"], i["size"]) for i in internal["ledgers"] if i["entries"]
    )
    return TopicLayout(ledgers, Position.parse(bound_text))


def resolve(layout: TopicLayout, text: str) -> Position:
    """'earliest', 'latest' or 'ledger:entry' as the first position to read (or not)."""
    if text == EARLIEST:
        return layout.earliest
    if text == LATEST:
        return layout.bound.after()
    return Position.parse(text)


def plan(
    options: SourceOptions, topic: str, layout: TopicLayout, start: Position, end: Position
) -> list[LedgerRange]:
    """Partitions covering [start, end) of the topic, each within one ledger and at most
    options.max_entries_per_partition entries or about max_bytes_per_partition long."""
    end = min(end, layout.bound.after())  # never past what the level may read now
    ranges = []
    for ledger_id, entries, size in layout.ledgers:
        low = max(Position(ledger_id, 0), start)
        high = min(Position(ledger_id, entries), end)  # exclusive
        if low >= high:
            continue
        last = high.entry_id - 1 if high.ledger_id == ledger_id else entries - 1
        # As many entries as fit the byte budget (entries hold 1 to 1,000s of messages).
        step = min(
            options.max_entries_per_partition,
            max(1, options.max_bytes_per_partition * entries // max(size, 1)),
        )
        for first in range(low.entry_id, last + 1, step):
            ranges.append(
                LedgerRange(
                    options.service,
                    topic,
                    options.isolation.value,
                    ledger_id,
                    first,
                    min(first + step - 1, last),
                )
            )
    return ranges


def read_range(part: LedgerRange) -> Iterator:
    """The rows of one partition, in log order, as Arrow record batches (executor side)."""
    columns = _Columns(part.topic)
    for entry in _entries(part):
        columns.add(entry)
        if len(columns) >= ROWS_PER_RECORD_BATCH:
            yield columns.take()
    if len(columns):
        yield columns.take()


def _entries(part: LedgerRange) -> Iterator[pb.EntryDelivery]:
    """The partition's entries that the isolation level delivers, in log order."""
    aborted = AbortedFilter()
    committed_only = part.isolation == IsolationLevel.READ_COMMITTED.value
    next_entry = part.first_entry
    with grpc.insecure_channel(part.service, options=CHANNEL_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        def fetch(first_entry: int):
            """Asked now, answered later: the broker reads the next range meanwhile."""
            request = pb.FetchRequest(
                topic=part.topic,
                start=pb.Position(ledger_id=part.ledger_id, entry_id=first_entry),
                max_entries=min(FETCH_MAX_ENTRIES, part.last_entry - first_entry + 1),
                isolation_level=part.isolation,
            )
            return stub.Fetch.future(request, timeout=RPC_TIMEOUT_S)

        pending = fetch(next_entry)
        while pending is not None:
            response = _rpc(pending.result)
            following = response.next_position
            if following.ledger_id != part.ledger_id:
                pending = None  # the ledger ended (the rest of the range were markers)
            elif following.entry_id <= next_entry:
                raise RuntimeError(
                    f"{part.topic}: the broker's bound is behind the planned range at "
                    f"{part.ledger_id}:{next_entry}"
                )
            else:
                next_entry = following.entry_id
                pending = fetch(next_entry) if next_entry <= part.last_entry else None
            if committed_only:
                aborted.add(response.aborted)
            for entry in response.entries:
                if entry.ledger_id != part.ledger_id or entry.entry_id > part.last_entry:
                    break
                if committed_only and aborted.is_aborted(entry):
                    continue
                yield entry


def _plain_size(values: list[bytes]) -> int:
    """How long a MessageBatch of just these payloads is."""
    lengths = set(map(len, values))
    if len(lengths) == 1:  # the usual case: one size, one prefix length
        (length,) = lengths
        return len(values) * (len(plain_prefix(length)) + length)
    return sum(len(plain_prefix(len(v))) + len(v) for v in values)


class _Columns:
    """Rows gathered column by column, handed to Spark as one Arrow record batch."""

    def __init__(self, topic: str):
        self.topic = topic
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self.keys: list[str | None] = []
        self.value_chunks: list = []  # Arrow binary arrays, one an entry
        # message_id is ledger:entry:index, joined in Arrow (C) when the batch is taken.
        self.ledger_ids: list[int] = []
        self.entry_ids: list[int] = []
        self.indexes: list[int] = []
        self.published: list[int] = []
        self.properties: list[list[tuple[str, str]]] = []
        self.txn_ids: list[str | None] = []

    def __len__(self) -> int:
        return self.rows

    def add(self, entry: pb.EntryDelivery) -> None:
        import pyarrow as pa

        metadata = entry.metadata
        txn_id = (
            f"{metadata.txn_id.most_bits}:{metadata.txn_id.least_bits}"
            if metadata.HasField("txn_id")
            else None
        )
        messages = pb.MessageBatch.FromString(entry.payload).messages
        count = len(messages)
        values = [m.payload for m in messages]
        if _plain_size(values) == len(entry.payload):
            # Nothing but payloads (as producers write plain messages): any key or
            # property would have made the batch longer. Skips two reads a message.
            self.keys += [None] * count
            self.properties += [_NO_PROPERTIES] * count
        else:
            self.keys += [m.partition_key if m.has_partition_key else None for m in messages]
            self.properties += [list(p.items()) if (p := m.properties) else [] for m in messages]
        self.value_chunks.append(pa.array(values, pa.binary()))
        self.rows += count
        self.ledger_ids += [entry.ledger_id] * count
        self.entry_ids += [entry.entry_id] * count
        self.indexes += range(count)
        self.published += [metadata.publish_time_ms * 1000] * count
        self.txn_ids += [txn_id] * count

    def take(self):
        import pyarrow as pa
        import pyarrow.compute as pc

        message_ids = pc.binary_join_element_wise(
            *(
                pa.array(ids, pa.int64()).cast(pa.string())
                for ids in (self.ledger_ids, self.entry_ids, self.indexes)
            ),
            ":",
        )
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.string()),
                pa.concat_arrays(self.value_chunks),
                pa.array([self.topic] * self.rows, pa.string()),
                message_ids,
                pa.array(self.published, pa.timestamp("us", tz="UTC")),
                pa.array(self.properties, pa.map_(pa.string(), pa.string())),
                pa.array(self.txn_ids, pa.string()),
            ],
            names=FIELDS,
        )
        self._clear()
        return batch
