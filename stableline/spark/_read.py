"""Reading topics for Spark: plans on the driver, reads on the executors.

The driver pins, per topic, the end of the read at the bound for the isolation
level when the read starts (maxReadPosition for READ_COMMITTED, the LAC for
READ_UNCOMMITTED), so a batch is a consistent snapshot and every transaction
in it is decided. Each partition is a range of entries inside one ledger; an
executor reads it with Fetch (no subscription) and, at READ_COMMITTED, drops
the entries of the aborted transactions Fetch lists (ledgers whose abort index
is empty cost no lookup on the broker). Nothing here holds a connection
between calls, so plans pickle to executors in other processes.

The plan comes from one data-plane call, GetLastMessageId with the ledgers: a reader
with `consume` on the topic plans without admin rights, and the ledgers and the bound
are read at the same instant. In a cluster that call is answered by the topic's
owner (Connection.on_owner), whose connection the topic's partitions carry: each is
read where its ledgers are. Positions are the client's MessageId (batch index -1:
the whole entry), written "ledger:entry".
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from stableline._aborted_filter import AbortedFilter
from stableline._errors import BrokerUnavailable, NotOwner, TopicUnavailable
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline._types import (
    ISOLATION_LEVEL_PROTO,
    IsolationLevel,
    MessageId,
    parse_position,
    position_text,
    txn_id_text,
)
from stableline.spark._connection import RPC_TIMEOUT_S, Connection, result
from stableline.spark._options import EARLIEST, LATEST, SourceOptions
from stableline.wire import plain_layout

# Each column and its Spark type, in the order of the default schema.
COLUMN_TYPES = {
    "key": "string",
    "value": "binary",
    "topic": "string",
    "message_id": "string",
    "publish_time": "timestamp",
    "properties": "map<string,string>",
    "txn_id": "string",
}
FIELDS = tuple(COLUMN_TYPES)
SCHEMA = ", ".join(f"{name} {type_}" for name, type_ in COLUMN_TYPES.items())
ROWS_PER_RECORD_BATCH = 10_000
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_PROPERTIES = pa.map_(pa.string(), pa.string())
# Entries per Fetch: a client batch of 1,000 small messages is ~100 KB an entry.
FETCH_MAX_ENTRIES = 64
# A range's owner may change while it is read (a move, a failover): it is looked up
# again at most this many times, pausing (n x this) when the owner was not reached.
MAX_OWNER_MOVES = 5
OWNER_RETRY_PAUSE_S = 0.5
MIN_PARTITION_BYTES = 4 * 1024 * 1024
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1)]


def after(position: MessageId) -> MessageId:
    """The next entry of the same ledger."""
    return MessageId(position.ledger_id, position.entry_id + 1)


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries first..last (inclusive) of one ledger of one topic: a Spark partition."""

    connection: Connection
    topic: str
    isolation: int  # the isolation level's code on the wire (ISOLATION_LEVEL_PROTO)
    ledger_id: int
    first_entry: int
    last_entry: int


@dataclass(frozen=True, slots=True)
class TopicLayout:
    ledgers: tuple[tuple[int, int, int], ...]  # (ledger id, entries, bytes), oldest first
    bound: MessageId  # the last entry readable at the isolation level, now
    # The topic's owner, which answered; None: the service's first broker.
    owner: Connection | None = None

    @property
    def earliest(self) -> MessageId:
        return MessageId(self.ledgers[0][0], 0) if self.ledgers else after(self.bound)


def topic_layout(connection: Connection, topic: str, isolation: IsolationLevel) -> TopicLayout:
    """The topic's ledgers and its bound for the isolation level, asked of its owner
    (`connection` first: pass the owner's when it is known)."""
    request = pb.GetLastMessageIdRequest(topic=topic, include_ledgers=True)

    def ask(on: Connection) -> pb.GetLastMessageIdResponse:
        with on.channel() as channel:
            return on.call(broker_pb2_grpc.BrokerStub(channel).GetLastMessageId, request)

    response, owner = connection.on_owner(topic, ask)
    bound = (
        response.max_read_position
        if isolation is IsolationLevel.READ_COMMITTED
        else response.last_confirmed_entry
    )
    ledgers = tuple((i.ledger_id, i.entries, i.size_bytes) for i in response.ledgers if i.entries)
    return TopicLayout(ledgers, MessageId(bound.ledger_id, bound.entry_id), owner)


def resolve(layout: TopicLayout, text: str) -> MessageId:
    """'earliest', 'latest' or 'ledger:entry' as the first position to read (or not)."""
    if text == EARLIEST:
        return layout.earliest
    if text == LATEST:
        return after(layout.bound)
    return parse_position(text)


def _spans(layout: TopicLayout, start: MessageId, end: MessageId):
    """(ledger id, first, last entry, estimated bytes) of each ledger's part of
    [start, end), never past what the level may read now."""
    end = min(end, after(layout.bound))
    for ledger_id, entries, size in layout.ledgers:
        low = max(MessageId(ledger_id, 0), start)
        high = min(MessageId(ledger_id, entries), end)  # exclusive
        if low >= high:
            continue
        last = high.entry_id - 1 if high.ledger_id == ledger_id else entries - 1
        yield ledger_id, low.entry_id, last, size * (last - low.entry_id + 1) // entries


def partition_bytes(options: SourceOptions, total_bytes: int) -> int:
    """About how long a partition is: Spark's rule for files, the read split into at
    least minPartitions parts of at most maxBytesPerPartition, none under 4 MB. Each
    part costs a task and a Fetch stream, so fewer, longer ones read faster."""
    share = -(-total_bytes // options.min_partitions)
    return min(options.max_bytes_per_partition, max(MIN_PARTITION_BYTES, share))


def plan(
    options: SourceOptions,
    topic: str,
    layout: TopicLayout,
    start: MessageId,
    end: MessageId,
    target_bytes: int,
) -> list[LedgerRange]:
    """Partitions covering [start, end) of the topic, each within one ledger and at most
    options.max_entries_per_partition entries or about target_bytes long."""
    ranges = []
    for ledger_id, first_entry, last, size in _spans(layout, start, end):
        entries = last - first_entry + 1
        # As many entries as fit the byte budget (entries hold 1 to 1,000s of messages),
        # in parts of equal length.
        parts = max(-(-size // target_bytes), -(-entries // options.max_entries_per_partition))
        step = -(-entries // parts)
        for first in range(first_entry, last + 1, step):
            ranges.append(
                LedgerRange(
                    layout.owner or options.connection,
                    topic,
                    ISOLATION_LEVEL_PROTO[options.isolation],
                    ledger_id,
                    first,
                    min(first + step - 1, last),
                )
            )
    return ranges


def read_bytes(layout: TopicLayout, start: MessageId, end: MessageId) -> int:
    """About how many bytes of the topic [start, end) holds."""
    return sum(size for *_, size in _spans(layout, start, end))


def read_range(part: LedgerRange, fields: Sequence[str] = FIELDS) -> Iterator:
    """The rows of one partition, in log order, as Arrow record batches of the named
    columns (executor side)."""
    columns = _Columns(part.topic, fields)
    for entry in _entries(part):
        columns.add(entry)
        if len(columns) >= ROWS_PER_RECORD_BATCH:
            yield columns.take()
    if len(columns):
        yield columns.take()


def _entries(part: LedgerRange) -> Iterator[pb.EntryDelivery]:
    """The partition's entries that the isolation level delivers, in log order. A
    topic that moved while it is read (its owner stopped, was killed, or handed it
    over) is looked up again and read on from where it was, on its new owner: a
    replicated topic's entries keep their positions wherever it is served."""
    aborted = AbortedFilter()
    read_from = [part.first_entry]  # where the next read starts, past what was given
    connection = part.connection
    for attempt in range(MAX_OWNER_MOVES + 1):
        try:
            yield from _entries_on(part, connection, read_from, aborted)
            return
        except (NotOwner, BrokerUnavailable, TopicUnavailable) as error:
            if attempt == MAX_OWNER_MOVES:
                raise
            if not isinstance(error, NotOwner):
                # A retry's backoff while another broker takes the topic over.
                time.sleep(OWNER_RETRY_PAUSE_S * (attempt + 1))
            connection = part.connection.lookup(part.topic)


def _entries_on(
    part: LedgerRange, connection: Connection, read_from: list[int], aborted: AbortedFilter
) -> Iterator[pb.EntryDelivery]:
    """_entries on one broker from read_from[0] on, which it moves past each entry it
    has given (or that the isolation level drops)."""
    committed_only = part.isolation == pb.ISOLATION_LEVEL_READ_COMMITTED
    next_entry = read_from[0]
    with connection.channel(CHANNEL_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        def fetch(first_entry: int):
            """Asked now, answered later: the broker reads the next range meanwhile."""
            request = pb.FetchRequest(
                topic=part.topic,
                start=pb.Position(ledger_id=part.ledger_id, entry_id=first_entry),
                max_entries=min(FETCH_MAX_ENTRIES, part.last_entry - first_entry + 1),
                isolation_level=part.isolation,
            )
            return stub.Fetch.future(request, timeout=RPC_TIMEOUT_S, metadata=connection.metadata)

        pending = fetch(next_entry)
        while pending is not None:
            response = result(pending)
            following = response.next_position
            if following.ledger_id != part.ledger_id:
                pending = None  # the ledger ended (the rest of the range were markers)
                ends_at = part.last_entry + 1
            elif following.entry_id <= next_entry:
                raise RuntimeError(
                    f"{part.topic}: the broker's bound is behind the planned range at "
                    f"{position_text(MessageId(part.ledger_id, next_entry))}"
                )
            else:
                next_entry = following.entry_id
                ends_at = next_entry
                pending = fetch(next_entry) if next_entry <= part.last_entry else None
            if committed_only:
                aborted.add(response.aborted)
            for entry in response.entries:
                if entry.ledger_id != part.ledger_id or entry.entry_id > part.last_entry:
                    break
                if committed_only and aborted.is_aborted(entry):
                    continue
                yield entry
            # Every entry before it is given: a read elsewhere starts there.
            read_from[0] = ends_at


def _slice_plain(payloads: list[bytes], layout: tuple[int, int]):
    """The messages' payloads of batches that plain_layout gave this layout, sliced out
    in Arrow: the joined batches are records of one stride."""
    prefix_length, stride = layout
    joined = b"".join(payloads)
    count = len(joined) // stride
    if stride == prefix_length:  # empty payloads
        return pa.array([b""] * count, pa.binary())
    records = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(stride), count, [None, pa.py_buffer(joined)]
    )
    return pc.binary_slice(records, prefix_length, stride).cast(pa.binary())


class _Columns:
    """Rows gathered entry by entry, handed to Spark as one Arrow record batch.

    The work is per entry, not per message: the fields an entry's messages share
    (ids, publish time, transaction) are kept once as a run and expanded in Arrow;
    the payloads of consecutive plain batches are sliced out together, undecoded.
    """

    def __init__(self, topic: str, fields: Sequence[str] = FIELDS):
        unknown = set(fields) - set(FIELDS)
        assert not unknown, unknown
        self.topic = topic
        self.fields = tuple(fields)
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self.run_ends: list[int] = []  # rows so far at the end of each entry
        self.id_prefixes: list[str] = []  # "ledger:entry:" of each entry
        self.published: list[int] = []  # microseconds, each entry
        self.txn_ids: list[str | None] = []
        self.value_chunks: list = []
        # Keys and properties of entries with metadata; plain entries are a row count.
        self.key_chunks: list = []
        self.property_chunks: list = []
        self.plain_payloads: list[bytes] = []  # consecutive plain batches, one layout
        self.plain_layout: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.rows

    def add(self, entry: pb.EntryDelivery) -> None:
        payload = entry.payload
        layout = plain_layout(payload)
        if layout is not None:
            if layout != self.plain_layout:
                self._flush_plain()
                self.plain_layout = layout
            self.plain_payloads.append(payload)
            count = len(payload) // layout[1]
        else:
            self._flush_plain()
            count = self._add_decoded([payload])
        if not count:
            return
        metadata = entry.metadata
        self.rows += count
        self.run_ends.append(self.rows)
        self.id_prefixes.append(f"{entry.ledger_id}:{entry.entry_id}:")
        self.published.append(metadata.publish_time_ms * 1000)
        txn = metadata.txn_id
        self.txn_ids.append(
            txn_id_text((txn.most_bits, txn.least_bits)) if metadata.HasField("txn_id") else None
        )

    def _add_decoded(self, payloads: list[bytes]) -> int:
        """Decodes batches message by message (keys, properties); the row count."""
        messages = [m for p in payloads for m in pb.MessageBatch.FromString(p).messages]
        self.value_chunks.append(pa.array([m.payload for m in messages], pa.binary()))
        self.key_chunks.append(
            pa.array(
                [m.partition_key if m.has_partition_key else None for m in messages],
                pa.string(),
            )
        )
        self.property_chunks.append(
            pa.array([list(m.properties.items()) for m in messages], _PROPERTIES)
        )
        return len(messages)

    def _flush_plain(self) -> None:
        if not self.plain_payloads:
            return
        payloads, self.plain_payloads = self.plain_payloads, []
        values = _slice_plain(payloads, self.plain_layout)
        self.value_chunks.append(values)
        self.key_chunks.append(len(values))
        self.property_chunks.append(len(values))

    def take(self):
        self._flush_plain()
        build = {  # only the columns asked for are made
            "key": lambda: _concat(self.key_chunks, lambda n: pa.nulls(n, pa.string())),
            "value": lambda: pa.concat_arrays(self.value_chunks),
            "topic": lambda: pa.repeat(self.topic, self.rows),
            "message_id": self._message_ids,
            "publish_time": lambda: self._runs(self.published, _TIMESTAMP),
            "properties": lambda: _concat(self.property_chunks, _empty_properties),
            "txn_id": lambda: self._runs(self.txn_ids, pa.string()),
        }
        batch = pa.RecordBatch.from_arrays(
            [build[name]() for name in self.fields], names=list(self.fields)
        )
        self._clear()
        return batch

    def _runs(self, values: list, type_):
        """One value an entry, repeated for each of the entry's rows."""
        runs = pa.RunEndEncodedArray.from_arrays(
            pa.array(self.run_ends, pa.int32()), pa.array(values, type_)
        )
        return pc.run_end_decode(runs)

    def _message_ids(self):
        """ledger:entry:index, joined in Arrow."""
        starts = [0, *self.run_ends[:-1]]
        indexes = pa.concat_arrays(
            [_index_strings(end - start) for start, end in zip(starts, self.run_ends, strict=True)]
        )
        return pc.binary_join_element_wise(self._runs(self.id_prefixes, pa.string()), indexes, "")


def _concat(chunks: list, make_plain):
    """Chunks as one array, each count of plain rows made by make_plain(count)."""
    if all(isinstance(chunk, int) for chunk in chunks):
        return make_plain(sum(chunks))
    return pa.concat_arrays(
        [make_plain(chunk) if isinstance(chunk, int) else chunk for chunk in chunks]
    )


def _empty_properties(count: int):
    no_strings = pa.array([], pa.string())
    return pa.MapArray.from_arrays(pa.repeat(0, count + 1).cast(pa.int32()), no_strings, no_strings)


_index_cache: list = []


def _index_strings(count: int):
    """ "0".."count-1" as an Arrow string array, from one cached array."""
    if not _index_cache or len(_index_cache[0]) < count:
        size = max(count, 4096)
        _index_cache[:] = [pa.array([str(i) for i in range(size)], pa.string())]
    return _index_cache[0].slice(0, count)
