"""The Kafka schemas of consumer groups and their committed offsets, by version.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups and ListGroups, hand-written from the field lists of
Kafka's message specs (clients/src/main/resources/common/message/*.json) for the
versions messages.SUPPORTED serves, all below each API's first flexible version:
librdkafka, kafka-python and aiokafka pick the highest version both sides speak.
Each request decodes into a frozen value and each response encodes from one; a
field a version lacks takes Kafka's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from stableline.broker.kafka.protocol.codec import ItemBudget, MalformedRequest, Reader, Writer
from stableline.broker.kafka.protocol.messages import ErrorCode

T = TypeVar("T")

# ------------------------------------------------------------------ FindCoordinator

GROUP_KEY = 0
TRANSACTION_KEY = 1


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key: str
    key_type: int  # GROUP_KEY or TRANSACTION_KEY (anything else is refused)


def read_find_coordinator(reader: Reader, version: int) -> FindCoordinatorRequest:
    key = reader.string()
    key_type = reader.int8() if version >= 1 else GROUP_KEY
    return FindCoordinatorRequest(key, key_type)


def write_find_coordinator(
    version: int,
    error: ErrorCode,
    node_id: int = -1,
    host: str = "",
    port: int = -1,
    message: str | None = None,
) -> bytes:
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time
    writer.int16(error)
    if version >= 1:
        writer.string(message)
    return writer.int32(node_id).string(host).int32(port).getvalue()


# ------------------------------------------------------------------ JoinGroup


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), preferred first


def read_join_group(reader: Reader, version: int) -> JoinGroupRequest:
    group_id, session_timeout_ms = reader.string(), reader.int32()
    # v0 has no rebalance timeout: Kafka takes the session timeout for it.
    rebalance_timeout_ms = reader.int32() if version >= 1 else session_timeout_ms
    member_id = reader.string()
    group_instance_id = reader.nullable_string() if version >= 5 else None
    protocol_type = reader.string()
    protocols = reader.array(lambda r: (r.string(), r.nullable_bytes() or b""))
    return JoinGroupRequest(
        group_id,
        session_timeout_ms,
        rebalance_timeout_ms,
        member_id,
        group_instance_id,
        protocol_type,
        tuple(protocols),
    )


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ErrorCode
    generation_id: int = -1
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()  # the leader's alone


def write_join_group(version: int, response: JoinGroupResponse) -> bytes:
    writer = Writer()
    if version >= 2:
        writer.int32(0)  # throttle time
    writer.int16(response.error).int32(response.generation_id)
    # Not nullable before v7: "" stands for none.
    writer.string(response.protocol_name or "")
    writer.string(response.leader).string(response.member_id)

    def member(w: Writer, joined: JoinedMember) -> None:
        w.string(joined.member_id)
        if version >= 5:
            w.string(joined.group_instance_id)
        w.bytes_(joined.metadata)

    writer.array(list(response.members), member)
    return writer.getvalue()


# ------------------------------------------------------------------ SyncGroup


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    assignments: tuple[tuple[str, bytes], ...]  # (member id, assignment): the leader's


def read_sync_group(reader: Reader, version: int) -> SyncGroupRequest:
    group_id, generation_id, member_id = reader.string(), reader.int32(), reader.string()
    group_instance_id = reader.nullable_string() if version >= 3 else None
    assignments = reader.array(lambda r: (r.string(), r.nullable_bytes() or b""))
    return SyncGroupRequest(
        group_id, generation_id, member_id, group_instance_id, tuple(assignments)
    )


def write_sync_group(version: int, error: ErrorCode, assignment: bytes = b"") -> bytes:
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time
    return writer.int16(error).bytes_(assignment).getvalue()


# ------------------------------------------------------------------ Heartbeat


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


def read_heartbeat(reader: Reader, version: int) -> HeartbeatRequest:
    group_id, generation_id, member_id = reader.string(), reader.int32(), reader.string()
    group_instance_id = reader.nullable_string() if version >= 3 else None
    return HeartbeatRequest(group_id, generation_id, member_id, group_instance_id)


def write_error_only(version: int, error: ErrorCode, throttle_from: int = 1) -> bytes:
    """Heartbeat's response (and any other that is a throttle time and an error)."""
    writer = Writer()
    if version >= throttle_from:
        writer.int32(0)
    return writer.int16(error).getvalue()


# ------------------------------------------------------------------ LeaveGroup


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]  # v0-2 name exactly one


def read_leave_group(reader: Reader, version: int) -> LeaveGroupRequest:
    group_id = reader.string()
    if version <= 2:
        return LeaveGroupRequest(group_id, (LeavingMember(reader.string(), None),))
    members = reader.array(lambda r: LeavingMember(r.string(), r.nullable_string()))
    return LeaveGroupRequest(group_id, tuple(members))


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


def write_leave_group(version: int, error: ErrorCode, members: list[LeftMember]) -> bytes:
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time
    writer.int16(error)
    if version >= 3:

        def member(w: Writer, left: LeftMember) -> None:
            w.string(left.member_id).string(left.group_instance_id).int16(left.error)

        writer.array(members, member)
    return writer.getvalue()


# ------------------------------------------------------------------ OffsetCommit


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """One partition's offset to commit."""

    topic: str
    partition: int
    offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int  # -1: a commit from outside group management
    member_id: str
    group_instance_id: str | None
    offsets: tuple[PartitionOffset, ...]


def read_offset_commit(
    reader: Reader, version: int, max_partitions: int | None = None
) -> OffsetCommitRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    group_id = reader.string()
    partitions = ItemBudget.of(max_partitions, "partitions")
    generation_id = reader.int32() if version >= 1 else -1
    member_id = reader.string() if version >= 1 else ""
    group_instance_id = reader.nullable_string() if version >= 7 else None
    if 2 <= version <= 4:
        reader.int64()  # retention time: offsets here live as long as their subscription

    def topic(r: Reader) -> list[PartitionOffset]:
        name = r.string()

        def partition(pr: Reader) -> PartitionOffset:
            index, offset = pr.int32(), pr.int64()
            if version >= 6:
                pr.int32()  # committed leader epoch
            if version == 1:
                pr.int64()  # commit timestamp
            return PartitionOffset(name, index, offset, pr.nullable_string())

        return r.array(partition, budget=partitions)

    topics = reader.array(topic, budget=ItemBudget.of(max_partitions, "topics"))
    offsets = tuple(offset for partitions in topics for offset in partitions)
    return OffsetCommitRequest(group_id, generation_id, member_id, group_instance_id, offsets)


def _by_topic(results: list[tuple[str, int, T]]) -> list[tuple[str, list[tuple[int, T]]]]:
    """(topic, partition, value) rows grouped by topic, in first-seen order."""
    grouped: dict[str, list[tuple[int, T]]] = {}
    for topic, partition, value in results:
        grouped.setdefault(topic, []).append((partition, value))
    return list(grouped.items())


def write_offset_commit(version: int, results: list[tuple[str, int, ErrorCode]]) -> bytes:
    writer = Writer()
    if version >= 3:
        writer.int32(0)  # throttle time

    def topic(w: Writer, item: tuple[str, list[tuple[int, ErrorCode]]]) -> None:
        w.string(item[0]).array(item[1], lambda pw, p: pw.int32(p[0]).int16(p[1]))

    writer.array(_by_topic(results), topic)
    return writer.getvalue()


# ------------------------------------------------------------------ OffsetFetch


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None: every partition with an offset


def read_offset_fetch(
    reader: Reader, version: int, max_partitions: int | None = None
) -> OffsetFetchRequest:
    """`max_partitions`: the most topics, and partitions, it may name (TooManyItems)."""
    group_id = reader.string()
    topics_bound = ItemBudget.of(max_partitions, "topics")
    bound = ItemBudget.of(max_partitions, "partitions")
    topics = reader.nullable_array(
        lambda r: (r.string(), r.array(Reader.int32, budget=bound)), budget=topics_bound
    )
    if topics is None:
        if version < 2:
            raise MalformedRequest("OffsetFetch asks for every topic (null) only from v2")
        return OffsetFetchRequest(group_id, None)
    # Each partition once, in the order first named (a partition named twice is
    # answered once, as Kafka keys them).
    partitions = tuple(
        dict.fromkeys((name, index) for name, indexes in topics for index in indexes)
    )
    return OffsetFetchRequest(group_id, partitions)


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    offset: int  # -1: none committed
    metadata: str | None
    error: ErrorCode


def write_offset_fetch(
    version: int,
    results: list[tuple[str, int, FetchedOffset]],
    error: ErrorCode = ErrorCode.NONE,
) -> bytes:
    writer = Writer()
    if version >= 3:
        writer.int32(0)  # throttle time

    def partition(w: Writer, item: tuple[int, FetchedOffset]) -> None:
        index, fetched = item
        w.int32(index).int64(fetched.offset)
        if version >= 5:
            w.int32(-1)  # committed leader epoch
        w.string(fetched.metadata).int16(fetched.error)

    def topic(w: Writer, item: tuple[str, list[tuple[int, FetchedOffset]]]) -> None:
        w.string(item[0]).array(item[1], partition)

    writer.array(_by_topic(results), topic)
    if version >= 2:
        writer.int16(error)
    return writer.getvalue()


# ------------------------------------------------------------------ DescribeGroups


def read_describe_groups(reader: Reader, version: int) -> list[str]:
    groups = reader.array(lambda r: r.string())
    if version >= 3:
        reader.boolean()  # include authorized operations: not kept
    return groups


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str = ""
    protocol_data: str = ""  # the chosen protocol's name while Stable
    members: tuple[DescribedMember, ...] = ()


def write_describe_groups(version: int, groups: list[DescribedGroup]) -> bytes:
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time

    def member(w: Writer, described: DescribedMember) -> None:
        w.string(described.member_id)
        if version >= 4:
            w.string(described.group_instance_id)
        w.string(described.client_id).string(described.client_host)
        w.bytes_(described.metadata).bytes_(described.assignment)

    def group(w: Writer, described: DescribedGroup) -> None:
        w.int16(described.error).string(described.group_id).string(described.state)
        w.string(described.protocol_type).string(described.protocol_data)
        w.array(list(described.members), member)
        if version >= 3:
            w.int32(-2147483648)  # authorized operations: not asked

    writer.array(groups, group)
    return writer.getvalue()


# ------------------------------------------------------------------ ListGroups


def read_list_groups(reader: Reader, version: int) -> None:
    """v0-2 carry no field."""


def write_list_groups(version: int, error: ErrorCode, groups: list[tuple[str, str]]) -> bytes:
    """`groups`: (group id, protocol type)."""
    writer = Writer()
    if version >= 1:
        writer.int32(0)  # throttle time
    writer.int16(error)
    writer.array(groups, lambda w, g: w.string(g[0]).string(g[1]))
    return writer.getvalue()
