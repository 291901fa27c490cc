"""The "stableline" PySpark data source: batch and streaming reads of topics."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from stableline.spark._options import SourceOptions, parse_options
from stableline.spark._read import (
    SCHEMA,
    LedgerRange,
    Position,
    plan,
    read_range,
    resolve,
    topic_layout,
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

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_options(self.options, streaming=True))


def _partitions(options: SourceOptions, start: dict, end: dict, layouts: dict) -> list:
    parts = []
    for topic in options.topics:
        layout = layouts[topic]
        parts += plan(
            options, topic, layout, Position.parse(start[topic]), Position.parse(end[topic])
        )
    return [_Partition(part) for part in parts]


class BatchReader(DataSourceReader):
    """A consistent snapshot: each topic's end is pinned when the read is planned."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        layouts = {
            t: topic_layout(self.options.service, t, self.options.isolation)
            for t in self.options.topics
        }
        start = {t: str(resolve(layouts[t], self.options.starting[t])) for t in layouts}
        end = {t: str(resolve(layouts[t], self.options.ending[t])) for t in layouts}
        return _partitions(self.options, start, end, layouts)

    def read(self, partition: _Partition) -> Iterator[tuple]:
        return read_range(partition.part)


class StreamReader(DataSourceStreamReader):
    """Offsets are {topic: "ledger:entry"}, the next position to read; each micro-batch
    ends at the bound for the isolation level (the stable position for READ_COMMITTED)."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def _layouts(self) -> dict:
        return {
            t: topic_layout(self.options.service, t, self.options.isolation)
            for t in self.options.topics
        }

    def initialOffset(self) -> dict:
        layouts = self._layouts()
        return {t: str(resolve(layouts[t], self.options.starting[t])) for t in layouts}

    def latestOffset(self) -> dict:
        return {t: str(layout.bound.after()) for t, layout in self._layouts().items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return _partitions(self.options, start, end, self._layouts())

    def read(self, partition: _Partition) -> Iterator[tuple]:
        return read_range(partition.part)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets are Spark's checkpoint; the broker keeps no state."""
