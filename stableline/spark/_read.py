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

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from stableline._aborted_filter import AbortedFilter
from stableline._errors import from_rpc_error
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2_grpc
from stableline._proto import broker_pb2 as pb
from stableline._types import IsolationLevel
from stableline.spark._options import EARLIEST, LATEST, SourceOptions

SCHEMA = (
    "key string, value binary, topic string, message_id string, publish_time timestamp, "
    "properties map<string,string>, txn_id string"
)
FETCH_MAX_ENTRIES = 1_000
RPC_TIMEOUT_S = 30.0


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
    ledgers: tuple[tuple[int, int], ...]  # (ledger id, entries), oldest first
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
    ledgers = tuple((i["ledgerId"], i["entries"]) for i in internal["ledgers"] if i["entries"])
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
    options.max_entries_per_partition entries long."""
    end = min(end, layout.bound.after())  # never past what the level may read now
    ranges = []
    for ledger_id, entries in layout.ledgers:
        low = max(Position(ledger_id, 0), start)
        high = min(Position(ledger_id, entries), end)  # exclusive
        if low >= high:
            continue
        last = high.entry_id - 1 if high.ledger_id == ledger_id else entries - 1
        step = options.max_entries_per_partition
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


def read_range(part: LedgerRange) -> Iterator[tuple]:
    """The rows of one partition, in log order (executor side)."""
    aborted = AbortedFilter()
    committed_only = part.isolation == IsolationLevel.READ_COMMITTED.value
    next_entry = part.first_entry
    with grpc.insecure_channel(part.service) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        while next_entry <= part.last_entry:
            request = pb.FetchRequest(
                topic=part.topic,
                start=pb.Position(ledger_id=part.ledger_id, entry_id=next_entry),
                max_entries=min(FETCH_MAX_ENTRIES, part.last_entry - next_entry + 1),
                isolation_level=part.isolation,
            )
            response = _rpc(stub.Fetch, request)
            if committed_only:
                aborted.add(response.aborted)
            for entry in response.entries:
                if entry.ledger_id != part.ledger_id or entry.entry_id > part.last_entry:
                    break
                if committed_only and aborted.is_aborted(entry):
                    continue
                yield from rows_of(part.topic, entry)
            following = response.next_position
            if following.ledger_id != part.ledger_id:
                break  # the ledger ended (the rest of the range were markers)
            if following.entry_id <= next_entry:
                raise RuntimeError(
                    f"{part.topic}: the broker's bound is behind the planned range at "
                    f"{part.ledger_id}:{next_entry}"
                )
            next_entry = following.entry_id


def rows_of(topic: str, entry: pb.EntryDelivery) -> Iterator[tuple]:
    metadata = entry.metadata
    published = datetime.datetime.fromtimestamp(metadata.publish_time_ms / 1000, datetime.UTC)
    txn_id = (
        f"{metadata.txn_id.most_bits}:{metadata.txn_id.least_bits}"
        if metadata.HasField("txn_id")
        else None
    )
    prefix = f"{entry.ledger_id}:{entry.entry_id}:"
    for index, message in enumerate(pb.MessageBatch.FromString(entry.payload).messages):
        yield (
            message.partition_key if message.has_partition_key else None,
            message.payload,
            topic,
            prefix + str(index),
            published,
            dict(message.properties),
            txn_id,
        )
