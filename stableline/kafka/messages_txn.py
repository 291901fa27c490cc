"""The schemas of Kafka's transaction APIs a producer calls on its transaction
coordinator: AddPartitionsToTxn and EndTxn (InitProducerId is in messages.py).

Hand-written from Kafka's message specs (AddPartitionsToTxnRequest.json,
EndTxnRequest.json and their responses). Served below the first flexible version
(3 for both): librdkafka asks AddPartitionsToTxn v0 and EndTxn v0-1, kafka-python
up to v3 of each and takes the highest served. Version 2 of both is version 1's
layout; a coordinator may answer PRODUCER_FENCED from it on (older versions hear
INVALID_PRODUCER_EPOCH, as from Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass

from stableline.kafka.codec import Reader, Writer
from stableline.kafka.messages import ErrorCode

# The first version whose clients understand PRODUCER_FENCED, by API (Kafka's
# KafkaApis converts it to INVALID_PRODUCER_EPOCH below these).
PRODUCER_FENCED_SINCE = {"add_partitions_to_txn": 2, "end_txn": 2, "init_producer_id": 4}


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


def read_add_partitions_to_txn(reader: Reader, version: int) -> AddPartitionsToTxnRequest:
    transactional_id = reader.string()
    producer_id, producer_epoch = reader.int64(), reader.int16()
    topics = reader.array(lambda r: (r.string(), r.array(Reader.int32)))
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
