"""The schemas of Kafka's transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn
and EndTxn, which a producer sends its transaction coordinator, and
TxnOffsetCommit, which it sends the consumer group's coordinator
(InitProducerId is in messages.py).

Hand-written from Kafka's message specs (AddPartitionsToTxnRequest.json,
AddOffsetsToTxnRequest.json, EndTxnRequest.json, TxnOffsetCommitRequest.json and
their responses). Served below the first flexible version (3 for all four):
librdkafka asks AddPartitionsToTxn and AddOffsetsToTxn v0, EndTxn v0-1 and
TxnOffsetCommit v0-3, kafka-python up to v3 of each, and both take the highest
served. Version 2 of the first three is version 1's layout; a coordinator may
answer PRODUCER_FENCED from it on (older versions hear INVALID_PRODUCER_EPOCH, as
from Kafka). TxnOffsetCommit v2 adds each offset's leader epoch (ignored: a
partition has one leader here); v3's group generation and member id are not asked
for, as Kafka's group coordinator does not check them below v3.
"""

from __future__ import annotations

from dataclasses import dataclass

from stableline.broker.kafka.protocol.codec import ItemBudget, Reader, Writer
from stableline.broker.kafka.protocol.messages import ErrorCode

# The first version whose clients understand PRODUCER_FENCED, by API (Kafka's
# KafkaApis converts it to INVALID_PRODUCER_EPOCH below these).
PRODUCER_FENCED_SINCE = {
    "add_partitions_to_txn": 2,
    "add_offsets_to_txn": 2,
    "end_txn": 2,
    "init_producer_id": 4,
    # TxnOffsetCommit goes to the group coordinator, which answers
    # INVALID_PRODUCER_EPOCH at every version.
    "txn_offset_commit": 1 << 15,
}


def fenced_error(api: str, version: int) -> ErrorCode:
    """The error that tells a producer of `api` at `version` a newer one fenced it."""
    if version >= PRODUCER_FENCED_SINCE[api]:
        return ErrorCode.PRODUCER_FENCED
    return ErrorCode.INVALID_PRODUCER_EPOCH


# ------------------------------------------------------------------ AddPartitionsToTxn


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]  # (topic, partition indexes)


def read_add_partitions_to_txn(
    reader: Reader, version: int, max_partitions: int | None = None
) -> AddPartitionsToTxnRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    transactional_id = reader.string()
    producer_id, producer_epoch = reader.int64(), reader.int16()
    partitions = ItemBudget.of(max_partitions, "partitions")
    topics = reader.array(
        lambda r: (r.string(), r.array(Reader.int32, budget=partitions)),
        budget=ItemBudget.of(max_partitions, "topics"),
    )
    return AddPartitionsToTxnRequest(transactional_id, producer_id, producer_epoch, topics)


def write_add_partitions_to_txn(
    version: int, results: list[tuple[str, list[tuple[int, ErrorCode]]]]
) -> bytes:
    """`results`: (topic, [(partition, error)]) for every partition asked."""
    writer = Writer().int32(0)  # throttle time

    def partition(w: Writer, item: tuple[int, ErrorCode]) -> None:
        w.int32(item[0]).int16(item[1])

    writer.array(results, lambda w, t: w.string(t[0]).array(t[1], partition))
    return writer.getvalue()


# ------------------------------------------------------------------ EndTxn


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


def read_end_txn(reader: Reader, version: int) -> EndTxnRequest:
    return EndTxnRequest(reader.string(), reader.int64(), reader.int16(), reader.boolean())


def write_end_txn(version: int, error: ErrorCode) -> bytes:
    return Writer().int32(0).int16(error).getvalue()


# ------------------------------------------------------------------ AddOffsetsToTxn


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


def read_add_offsets_to_txn(reader: Reader, version: int) -> AddOffsetsToTxnRequest:
    return AddOffsetsToTxnRequest(reader.string(), reader.int64(), reader.int16(), reader.string())


def write_add_offsets_to_txn(version: int, error: ErrorCode) -> bytes:
    return Writer().int32(0).int16(error).getvalue()


# ------------------------------------------------------------------ TxnOffsetCommit


@dataclass(frozen=True, slots=True)
class TxnOffset:
    topic: str
    partition: int
    offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: list[TxnOffset]


def read_txn_offset_commit(
    reader: Reader, version: int, max_partitions: int | None = None
) -> TxnOffsetCommitRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    transactional_id, group_id = reader.string(), reader.string()
    partitions = ItemBudget.of(max_partitions, "partitions")
    producer_id, producer_epoch = reader.int64(), reader.int16()

    def topic(r: Reader) -> list[TxnOffset]:
        name = r.string()

        def partition(pr: Reader) -> TxnOffset:
            index, offset = pr.int32(), pr.int64()
            if version >= 2:
                pr.int32()  # committed leader epoch: one leader per partition here
            return TxnOffset(name, index, offset, pr.nullable_string())

        return r.array(partition, budget=partitions)

    topics = reader.array(topic, budget=ItemBudget.of(max_partitions, "topics"))
    offsets = [offset for each in topics for offset in each]
    return TxnOffsetCommitRequest(transactional_id, group_id, producer_id, producer_epoch, offsets)


def write_txn_offset_commit(version: int, results: list[tuple[str, int, ErrorCode]]) -> bytes:
    """`results`: (topic, partition, error) for every partition asked, in order."""
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for topic, partition, error in results:
        by_topic.setdefault(topic, []).append((partition, error))
    writer = Writer().int32(0)  # throttle time

    def partition(w: Writer, item: tuple[int, ErrorCode]) -> None:
        w.int32(item[0]).int16(item[1])

    writer.array(list(by_topic.items()), lambda w, t: w.string(t[0]).array(t[1], partition))
    return writer.getvalue()
