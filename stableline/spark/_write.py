"""Writing a DataFrame to a topic: all rows in one transaction, every row once.

To a partitioned topic, each row goes where a producer would send it (by its key's
hash, else whole batches in turn; see _routed), and a task writes each topic
partition's share as the same named producer, numbered per partition.

The driver opens one transaction when the write is planned; every task writes
its partition into it and the driver commits it when Spark commits the job, or
aborts it when the job fails (a driver that dies leaves it to time out): all
rows become visible to READ_COMMITTED together, or none do. A task writes as
the named producer `spark-{write id}-{partition}`, in batches of a fixed number
of rows numbered from 0, so a retried task (same partition, same rows in the
same order) learns from the broker which batches its failed attempt already
wrote and sends only the rest: the broker's de-duplication by producer name
and sequence id keeps every row once. In a cluster a task writes each topic on its
owner: a broker that does not own it refuses the stream's opening (NotOwner, before
any row is sent), and the task opens it again where a lookup says
(Connection.on_owner).
"""

from __future__ import annotations

import dataclasses
import queue
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import grpc

from stableline._errors import (
    BrokerUnavailable,
    NotOwner,
    StableLineError,
    TopicUnavailable,
    TransactionEnded,
    from_code,
    from_rpc_error,
)
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline._routing import key_partition
from stableline.partitions import partition_topic
from stableline.spark._connection import Connection
from stableline.spark._options import OptionError, parse_connection
from stableline.topic_name import InvalidTopicNameError, TopicName
from stableline.wire import encode_message, plain_prefix

# A commit outlives its coordinator shard's failover (the leader's session lapsing,
# then the take-over: seconds); past this the job fails, and is aborted.
END_DEADLINE_S = 60.0
END_RETRY_PAUSE_S = 0.1
END_RETRY_PAUSE_MAX_S = 1.0

DEFAULT_ROWS_PER_BATCH = 1000
DEFAULT_TXN_TIMEOUT_MS = 600_000
# Batches sent and not yet acknowledged, per task.
MAX_IN_FLIGHT = 32
_END = object()


@dataclass(frozen=True, slots=True)
class WriteOptions:
    connection: Connection
    topic: str
    rows_per_batch: int
    txn_timeout_ms: int
    # The topic's partition count, learnt on the driver (0: not partitioned).
    partitions: int = 0


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    connection = parse_connection(options)
    topic = options.get("topic")
    if not topic:
        raise OptionError("option 'topic' is required: the topic to write to")
    try:
        topic = str(TopicName.parse(topic))
    except InvalidTopicNameError as error:
        raise OptionError(f"option 'topic': {error}") from None
    numbers = {}
    for option, default in (
        ("rowsPerBatch", DEFAULT_ROWS_PER_BATCH),
        ("transactionTimeoutMs", DEFAULT_TXN_TIMEOUT_MS),
    ):
        text = str(options.get(option, default))
        if not text.isdigit() or int(text) < 1:
            raise OptionError(f"option '{option}' must be a whole number >= 1, not {text!r}")
        numbers[option] = int(text)
    return WriteOptions(connection, topic, numbers["rowsPerBatch"], numbers["transactionTimeoutMs"])


@dataclass(frozen=True, slots=True)
class TaskReport:
    """What a task tells the driver (Spark's WriterCommitMessage)."""

    partition: int
    rows: int
    batches_sent: int
    batches_already_written: int
    txn_id: tuple[int, int] = (0, 0)
    already_committed: bool = False  # a replayed micro-batch: nothing written again


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transaction for a whole write (or a micro-batch), by id: pickles anywhere."""

    connection: Connection
    id: tuple[int, int]
    state: str = "OPEN"

    @classmethod
    def open(cls, connection: Connection, timeout_ms: int, name: str = "") -> Transaction:
        """A new transaction, or with a name the one of that name while it is open or
        committed (its state says which)."""
        request = pb.NewTransactionRequest(timeout_ms=timeout_ms, name=name)

        def ask(broker: Connection) -> pb.NewTransactionResponse:
            with broker.channel() as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)
                return broker.call(stub.NewTransaction, request)

        response = connection.any_broker(ask)
        if response.coordinator_address:
            # In a cluster: ended on the broker leading the transaction's shard.
            connection = dataclasses.replace(connection, target=response.coordinator_address)
        return cls(
            connection, (response.txn_id.most_bits, response.txn_id.least_bits), response.state
        )

    def end(self, commit: bool, deadline_s: float = END_DEADLINE_S) -> str:
        """Commit or abort; its state. In a cluster the end follows the transaction's
        coordinator shard: a broker that names the shard's leader is asked next, one
        not reached is passed over for another of the service's brokers (which ends it
        as the shard's new leader, or names it), until `deadline_s` has passed. An end
        asked again after its first ask was lost is answered from the coordinator's
        record of how it ended."""
        action = pb.TXN_ACTION_COMMIT if commit else pb.TXN_ACTION_ABORT
        txn_id = pb.TxnId(most_bits=self.id[0], least_bits=self.id[1])
        request = pb.EndTransactionRequest(txn_id=txn_id, action=action)
        deadline = time.monotonic() + deadline_s
        connection = self.connection
        asked_before = False
        pause_s = END_RETRY_PAUSE_S
        while True:
            try:
                return _broker_call(connection, "EndTransaction", request).state
            except TransactionEnded:
                if asked_before:
                    state = _recorded_state(connection, txn_id)
                    if state == ("COMMITTED" if commit else "ABORTED"):
                        return state
                raise
            except (NotOwner, BrokerUnavailable, TopicUnavailable) as error:
                if time.monotonic() >= deadline:
                    raise
                asked_before = True
                if isinstance(error, NotOwner) and error.leader_address:
                    if error.leader_address != connection.target:
                        connection = connection.to(error.leader_address)
                        continue  # the answer is there: no pause
                elif isinstance(error, BrokerUnavailable):
                    connection = connection.to(_next_seed(connection))
                # A retry's backoff while the shard finds its new leader.
                time.sleep(pause_s)
                pause_s = min(pause_s * 2, END_RETRY_PAUSE_MAX_S)


def _broker_call(connection: Connection, method: str, request):
    with connection.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return connection.call(getattr(stub, method), request)


def _recorded_state(connection: Connection, txn_id: pb.TxnId) -> str | None:
    """How the coordinator recorded the transaction ("COMMITTED", ...); None unread."""
    try:
        response = _broker_call(
            connection, "GetTransaction", pb.GetTransactionRequest(txn_id=txn_id)
        )
    except StableLineError:
        return None
    return pb.TxnState.Name(response.state).removeprefix("TXN_STATE_")


def _next_seed(connection: Connection) -> str:
    """The service's broker after the one `connection` calls (itself when alone)."""
    seeds = connection.seeds or (connection.target,)
    if connection.target not in seeds:
        return seeds[0]
    return seeds[(seeds.index(connection.target) + 1) % len(seeds)]


def _encode(row, columns: frozenset[str]) -> bytes:
    value = row["value"]
    if value is None:
        raise ValueError("a row to write has a null 'value'")
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, bytes):
        value = bytes(value)
    key = row["key"] if "key" in columns else None
    properties = row["properties"] if "properties" in columns else None
    if key is None and not properties:
        return plain_prefix(len(value)) + value
    return encode_message(value, dict(properties or {}), key, 0)


def _batches(rows: Iterator, columns: frozenset[str], size: int) -> Iterator[tuple[int, bytes]]:
    """(number of rows, MessageBatch payload) per `size` rows: the same cut on every attempt."""
    encoded: list[bytes] = []
    for row in rows:
        encoded.append(_encode(row, columns))
        if len(encoded) == size:
            yield len(encoded), b"".join(encoded)
            encoded = []
    if encoded:
        yield len(encoded), b"".join(encoded)


def _routed(
    rows: Iterator, columns: frozenset[str], options: WriteOptions, partition: int
) -> dict[int, list[bytes]]:
    """A task's encoded rows by the topic partition each goes to: a keyed row to its
    key's, keyless rows `rows_per_batch` at a time to one partition, then the next
    (starting at the task's own, so tasks spread out). The same rows in the same
    order route the same way, so a retried task de-duplicates as on a plain topic."""
    count = options.partitions
    routed: dict[int, list[bytes]] = {}
    keyless: list[bytes] = []
    turn = partition % count
    for row in rows:
        key = row["key"] if "key" in columns else None
        if key is None:
            keyless.append(_encode(row, columns))
            if len(keyless) == options.rows_per_batch:
                routed.setdefault(turn, []).extend(keyless)
                keyless, turn = [], (turn + 1) % count
        else:
            routed.setdefault(key_partition(key, count), []).append(_encode(row, columns))
    if keyless:
        routed.setdefault(turn, []).extend(keyless)
    return routed


def _chunks(encoded: list[bytes], size: int) -> Iterator[tuple[int, bytes]]:
    for first in range(0, len(encoded), size):
        chunk = encoded[first : first + size]
        yield len(chunk), b"".join(chunk)


def write_partition(
    options: WriteOptions,
    txn_id: tuple[int, int],
    producer_name: str,
    rows: Iterator,
    columns: frozenset[str],
    partition: int,
) -> TaskReport:
    """Write one partition's rows into the transaction (executor side); to a
    partitioned topic, each topic partition's share over a stream of its own."""
    if not options.partitions:
        batches = _batches(rows, columns, options.rows_per_batch)
        return _write_topic(options, options.topic, txn_id, producer_name, batches, partition)
    reports = [
        _write_topic(
            options,
            str(partition_topic(TopicName.parse(options.topic), index)),
            txn_id,
            producer_name,
            _chunks(encoded, options.rows_per_batch),
            partition,
        )
        for index, encoded in sorted(_routed(rows, columns, options, partition).items())
    ]
    return TaskReport(
        partition,
        sum(r.rows for r in reports),
        sum(r.batches_sent for r in reports),
        sum(r.batches_already_written for r in reports),
        txn_id,
    )


def _write_topic(
    options: WriteOptions,
    topic: str,
    txn_id: tuple[int, int],
    producer_name: str,
    batches: Iterator[tuple[int, bytes]],
    partition: int,
) -> TaskReport:
    """Write numbered batches to one topic into the transaction, on the topic's owner."""
    report, _owner = options.connection.on_owner(
        topic,
        lambda connection: _write_on(connection, topic, txn_id, producer_name, batches, partition),
    )
    return report


def _write_on(
    connection: Connection,
    topic: str,
    txn_id: tuple[int, int],
    producer_name: str,
    batches: Iterator[tuple[int, bytes]],
    partition: int,
) -> TaskReport:
    """Write numbered batches to one topic on `connection`'s broker; a refused opening
    (NotOwner among others) raises typed before anything of `batches` is taken."""
    requests: queue.Queue = queue.Queue()
    requests.put(pb.ProduceRequest(open=pb.ProducerOpen(topic=topic, producer_name=producer_name)))

    def request_stream() -> Iterator[pb.ProduceRequest]:
        while (request := requests.get()) is not _END:
            yield request

    with connection.channel() as channel:
        responses = broker_pb2_grpc.BrokerStub(channel).Produce(
            request_stream(), metadata=connection.metadata
        )
        try:
            try:
                opened = next(responses).opened
            except grpc.RpcError as error:
                raise from_rpc_error(error) from None
            already = opened.last_sequence_id  # batches 0..already: written before
            sent = skipped = total_rows = in_flight = 0
            try:
                for sequence_id, (count, payload) in enumerate(batches):
                    total_rows += count
                    if sequence_id <= already:
                        skipped += 1
                        continue
                    if in_flight == MAX_IN_FLIGHT:
                        _check(next(responses))  # the oldest receipt, before sending more
                        in_flight -= 1
                    requests.put(_send(producer_name, txn_id, sequence_id, count, payload))
                    sent += 1
                    in_flight += 1
            finally:
                # Also when the rows fail midway: what was sent is made durable, so a
                # retry of this task finds it written and does not send it again.
                requests.put(_END)
                for response in responses:
                    _check(response)
        except grpc.RpcError as error:
            raise StableLineError(f"writing to {topic}: {error.details()}") from None
        finally:
            requests.put(_END)
    return TaskReport(partition, total_rows, sent, skipped, txn_id)


def _send(
    producer_name: str, txn_id: tuple[int, int], sequence_id: int, count: int, payload: bytes
) -> pb.ProduceRequest:
    metadata = pb.EntryMetadata(
        num_messages=count,
        publish_time_ms=int(time.time() * 1000),
        producer_name=producer_name,
        sequence_id=sequence_id,
        txn_id=pb.TxnId(most_bits=txn_id[0], least_bits=txn_id[1]),
    )
    return pb.ProduceRequest(
        send=pb.ProducerSend(sequence_id=sequence_id, metadata=metadata, payload=payload)
    )


def _check(response: pb.ProduceResponse) -> None:
    if response.WhichOneof("response") == "error":
        raise from_code(response.error.code, response.error.message)


def new_write_id() -> str:
    return uuid.uuid4().hex[:12]
