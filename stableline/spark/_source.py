"""The "stableline" PySpark data source: batch and streaming reads, transactional writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from stableline._errors import StableLineError
from stableline._types import parse_position, position_text
from stableline.spark._options import OptionError, SourceOptions, parse_options
from stableline.spark._partitions import expand_read, resolve_write
from stableline.spark._read import (
    COLUMN_TYPES,
    SCHEMA,
    LedgerRange,
    after,
    partition_bytes,
    plan,
    read_bytes,
    read_range,
    resolve,
    topic_layout,
)
from stableline.spark._write import (
    TaskReport,
    Transaction,
    WriteOptions,
    new_write_id,
    parse_write_options,
    write_partition,
)


class _Partition(InputPartition):
    def __init__(self, part: LedgerRange):
        super().__init__(part)
        self.part = part


class StablelineDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "stableline"

    def schema(self) -> str:
        return SCHEMA

    # On the driver: a partitioned topic is read as its partitions and written with
    # its count (stableline.spark._partitions).
    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(expand_read(parse_options(self.options)), read_columns(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = expand_read(parse_options(self.options, streaming=True))
        return StreamReader(options, read_columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(resolve_write(parse_write_options(self.options)), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(resolve_write(parse_write_options(self.options)), schema)


def read_columns(schema: StructType) -> tuple[str, ...]:
    """The columns a read makes: those of a schema the user gave (any of ours, any
    order), else all. Spark's Python sources have no pruning hook; a narrower schema is
    how a job that needs only `value` skips building the rest."""
    columns = []
    for field in schema.fields:
        expected = COLUMN_TYPES.get(field.name)
        if expected is None:
            raise OptionError(
                f"schema: {field.name!r} is not a stableline column; "
                f"choose from {', '.join(COLUMN_TYPES)}"
            )
        if field.dataType.simpleString() != expected:
            raise OptionError(
                f"schema: column {field.name!r} is {expected}, not {field.dataType.simpleString()}"
            )
        columns.append(field.name)
    return tuple(columns)


def _layouts(options: SourceOptions, owners: dict) -> dict:
    """Each topic's layout, asked of its owner; `owners` (topic -> connection) says
    where to ask first and learns where each topic was answered."""
    layouts = {}
    for topic in options.topics:
        layout = topic_layout(owners.get(topic, options.connection), topic, options.isolation)
        owners[topic] = layout.owner
        layouts[topic] = layout
    return layouts


def _partitions(options: SourceOptions, start: dict, end: dict, layouts: dict) -> list:
    bounds = {t: (parse_position(start[t]), parse_position(end[t])) for t in options.topics}
    total = sum(read_bytes(layouts[t], *bounds[t]) for t in options.topics)
    target = partition_bytes(options, total)
    parts = []
    for topic in options.topics:
        parts += plan(options, topic, layouts[topic], *bounds[topic], target)
    return [_Partition(part) for part in parts]


class BatchReader(DataSourceReader):
    """A consistent snapshot: each topic's end is pinned when the read is planned."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...]):
        self.options = options
        self.columns = columns

    def partitions(self) -> Sequence[InputPartition]:
        layouts = _layouts(self.options, {})
        start = {t: position_text(resolve(layouts[t], self.options.starting[t])) for t in layouts}
        end = {t: position_text(resolve(layouts[t], self.options.ending[t])) for t in layouts}
        return _partitions(self.options, start, end, layouts)

    def read(self, partition: _Partition) -> Iterator[tuple]:
        return read_range(partition.part, self.columns)


class StreamReader(DataSourceStreamReader):
    """Offsets are {topic: "ledger:entry"}, the next position to read; each micro-batch
    ends at the bound for the isolation level (the stable position for READ_COMMITTED)."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...]):
        self.options = options
        self.columns = columns
        # Topic -> the connection of its owner, found at the first plan and kept.
        self.owners: dict = {}

    def _layouts(self) -> dict:
        return _layouts(self.options, self.owners)

    def initialOffset(self) -> dict:
        layouts = self._layouts()
        return {t: position_text(resolve(layouts[t], self.options.starting[t])) for t in layouts}

    def latestOffset(self) -> dict:
        return {t: position_text(after(layout.bound)) for t, layout in self._layouts().items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return _partitions(self.options, start, end, self._layouts())

    def read(self, partition: _Partition) -> Iterator[tuple]:
        return read_range(partition.part, self.columns)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets are Spark's checkpoint; the broker keeps no state."""


@dataclass(frozen=True)
class _TaskDone(WriterCommitMessage):
    report: TaskReport


def _columns(schema: StructType) -> frozenset[str]:
    names = frozenset(schema.fieldNames())
    if "value" not in names:
        raise OptionError(
            f"a DataFrame written to stableline needs a 'value' column; it has {sorted(names)}"
        )
    return names & {"value", "key", "properties"}


class BatchWriter(DataSourceWriter):
    """One transaction for the whole write: all rows visible together, or none."""

    def __init__(self, options: WriteOptions, schema: StructType):
        self.options = options
        self.columns = _columns(schema)
        self.write_id = new_write_id()
        self.transaction = Transaction.open(options.connection, options.txn_timeout_ms)

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        # Unique per write, so a later write never meets these producers' sequences.
        producer_name = f"spark-{self.write_id}-{partition}"
        report = write_partition(
            self.options, self.transaction.id, producer_name, iterator, self.columns, partition
        )
        return _TaskDone(report)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        state = self.transaction.end(commit=True)
        if state != "COMMITTED":
            raise StableLineError(f"the write's transaction ended {state}, not COMMITTED")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Best effort: a transaction that cannot be ended now times out into an abort.
        with contextlib.suppress(StableLineError):
            self.transaction.end(commit=False)


class StreamWriter(DataSourceStreamWriter):
    """One transaction per micro-batch, named after the query and the batch, so that a
    batch Spark replays after a failure finds its transaction: committed, it is not
    written again; still open, the tasks rejoin it (de-duplicated); aborted, it is
    written afresh in a new one."""

    def __init__(self, options: WriteOptions, schema: StructType):
        self.options = options
        self.columns = _columns(schema)

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        query = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        if query is None or batch is None:
            raise StableLineError("the streaming writer runs only in a streaming query")
        partition = context.partitionId()
        name = f"spark-stream-{query}-{batch}-{self.options.topic}"
        transaction = Transaction.open(self.options.connection, self.options.txn_timeout_ms, name)
        if transaction.state != "OPEN":  # COMMITTING or COMMITTED: a replayed batch
            return _TaskDone(TaskReport(partition, 0, 0, 0, transaction.id, True))
        # Unique per transaction: a batch written afresh after an abort starts anew.
        producer_name = f"spark-{transaction.id[0]}-{transaction.id[1]}-{partition}"
        report = write_partition(
            self.options, transaction.id, producer_name, iterator, self.columns, partition
        )
        return _TaskDone(report)

    def _transaction(self, messages: list) -> tuple[tuple[int, int] | None, bool]:
        reports = [m.report for m in messages if m is not None]
        ids = {r.txn_id for r in reports}
        assert len(ids) <= 1, f"one micro-batch wrote into several transactions: {ids}"
        return (ids.pop() if ids else None), any(r.already_committed for r in reports)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        txn_id, already_committed = self._transaction(messages)
        if txn_id is None or already_committed:
            return
        state = Transaction(self.options.connection, txn_id).end(commit=True)
        if state != "COMMITTED":
            raise StableLineError(f"micro-batch {batchId}'s transaction ended {state}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        txn_id, already_committed = self._transaction(messages)
        if txn_id is None or already_committed:
            return
        with contextlib.suppress(StableLineError):
            Transaction(self.options.connection, txn_id).end(commit=False)
