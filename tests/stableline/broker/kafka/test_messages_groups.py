"""The group schemas, for every version served, against kafka-python's reading of
Kafka's message specs (as test_messages.py does for the others): its requests
decode here with no byte left over, and responses encoded here decode there and
encode back to the very same bytes."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_groups as mg
from stableline.broker.kafka.protocol.codec import MalformedRequest, Reader
from tests.stableline.broker.kafka.test_messages import (
    decoded_fully,
    same_bytes_through_spec,
    versions,
)

NONE = m.ErrorCode.NONE


def test_every_group_api_is_one_kafka_defines_with_the_same_key_and_flexible_versions():
    for cls, key in [
        (FindCoordinatorRequest, m.ApiKey.FIND_COORDINATOR),
        (JoinGroupRequest, m.ApiKey.JOIN_GROUP),
        (SyncGroupRequest, m.ApiKey.SYNC_GROUP),
        (HeartbeatRequest, m.ApiKey.HEARTBEAT),
        (LeaveGroupRequest, m.ApiKey.LEAVE_GROUP),
        (OffsetCommitRequest, m.ApiKey.OFFSET_COMMIT),
        (OffsetFetchRequest, m.ApiKey.OFFSET_FETCH),
        (DescribeGroupsRequest, m.ApiKey.DESCRIBE_GROUPS),
        (ListGroupsRequest, m.ApiKey.LIST_GROUPS),
    ]:
        assert key == cls.API_KEY
        low, high = m.SUPPORTED[key]
        assert cls.min_version <= low <= high <= cls.max_version
        flexible_from = m.FIRST_FLEXIBLE[key]
        assert high < flexible_from, "group APIs are served below their flexible versions"
        assert cls.flexible_version_q(flexible_from)
        assert not cls.flexible_version_q(flexible_from - 1)


@pytest.mark.parametrize("version", versions(m.ApiKey.FIND_COORDINATOR))
def test_find_coordinator_matches_the_spec(version):
    request = FindCoordinatorRequest(key="orders-group", key_type=1, coordinator_keys=[])
    decoded = decoded_fully(mg.read_find_coordinator, request.encode(version=version), version)
    assert decoded == mg.FindCoordinatorRequest("orders-group", 1 if version >= 1 else 0)
    body = mg.write_find_coordinator(version, NONE, 3, "broker-3", 9092)
    response = same_bytes_through_spec(FindCoordinatorResponse, body, version)
    assert (response.node_id, response.host, response.port) == (3, "broker-3", 9092)


@pytest.mark.parametrize("version", versions(m.ApiKey.JOIN_GROUP))
def test_join_group_matches_the_spec(version):
    request = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        member_id="m-1",
        group_instance_id="instance-1",
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"r"),
            JoinGroupRequest.JoinGroupRequestProtocol(name="roundrobin", metadata=b"rr"),
        ],
    )
    decoded = decoded_fully(mg.read_join_group, request.encode(version=version), version)
    assert decoded.protocols == (("range", b"r"), ("roundrobin", b"rr"))
    assert decoded.rebalance_timeout_ms == (30_000 if version >= 1 else 10_000)
    assert decoded.group_instance_id == ("instance-1" if version >= 5 else None)
    body = mg.write_join_group(
        version,
        mg.JoinGroupResponse(
            NONE,
            4,
            "range",
            "m-1",
            "m-1",
            (mg.JoinedMember("m-1", None, b"r"), mg.JoinedMember("m-2", None, b"s")),
        ),
    )
    response = same_bytes_through_spec(JoinGroupResponse, body, version)
    assert (response.generation_id, response.protocol_name, response.leader) == (4, "range", "m-1")
    assert [(each.member_id, each.metadata) for each in response.members] == [
        ("m-1", b"r"),
        ("m-2", b"s"),
    ]
    # An error answer names no protocol: "" where the version cannot say null.
    failed = mg.write_join_group(version, mg.JoinGroupResponse(m.ErrorCode.MEMBER_ID_REQUIRED))
    assert same_bytes_through_spec(JoinGroupResponse, failed, version).protocol_name == ""


@pytest.mark.parametrize("version", versions(m.ApiKey.SYNC_GROUP))
def test_sync_group_matches_the_spec(version):
    assignment = SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-2", assignment=b"a2")
    request = SyncGroupRequest(
        group_id="g",
        generation_id=4,
        member_id="m-1",
        group_instance_id=None,
        assignments=[assignment],
    )
    decoded = decoded_fully(mg.read_sync_group, request.encode(version=version), version)
    assert decoded == mg.SyncGroupRequest("g", 4, "m-1", None, (("m-2", b"a2"),))
    body = mg.write_sync_group(version, NONE, b"mine")
    assert same_bytes_through_spec(SyncGroupResponse, body, version).assignment == b"mine"


@pytest.mark.parametrize("version", versions(m.ApiKey.HEARTBEAT))
def test_heartbeat_matches_the_spec(version):
    request = HeartbeatRequest(
        group_id="g", generation_id=4, member_id="m-1", group_instance_id=None
    )
    decoded = decoded_fully(mg.read_heartbeat, request.encode(version=version), version)
    assert decoded == mg.HeartbeatRequest("g", 4, "m-1", None)
    body = mg.write_error_only(version, m.ErrorCode.REBALANCE_IN_PROGRESS)
    assert same_bytes_through_spec(HeartbeatResponse, body, version).error_code == 27


@pytest.mark.parametrize("version", versions(m.ApiKey.LEAVE_GROUP))
def test_leave_group_matches_the_spec(version):
    if version <= 2:
        request = LeaveGroupRequest(group_id="g", member_id="m-1")
    else:
        request = LeaveGroupRequest(
            group_id="g",
            members=[LeaveGroupRequest.MemberIdentity(member_id="m-1", group_instance_id="i")],
        )
    decoded = decoded_fully(mg.read_leave_group, request.encode(version=version), version)
    expected_instance = "i" if version >= 3 else None
    assert decoded == mg.LeaveGroupRequest("g", (mg.LeavingMember("m-1", expected_instance),))
    body = mg.write_leave_group(
        version, NONE, [mg.LeftMember("m-1", expected_instance, m.ErrorCode.UNKNOWN_MEMBER_ID)]
    )
    response = same_bytes_through_spec(LeaveGroupResponse, body, version)
    if version >= 3:
        assert [(r.member_id, r.error_code) for r in response.members] == [("m-1", 25)]


@pytest.mark.parametrize("version", versions(m.ApiKey.OFFSET_COMMIT))
def test_offset_commit_matches_the_spec(version):
    partitions = [
        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=index, committed_offset=100 + index, committed_metadata=metadata
        )
        for index, metadata in [(0, "checkpoint"), (1, None)]
    ]
    request = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=4,
        member_id="m-1",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=partitions)],
    )
    decoded = decoded_fully(mg.read_offset_commit, request.encode(version=version), version)
    assert (decoded.group_id, decoded.generation_id, decoded.member_id) == ("g", 4, "m-1")
    assert decoded.offsets == (
        mg.PartitionOffset("t", 0, 100, "checkpoint"),
        mg.PartitionOffset("t", 1, 101, None),
    )
    body = mg.write_offset_commit(
        version, [("t", 0, NONE), ("u", 0, m.ErrorCode.ILLEGAL_GENERATION), ("t", 1, NONE)]
    )
    response = same_bytes_through_spec(OffsetCommitResponse, body, version)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics
    ] == [("t", [(0, 0), (1, 0)]), ("u", [(0, 22)])]


@pytest.mark.parametrize("version", versions(m.ApiKey.OFFSET_FETCH))
def test_offset_fetch_matches_the_spec(version):
    topic = OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 2])
    request = OffsetFetchRequest(group_id="g", topics=[topic])
    decoded = decoded_fully(mg.read_offset_fetch, request.encode(version=version), version)
    assert decoded == mg.OffsetFetchRequest("g", (("t", 0), ("t", 2)))
    if version >= 2:
        every = OffsetFetchRequest(group_id="g", topics=None).encode(version=version)
        assert decoded_fully(mg.read_offset_fetch, every, version).partitions is None
    else:
        with pytest.raises(MalformedRequest):
            mg.read_offset_fetch(Reader(b"\x00\x01g\xff\xff\xff\xff"), version)
    body = mg.write_offset_fetch(
        version,
        [
            ("t", 0, mg.FetchedOffset(42, "checkpoint", NONE)),
            ("t", 2, mg.FetchedOffset(-1, "", NONE)),
        ],
    )
    response = same_bytes_through_spec(OffsetFetchResponse, body, version)
    assert [
        (p.partition_index, p.committed_offset, p.metadata) for p in response.topics[0].partitions
    ] == [(0, 42, "checkpoint"), (2, -1, "")]


@pytest.mark.parametrize("version", versions(m.ApiKey.DESCRIBE_GROUPS))
def test_describe_groups_matches_the_spec(version):
    request = DescribeGroupsRequest(groups=["g", "h"], include_authorized_operations=False)
    decoded = decoded_fully(mg.read_describe_groups, request.encode(version=version), version)
    assert decoded == ["g", "h"]
    member = mg.DescribedMember("m-1", None, "client", "/127.0.0.1", b"meta", b"assigned")
    body = mg.write_describe_groups(
        version,
        [
            mg.DescribedGroup(NONE, "g", "Stable", "consumer", "range", (member,)),
            mg.DescribedGroup(NONE, "h", "Dead"),
        ],
    )
    response = same_bytes_through_spec(DescribeGroupsResponse, body, version)
    assert [(g.group_id, g.group_state) for g in response.groups] == [
        ("g", "Stable"),
        ("h", "Dead"),
    ]
    described = response.groups[0].members[0]
    assert (described.client_host, described.member_assignment) == ("/127.0.0.1", b"assigned")


@pytest.mark.parametrize("version", versions(m.ApiKey.LIST_GROUPS))
def test_list_groups_matches_the_spec(version):
    decoded_fully(mg.read_list_groups, ListGroupsRequest().encode(version=version), version)
    body = mg.write_list_groups(version, NONE, [("g", "consumer"), ("h", "")])
    response = same_bytes_through_spec(ListGroupsResponse, body, version)
    assert [(g.group_id, g.protocol_type) for g in response.groups] == [
        ("g", "consumer"),
        ("h", ""),
    ]
