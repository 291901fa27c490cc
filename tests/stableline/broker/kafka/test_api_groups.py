"""Consumer groups on a real broker with real clients (confluent-kafka's librdkafka,
kafka-python and aiokafka): a group splits a topic's partitions, rebalances when a member
leaves or stops heartbeating, and every message is consumed exactly once across
its members; DescribeGroups and ListGroups show it; bad requests get Kafka's error
codes (raw frames, so each code is seen as sent) and the broker stays up."""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from stableline.broker.kafka.protocol.messages import ErrorCode
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S, KafkaBroker
from tests.stableline.broker.kafka.group_clients import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    GroupMember,
    create_partitioned_topic,
    group_broker,
    produce_to_partitions,
    wait_for,
)
from tests.stableline.broker.kafka.test_bad_input import (
    api_versions_works,
    connect,
    receive_frame,
    send_frame,
)

CLIENTS = ["confluent", "kafka-python", "aiokafka"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with group_broker(tmp_path / "data").running() as started:
        yield started


@pytest.mark.parametrize("client", CLIENTS)
def test_two_members_split_four_partitions_and_one_takes_all_when_the_other_leaves(broker, client):
    topic = create_partitioned_topic(broker.bootstrap, "orders", 4)
    expected = produce_to_partitions(broker.bootstrap, topic, range(0, 50))
    members = [GroupMember(client, broker.bootstrap, "split", topic.topics) for _ in range(2)]
    first, second = members
    for member in members:
        member.start()
    consumed = lambda: len(first.records) + len(second.records)  # noqa: E731

    def split() -> bool:
        halves = first.assignment, second.assignment
        return (
            consumed() >= len(expected)
            and [len(half) for half in halves] == [2, 2]
            and first.assignment | second.assignment == set(topic.partitions)
        )

    wait_for(split, "both members to hold two partitions each", members=members)
    second.stop()  # leaves the group: the first takes every partition
    expected += produce_to_partitions(broker.bootstrap, topic, range(50, 100))
    wait_for(
        lambda: consumed() >= len(expected) and first.assignment == set(topic.partitions),
        "the remaining member to take all four partitions and consume the rest",
        members=[first],
    )
    first.stop()
    got = first.values() + second.values()
    duplicates = [value for value, count in Counter(got).items() if count > 1]
    assert not duplicates, f"consumed more than once: {duplicates[:5]}"
    assert sorted(got) == sorted(expected)
    # Each partition's records came in offset order to whoever held it.
    for member in members:
        for partition in topic.partitions:
            offsets = [o for t, p, o, _ in member.records if (t, p) == partition]
            assert offsets == sorted(offsets)


_STOPPABLE_MEMBER = """
import json, sys
from confluent_kafka import Consumer
bootstrap, group, session_ms, heartbeat_ms, *topics = sys.argv[1:]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
    "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
    "partition.assignment.strategy": "roundrobin",
    "auto.offset.reset": "earliest", "enable.auto.commit": False})
def assigned(consumer, partitions):
    print(json.dumps([[p.topic, p.partition] for p in partitions]), flush=True)
consumer.subscribe(topics, on_assign=assigned)
while True:
    consumer.poll(0.1)
"""


@pytest.mark.slow
def test_a_member_that_stops_heartbeating_is_evicted_and_its_partitions_reassigned(broker):
    topic = create_partitioned_topic(broker.bootstrap, "payments", 4)
    stoppable = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _STOPPABLE_MEMBER,
            broker.bootstrap,
            "evict",
            str(SESSION_TIMEOUT_MS),
            str(HEARTBEAT_INTERVAL_MS),
            *topic.topics,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    member = GroupMember("confluent", broker.bootstrap, "evict", topic.topics)
    try:
        member.start()
        wait_for(lambda: len(member.assignment) == 2, "a two-and-two split", members=[member])
        stoppable.send_signal(signal.SIGSTOP)  # it neither heartbeats nor leaves
        wait_for(
            lambda: member.assignment == set(topic.partitions),
            "the stopped member's partitions to be reassigned",
            timeout_s=SESSION_TIMEOUT_MS / 1000 + CLIENT_TIMEOUT_S,
            members=[member],
        )
        assert "no heartbeat within its session timeout" in broker.log()
        values = produce_to_partitions(broker.bootstrap, topic, range(3))
        wait_for(lambda: sorted(member.values()) == sorted(values), "every partition's records")
        member.stop()
    finally:
        stoppable.kill()
        stoppable.wait()


def test_describe_and_list_groups_show_the_group_and_its_members(broker):
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    topic = create_partitioned_topic(broker.bootstrap, "audit", 2)
    values = produce_to_partitions(broker.bootstrap, topic, range(2))
    members = [
        GroupMember("confluent", broker.bootstrap, "auditors", topic.topics, **{"client.id": name})
        for name in ("auditor-a", "auditor-b")
    ]
    for member in members:
        member.start()
    wait_for(
        lambda: (
            all(len(m.assignment) == 1 for m in members)
            and sum(len(m.records) for m in members) == len(values)
        ),
        "one partition each, consumed and committed",
        members=members,
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(CLIENT_TIMEOUT_S)
    assert [g.group_id for g in listed.valid] == ["auditors"]
    described = admin.describe_consumer_groups(["auditors"])["auditors"].result(CLIENT_TIMEOUT_S)
    assert described.state is ConsumerGroupState.STABLE
    assert sorted(m.client_id for m in described.members) == ["auditor-a", "auditor-b"]
    assigned = {
        (p.topic, p.partition) for m in described.members for p in m.assignment.topic_partitions
    }
    assert assigned == set(topic.partitions)
    assert all(m.host.endswith("127.0.0.1") for m in described.members)

    kafka_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert [g["group_id"] for g in kafka_admin.list_groups()] == ["auditors"]
        group = kafka_admin.describe_groups(["auditors"])["auditors"]
        assert group["group_state"] == "Stable"
        assert sorted(m["client_id"] for m in group["members"]) == ["auditor-a", "auditor-b"]
        for member in members:
            member.stop()
        # No member, but offsets committed: Empty, still listed (as Kafka lists it).
        wait_for(
            lambda: (
                kafka_admin.describe_groups(["auditors"])["auditors"]["group_state"] in ("Empty",)
            ),
            "the group to be empty",
        )
        assert [g["group_id"] for g in kafka_admin.list_groups()] == ["auditors"]
        assert kafka_admin.describe_groups(["nobody"])["nobody"]["group_state"] == "Dead"
    finally:
        kafka_admin.close()


# ------------------------------------------------------------------ raw frames


class RawClient:
    """One connection; requests encoded and responses decoded by kafka-python's
    classes (Kafka's specs), so the test reads each error code as the broker sent it."""

    def __init__(self, bootstrap: str) -> None:
        self._sock = connect(bootstrap)
        self._correlation = 0

    def close(self) -> None:
        self._sock.close()

    def send(self, request, response_class, version: int):
        self._correlation += 1
        header = struct.pack(">hhi", request.API_KEY, version, self._correlation)
        header += struct.pack(">h", 3) + b"raw"
        send_frame(self._sock, header + request.encode(version=version))
        frame = receive_frame(self._sock)
        assert struct.unpack(">i", frame[:4])[0] == self._correlation
        return response_class.decode(frame[4:], version=version)

    def join(self, group: str, member_id: str = "", session_ms: int = 10_000):
        # A ConsumerProtocolSubscription v0 of topic "ledger", as consumers send.
        metadata = struct.pack(">hih", 0, 1, 6) + b"ledger" + struct.pack(">i", -1)
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)
        request = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=5_000,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[protocol],
        )
        return self.send(request, JoinGroupResponse, 5)

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        request = HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None
        )
        return self.send(request, HeartbeatResponse, 3).error_code

    def sync(self, group: str, generation: int, member_id: str) -> int:
        request = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            assignments=[],
        )
        return self.send(request, SyncGroupResponse, 3).error_code

    def commit(
        self, group: str, generation: int, member_id: str, topic: str, metadata: str = ""
    ) -> int:
        partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=0, committed_metadata=metadata
        )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[partition])
            ],
        )
        return self.send(request, OffsetCommitResponse, 7).topics[0].partitions[0].error_code


@pytest.fixture
def raw(broker) -> Iterator[RawClient]:
    client = RawClient(broker.bootstrap)
    yield client
    client.close()


def test_bad_group_requests_get_kafkas_error_codes_and_the_broker_stays_up(broker, raw):
    create_partitioned_topic(broker.bootstrap, "ledger", 1)
    # Nothing is known of a group no one joined.
    assert raw.heartbeat("ghosts", 1, "m") == ErrorCode.UNKNOWN_MEMBER_ID
    assert raw.sync("ghosts", 1, "m") == ErrorCode.UNKNOWN_MEMBER_ID
    assert raw.commit("ghosts", 3, "m", "ledger") == ErrorCode.ILLEGAL_GENERATION
    left = raw.send(
        LeaveGroupRequest(group_id="ghosts", member_id="m"), LeaveGroupResponse, 1
    ).error_code
    assert left == ErrorCode.UNKNOWN_MEMBER_ID

    # A member of generation 1, then requests naming the wrong generation or member.
    first = raw.join("tellers")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    joined = raw.join("tellers", first.member_id)
    assert (joined.error_code, joined.generation_id, joined.leader) == (0, 1, first.member_id)
    member = joined.member_id
    assert raw.sync("tellers", 2, member) == ErrorCode.ILLEGAL_GENERATION
    assert raw.sync("tellers", 1, member) == ErrorCode.NONE
    assert raw.heartbeat("tellers", 1, member) == ErrorCode.NONE
    assert raw.heartbeat("tellers", 0, member) == ErrorCode.ILLEGAL_GENERATION
    assert raw.heartbeat("tellers", 1, "stranger") == ErrorCode.UNKNOWN_MEMBER_ID
    assert raw.commit("tellers", 1, "stranger", "ledger") == ErrorCode.UNKNOWN_MEMBER_ID
    assert raw.commit("tellers", 7, member, "ledger") == ErrorCode.ILLEGAL_GENERATION
    assert raw.commit("tellers", -1, "", "ledger") == ErrorCode.UNKNOWN_MEMBER_ID
    assert raw.commit("tellers", 1, member, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    too_long = "x" * 5000
    assert raw.commit("tellers", 1, member, "ledger", too_long) == (
        ErrorCode.OFFSET_METADATA_TOO_LARGE
    )
    assert raw.commit("tellers", 1, member, "ledger", "fine") == ErrorCode.NONE
    assert raw.join("tellers", session_ms=10).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert raw.join("a/b").error_code == ErrorCode.INVALID_GROUP_ID

    find = FindCoordinatorRequest(key="tellers", key_type=7, coordinator_keys=[])
    assert raw.send(find, FindCoordinatorResponse, 2).error_code == ErrorCode.INVALID_REQUEST
    find = FindCoordinatorRequest(key="tellers", key_type=1, coordinator_keys=[])
    found = raw.send(find, FindCoordinatorResponse, 2)
    assert (found.error_code, found.port) == (0, int(broker.bootstrap.rsplit(":", 1)[1]))
    described = raw.send(
        DescribeGroupsRequest(groups=["tellers", "nobody"], include_authorized_operations=False),
        DescribeGroupsResponse,
        4,
    )
    assert [(g.group_id, g.group_state, len(g.members)) for g in described.groups] == [
        ("tellers", "Stable", 1),
        ("nobody", "Dead", 0),
    ]
    assert api_versions_works(broker.bootstrap)
    assert "Traceback" not in broker.log()


def test_an_evicted_member_learns_it_and_joins_again(broker, raw):
    joined = raw.join("tellers", raw.join("tellers").member_id, session_ms=1000)
    assert raw.sync("tellers", 1, joined.member_id) == ErrorCode.NONE
    # No heartbeat for longer than its session: the broker removes it.
    wait_for(
        lambda: "no heartbeat within its session timeout" in broker.log(),
        "the member's eviction",
        timeout_s=CLIENT_TIMEOUT_S,
    )
    assert raw.heartbeat("tellers", 1, joined.member_id) == ErrorCode.UNKNOWN_MEMBER_ID
    again = raw.join("tellers", raw.join("tellers").member_id)
    assert again.error_code == ErrorCode.NONE
