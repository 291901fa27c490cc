"""The Kafka message schemas this broker speaks, by API key and version.

Hand-written from the field lists of Kafka's message specs
(clients/src/main/resources/common/message/*.json): each request decodes into a
frozen value, each response encodes from one. Only the versions in SUPPORTED are
read or written; ApiVersions advertises exactly them, so clients never send
another. Versions are kept below the first flexible one except ApiVersions v3
(clients start there) and InitProducerId v2-4 (v3 lets a producer raise its own
epoch after an error, KIP-360, which librdkafka needs to abort such a transaction),
and Fetch stops at v11 (v13 names topics by id).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from stableline.broker.kafka.protocol.codec import ItemBudget, Reader, Writer


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36


# api key -> (min version, max version) served.
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (0, 8),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 2),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 2),
    ApiKey.END_TXN: (0, 2),
    ApiKey.TXN_OFFSET_COMMIT: (0, 2),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.SASL_AUTHENTICATE: (0, 1),
}
# The first flexible version of each API (compact types, tagged fields).
FIRST_FLEXIBLE: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.SASL_AUTHENTICATE: 2,
}


class ErrorCode(enum.IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    UNKNOWN_SERVER_ERROR = -1


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    """Every record, undecided and aborted ones included."""
    READ_COMMITTED = 1
    """Records below the last stable offset; the client drops aborted ones."""


def is_flexible(api_key: int, version: int) -> bool:
    first = FIRST_FLEXIBLE.get(api_key)
    return first is not None and version >= first


# ------------------------------------------------------------------ header


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def read_request_header(reader: Reader) -> RequestHeader:
    """Header v1 (v2 adds tagged fields when the request's version is flexible)."""
    api_key, api_version, correlation_id = reader.int16(), reader.int16(), reader.int32()
    client_id = reader.nullable_string()
    served = SUPPORTED.get(api_key)  # type: ignore[call-overload]
    # An unserved request is answered from these three fields alone: what follows
    # them is not read, so its header version does not matter.
    is_served = served is not None and served[0] <= api_version <= served[1]
    if is_served and is_flexible(api_key, api_version):
        reader.tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def response_header(header: RequestHeader) -> bytes:
    """Header v0, or v1 (tagged fields) for a flexible response but ApiVersions'."""
    writer = Writer().int32(header.correlation_id)
    if header.api_key != ApiKey.API_VERSIONS and is_flexible(header.api_key, header.api_version):
        writer.tagged_fields()
    return writer.getvalue()


# ------------------------------------------------------------------ ApiVersions


def read_api_versions(reader: Reader, version: int) -> None:
    if version >= 3:
        reader.string(compact=True)  # client software name
        reader.string(compact=True)  # and version
        reader.tagged_fields()


def write_api_versions(version: int, error: ErrorCode = ErrorCode.NONE) -> bytes:
    flexible = version >= 3
    writer = Writer().int16(error)

    def api(w: Writer, item: tuple[ApiKey, tuple[int, int]]) -> None:
        key, (low, high) = item
        w.int16(key).int16(low).int16(high)
        if flexible:
            w.tagged_fields()

    writer.array(sorted(SUPPORTED.items()), api, compact=flexible)
    if version >= 1:
        writer.int32(0)  # throttle time
    if flexible:
        writer.tagged_fields()
    return writer.getvalue()


# ------------------------------------------------------------------ Metadata


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: list[str] | None  # None: every topic
    allow_auto_topic_creation: bool


def read_metadata(
    reader: Reader, version: int, max_partitions: int | None = None
) -> MetadataRequest:
    """`max_partitions`: the most topics it may name (TooManyItems past it)."""
    topics = reader.nullable_array(
        lambda r: r.string(), budget=ItemBudget.of(max_partitions, "topics")
    )
    if version == 0 and topics == []:
        topics = None  # v0 asks for all with an empty list
    auto_create = reader.boolean() if version >= 4 else True
    if version >= 8:
        reader.boolean()  # include cluster authorized operations
        reader.boolean()  # include topic authorized operations
    return MetadataRequest(topics, auto_create)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    index: int
    leader: int  # node id; -1 when no live broker leads it (error says why)
    error: ErrorCode = ErrorCode.NONE
    leader_epoch: int = 0
    # Node ids holding copies, the leader first, and those in sync; empty: the
    # leader alone (none while it has no leader).
    replicas: tuple[int, ...] = ()
    in_sync: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    error: ErrorCode
    partitions: list[PartitionMetadata]


NO_AUTHORIZED_OPERATIONS = -2147483648  # "not asked for" in Metadata v8+


def write_metadata(
    version: int, brokers: list[BrokerInfo], controller: int, topics: list[TopicMetadata]
) -> bytes:
    writer = Writer()
    if version >= 3:
        writer.int32(0)

    def broker(w: Writer, b: BrokerInfo) -> None:
        w.int32(b.node_id).string(b.host).int32(b.port)
        if version >= 1:
            w.string(None)  # rack

    writer.array(brokers, broker)
    if version >= 2:
        writer.string("stableline")  # cluster id
    if version >= 1:
        writer.int32(controller)

    def partition(w: Writer, p: PartitionMetadata) -> None:
        w.int16(p.error).int32(p.index).int32(p.leader)
        if version >= 7:
            w.int32(p.leader_epoch)
        alone = [p.leader] if p.leader >= 0 else []
        w.array(list(p.replicas) or alone, Writer.int32)
        w.array(list(p.in_sync) or alone, Writer.int32)
        if version >= 5:
            w.array([], Writer.int32)  # offline replicas

    def topic(w: Writer, t: TopicMetadata) -> None:
        w.int16(t.error).string(t.name)
        if version >= 1:
            w.boolean(False)  # internal
        w.array(t.partitions, partition)
        if version >= 8:
            w.int32(NO_AUTHORIZED_OPERATIONS)

    writer.array(topics, topic)
    if version >= 8:
        writer.int32(NO_AUTHORIZED_OPERATIONS)
    return writer.getvalue()


# ------------------------------------------------------------------ Produce


@dataclass(frozen=True, slots=True)
class ProducePartition:
    index: int
    records: bytes | None


@dataclass(frozen=True, slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def read_produce(reader: Reader, version: int, max_partitions: int | None = None) -> ProduceRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    transactional_id = reader.nullable_string()
    acks, timeout_ms = reader.int16(), reader.int32()

    def partition(r: Reader) -> ProducePartition:
        return ProducePartition(r.int32(), r.nullable_bytes())

    topic_budget = ItemBudget.of(max_partitions, "topics")
    partition_budget = ItemBudget.of(max_partitions, "partitions")
    topics = reader.array(
        lambda r: ProduceTopic(r.string(), r.array(partition, budget=partition_budget)),
        budget=topic_budget,
    )
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


@dataclass(frozen=True, slots=True)
class ProducePartitionResult:
    index: int
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


def write_produce(version: int, results: dict[str, list[ProducePartitionResult]]) -> bytes:
    writer = Writer()

    def partition(w: Writer, p: ProducePartitionResult) -> None:
        w.int32(p.index).int16(p.error).int64(p.base_offset).int64(-1)  # log append time
        if version >= 5:
            w.int64(p.log_start_offset)
        if version >= 8:
            w.array([], Writer.int32).string(p.error_message)

    writer.array(list(results.items()), lambda w, t: w.string(t[0]).array(t[1], partition))
    writer.int32(0)  # throttle time
    return writer.getvalue()


# ------------------------------------------------------------------ Fetch


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: IsolationLevel
    topics: list[FetchTopic]


def read_fetch(reader: Reader, version: int, max_partitions: int | None = None) -> FetchRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    reader.int32()  # replica id
    max_wait_ms, min_bytes, max_bytes = reader.int32(), reader.int32(), reader.int32()
    level = reader.int8()
    if level not in (0, 1):
        level = 0
    if version >= 7:
        reader.int32()  # session id: sessions are not kept, every fetch is full
        reader.int32()  # session epoch

    def partition(r: Reader) -> FetchPartition:
        index = r.int32()
        if version >= 9:
            r.int32()  # current leader epoch
        offset = r.int64()
        if version >= 5:
            r.int64()  # follower's log start offset
        return FetchPartition(index, offset, r.int32())

    topic_budget = ItemBudget.of(max_partitions, "topics")
    partition_budget = ItemBudget.of(max_partitions, "partitions")
    topics = reader.array(
        lambda r: FetchTopic(r.string(), r.array(partition, budget=partition_budget)),
        budget=topic_budget,
    )
    if version >= 7:
        # Forgotten topics: sessions are not kept, but they are read under the bound.
        reader.array(
            lambda r: (r.string(), r.array(Reader.int32, budget=partition_budget)),
            budget=topic_budget,
        )
    if version >= 11:
        reader.string()  # rack id
    return FetchRequest(max_wait_ms, min_bytes, max_bytes, IsolationLevel(level), topics)


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResult:
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[AbortedTransaction] | None = None
    records: bytes = b""


def write_fetch(version: int, results: list[tuple[str, list[FetchPartitionResult]]]) -> bytes:
    writer = Writer().int32(0)  # throttle time
    if version >= 7:
        writer.int16(ErrorCode.NONE).int32(0)  # error, session id (none)

    def partition(w: Writer, p: FetchPartitionResult) -> None:
        w.int32(p.partition).int16(p.error).int64(p.high_watermark).int64(p.last_stable_offset)
        if version >= 5:
            w.int64(p.log_start_offset)
        w.array(p.aborted, lambda aw, a: aw.int64(a.producer_id).int64(a.first_offset))
        if version >= 11:
            w.int32(-1)  # preferred read replica
        w.bytes_(p.records)

    writer.array(results, lambda w, t: w.string(t[0]).array(t[1], partition))
    return writer.getvalue()


# ------------------------------------------------------------------ ListOffsets

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    isolation_level: IsolationLevel
    topics: list[tuple[str, list[tuple[int, int]]]]  # name, [(partition, timestamp)]


def read_list_offsets(
    reader: Reader, version: int, max_partitions: int | None = None
) -> ListOffsetsRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    reader.int32()  # replica id
    level = reader.int8() if version >= 2 else 0

    def partition(r: Reader) -> tuple[int, int]:
        index = r.int32()
        if version >= 4:
            r.int32()  # current leader epoch
        return index, r.int64()

    topic_budget = ItemBudget.of(max_partitions, "topics")
    partition_budget = ItemBudget.of(max_partitions, "partitions")
    topics = reader.array(
        lambda r: (r.string(), r.array(partition, budget=partition_budget)), budget=topic_budget
    )
    return ListOffsetsRequest(IsolationLevel(1 if level == 1 else 0), topics)


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    partition: int
    error: ErrorCode
    timestamp: int = -1
    offset: int = -1


def write_list_offsets(version: int, results: list[tuple[str, list[ListOffsetsResult]]]) -> bytes:
    writer = Writer()
    if version >= 2:
        writer.int32(0)

    def partition(w: Writer, p: ListOffsetsResult) -> None:
        w.int32(p.partition).int16(p.error).int64(p.timestamp).int64(p.offset)
        if version >= 4:
            w.int32(0)  # leader epoch

    writer.array(results, lambda w, t: w.string(t[0]).array(t[1], partition))
    return writer.getvalue()


# ------------------------------------------------------------------ InitProducerId


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str | None
    transaction_timeout_ms: int
    # v3+ (KIP-360): the producer's own id and epoch when it asks for its epoch to
    # be raised after an error; -1 for a new producer.
    producer_id: int = -1
    producer_epoch: int = -1


def read_init_producer_id(reader: Reader, version: int) -> InitProducerIdRequest:
    flexible = version >= 2
    transactional_id = reader.nullable_string(compact=flexible)
    timeout_ms = reader.int32()
    producer_id = producer_epoch = -1
    if version >= 3:
        producer_id, producer_epoch = reader.int64(), reader.int16()
    if flexible:
        reader.tagged_fields()
    return InitProducerIdRequest(transactional_id, timeout_ms, producer_id, producer_epoch)


def write_init_producer_id(
    version: int, error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1
) -> bytes:
    writer = Writer().int32(0).int16(error).int64(producer_id).int16(producer_epoch)
    if version >= 2:
        writer.tagged_fields()
    return writer.getvalue()


# ------------------------------------------------------------------ any other


def write_unsupported(header: RequestHeader) -> bytes:
    """For an API key or version not served: the error code alone. A client that
    asked ApiVersions first never sends one; a raw client reads the code."""
    return Writer().int16(ErrorCode.UNSUPPORTED_VERSION).getvalue()
