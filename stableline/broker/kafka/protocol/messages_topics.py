"""The schemas of CreateTopics (v0-4) and DeleteTopics (v0-3), from Kafka's message
specs (CreateTopicsRequest/Response.json, DeleteTopicsRequest/Response.json): the
versions below the first flexible one, which is what librdkafka (CreateTopics up to
v4, DeleteTopics up to v1) and kafka-python ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

from stableline.broker.kafka.protocol.codec import ItemBudget, Reader, Writer
from stableline.broker.kafka.protocol.messages import ErrorCode

# ------------------------------------------------------------------ CreateTopics


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    name: str
    num_partitions: int  # -1: the broker's default
    replication_factor: int  # -1: the broker's default
    # Partition index -> broker ids, when the client places partitions itself.
    assignments: list[tuple[int, list[int]]]
    configs: list[tuple[str, str | None]]


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: list[CreatableTopic]
    timeout_ms: int
    validate_only: bool


def read_create_topics(
    reader: Reader, version: int, max_topics: int | None = None
) -> CreateTopicsRequest:
    """`max_topics`: the most topics it may name (TooManyItems past it)."""

    def assignment(r: Reader) -> tuple[int, list[int]]:
        return r.int32(), r.array(Reader.int32)

    def config(r: Reader) -> tuple[str, str | None]:
        return r.string(), r.nullable_string()

    def topic(r: Reader) -> CreatableTopic:
        return CreatableTopic(
            r.string(), r.int32(), r.int16(), r.array(assignment), r.array(config)
        )

    topics = reader.array(topic, budget=ItemBudget.of(max_topics, "topics"))
    timeout_ms = reader.int32()
    validate_only = reader.boolean() if version >= 1 else False
    return CreateTopicsRequest(topics, timeout_ms, validate_only)


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error: ErrorCode
    error_message: str | None = None


def write_create_topics(version: int, results: list[TopicResult]) -> bytes:
    writer = Writer()
    if version >= 2:
        writer.int32(0)  # throttle time

    def result(w: Writer, r: TopicResult) -> None:
        w.string(r.name).int16(r.error)
        if version >= 1:
            w.string(r.error_message)

    writer.array(results, result)
    return writer.getvalue()


# ------------------------------------------------------------------ DeleteTopics


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    names: list[str]
    timeout_ms: int


def read_delete_topics(
    reader: Reader, version: int, max_topics: int | None = None
) -> DeleteTopicsRequest:
    """`max_topics`: the most topics it may name (TooManyItems past it)."""
    names = reader.array(lambda r: r.string(), budget=ItemBudget.of(max_topics, "topics"))
    return DeleteTopicsRequest(names, reader.int32())


def write_delete_topics(version: int, results: list[TopicResult]) -> bytes:
    """v0-3 carry no error message: the broker logs why."""
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time
    writer.array(results, lambda w, r: w.string(r.name).int16(r.error))
    return writer.getvalue()
