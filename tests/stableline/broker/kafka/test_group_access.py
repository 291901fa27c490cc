"""Consumer groups on a `serve --secure` broker: a group is its owner role's.

A victim role's librdkafka consumer holds a group; other roles, one with no grant
and one with consume on the victim's topic, try what Kafka's group ACLs refuse:
list and describe it, evict its member, join it (with a long session, with empty
metadata), heartbeat and sync in it, commit and fetch its offsets. Each is
refused GROUP_AUTHORIZATION_FAILED, and the victim keeps its partition, its
offsets and every message. Then the per-role limits: one role cannot take every
group or member place."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator

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

from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.testing import BrokerProcess
from tests.stableline.broker.kafka.conftest import confluent_produce
from tests.stableline.broker.kafka.group_clients import (
    INITIAL_REBALANCE_DELAY_MS,
    GroupMember,
    wait_for,
)
from tests.stableline.broker.kafka.test_security import SUPERUSER, SecureKafka

GROUPS_PER_ROLE = 3
MEMBERS_PER_ROLE = 4


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0, as consumers send in JoinGroup."""
    encoded = b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return struct.pack(">hi", 0, len(topics)) + encoded + struct.pack(">i", -1)


class GroupClient:
    """One authenticated connection sending group requests (kafka-python's specs)."""

    def __init__(self, secure: SecureKafka, role: str) -> None:
        self.raw = secure.connect()
        assert self.raw.authenticate(secure.token(role)).error_code == 0

    def close(self) -> None:
        self.raw.close()

    def join(
        self,
        group: str,
        metadata: bytes | None = None,
        session_ms: int = 10_000,
        member_id: str = "",
        protocol_type: str = "consumer",
        version: int = 5,
    ):
        if metadata is None:
            metadata = subscription("salaries")
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)
        request = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=5_000,
            member_id=member_id,
            group_instance_id=None,
            protocol_type=protocol_type,
            protocols=[protocol],
        )
        return self.raw.send(request, version, JoinGroupResponse)

    def list_groups(self) -> list[str]:
        response = self.raw.send(ListGroupsRequest(), 2, ListGroupsResponse)
        assert response.error_code == 0
        return sorted(group.group_id for group in response.groups)

    def describe(self, group: str):
        request = DescribeGroupsRequest(groups=[group], include_authorized_operations=False)
        return self.raw.send(request, 4, DescribeGroupsResponse).groups[0]

    def leave(self, group: str, member_id: str) -> int:
        request = LeaveGroupRequest(group_id=group, member_id=member_id)
        return self.raw.send(request, 1, LeaveGroupResponse).error_code

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        request = HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None
        )
        return self.raw.send(request, 3, HeartbeatResponse).error_code

    def sync(self, group: str, generation: int, member_id: str) -> int:
        request = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            assignments=[],
        )
        return self.raw.send(request, 3, SyncGroupResponse).error_code

    def commit(self, group: str, topic: str, offset: int) -> int:
        partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_metadata=""
        )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[partition])
            ],
        )
        return self.raw.send(request, 7, OffsetCommitResponse).topics[0].partitions[0].error_code

    def fetch_offset(self, group: str, topic: str) -> tuple[int, int]:
        """(group error, committed offset of partition 0)."""
        wanted = OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])
        response = self.raw.send(
            OffsetFetchRequest(group_id=group, topics=[wanted]), 5, OffsetFetchResponse
        )
        partition = response.topics[0].partitions[0]
        return response.error_code or partition.error_code, partition.committed_offset


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[SecureKafka]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("group-access") / "data",
        kafka_port=0,
        extra_args=["--secure"],
        env={
            "STABLELINE_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": str(INITIAL_REBALANCE_DELAY_MS),
            # Each role's share is a tenth of the totals.
            "STABLELINE_KAFKA_MAX_GROUPS": str(10 * GROUPS_PER_ROLE),
            "STABLELINE_KAFKA_MAX_GROUP_MEMBERS_TOTAL": str(10 * MEMBERS_PER_ROLE),
        },
    )
    process.start()
    try:
        yield SecureKafka(process)
    finally:
        assert process.stop() == 0, process.log()


@pytest.fixture
def clients(secure) -> Iterator[dict[str, GroupClient]]:
    made: dict[str, GroupClient] = {}
    secure.grant("victim", ["produce", "consume"], "salaries")
    secure.grant("reader", ["consume"], "salaries")
    for role in ("victim", "reader", "nobody", SUPERUSER):
        made[role] = GroupClient(secure, role)
    yield made
    for client in made.values():
        client.close()


def test_another_roles_group_can_be_neither_seen_nor_touched(secure, clients):
    bootstrap = secure.process.kafka_bootstrap
    victim_settings = secure.confluent("victim")
    confluent_produce(bootstrap, "salaries", [b"s-%d" % i for i in range(5)], **victim_settings)
    member = GroupMember("confluent", bootstrap, "payroll", ["salaries"], **victim_settings)
    member.start()
    try:
        wait_for(
            lambda: member.assignment == {("salaries", 0)} and len(member.records) == 5,
            "the victim's consumer to hold its partition and read 5 messages",
            members=[member],
        )
        admin, victim, reader, nobody = (
            clients[SUPERUSER],
            clients["victim"],
            clients["reader"],
            clients["nobody"],
        )
        # The owner and superusers see the group; no other role does.
        assert "payroll" in victim.list_groups()
        assert "payroll" in admin.list_groups()
        assert "payroll" not in nobody.list_groups()
        assert "payroll" not in reader.list_groups()
        described = admin.describe("payroll")
        assert (described.error_code, described.group_state) == (0, "Stable")
        (victim_member,) = described.members
        for other in (nobody, reader):
            refused = other.describe("payroll")
            assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert refused.members == []
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
        for other in (nobody, reader):
            assert other.leave("payroll", victim_member.member_id) == refused
            assert other.join("payroll", session_ms=1_800_000).error_code == refused
            assert other.join("payroll", metadata=b"").error_code == refused
            assert other.heartbeat("payroll", 1, victim_member.member_id) == refused
            assert other.sync("payroll", 1, victim_member.member_id) == refused
            assert other.fetch_offset("payroll", "salaries")[0] == refused
        # Consume on the topic is not the group: no commit past the victim's messages.
        assert reader.commit("payroll", "salaries", 1000) == refused
        # The owner's own bad joins are refused without disturbing its member.
        assert victim.join("payroll", metadata=b"").error_code == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        )
        assert victim.join("payroll", metadata=b"\x00\x00\x00\x00\x00\x09").error_code == (
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        )
        assert victim.join("payroll", session_ms=1_800_000).error_code == (
            ErrorCode.INVALID_SESSION_TIMEOUT
        )
        # The victim keeps its partition, reads every new message, and its offsets.
        confluent_produce(
            bootstrap, "salaries", [b"s-%d" % i for i in range(5, 9)], **victim_settings
        )
        wait_for(
            lambda: len(member.records) == 9,
            "the victim to read the 4 new messages",
            members=[member],
        )
        assert member.assignment == {("salaries", 0)}
        assert [offset for _t, _p, offset, _v in member.records] == list(range(9))
        assert victim.fetch_offset("payroll", "salaries") == (0, 9)
        assert admin.describe("payroll").members[0].member_id == victim_member.member_id
    finally:
        member.stop()
    assert "Traceback" not in secure.process.log()


def test_a_role_with_no_grant_joins_no_consumer_group_and_a_reader_its_own(secure, clients):
    refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    # A subscription to a topic the role may not consume is refused.
    assert clients["nobody"].join("squat", version=4).error_code == refused
    # A role that may consume the topic makes and owns a group of its own.
    reader = clients["reader"]
    first = reader.join("readers", version=4)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert "readers" in reader.list_groups()
    assert "readers" not in clients["victim"].list_groups()
    assert clients["victim"].join("readers", version=4).error_code == refused
    assert reader.leave("readers", first.member_id) == 0
    # Its last member gone, the group is still held by its claim for a while.
    assert clients["victim"].join("readers", version=4).error_code == refused


def test_one_role_cannot_fill_the_groups_or_members_of_everyone(secure, clients):
    nobody, reader = clients["nobody"], clients["reader"]
    # A role with no grant at all still joins groups of other protocols: they count
    # against its own share.
    for index in range(GROUPS_PER_ROLE):
        joined = nobody.join(f"filler-{index}", b"x", protocol_type="connect", version=4)
        assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
    past = nobody.join("filler-last", b"x", protocol_type="connect", version=4)
    assert past.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # Members: the share of a role over all its groups.
    got = [reader.join("crowd", version=4).error_code for _ in range(MEMBERS_PER_ROLE + 1)]
    assert got == [ErrorCode.MEMBER_ID_REQUIRED] * MEMBERS_PER_ROLE + [
        ErrorCode.GROUP_MAX_SIZE_REACHED
    ]
    # Other roles still make groups.
    assert clients["victim"].join("own-group", version=4).error_code == (
        ErrorCode.MEMBER_ID_REQUIRED
    )
    assert "kafka_max_groups_per_role" in secure.process.log()
    assert "kafka_max_group_members_per_role" in secure.process.log()


# ------------------------------------------------------------------ units


def test_consumer_subscriptions_are_read_and_junk_is_refused():
    from stableline.broker.kafka.coordinator.group_access import check_protocols, subscribed_topics

    assert subscribed_topics(subscription("a", "b")) == ["a", "b"]
    # Later versions add fields after the user data: read past them.
    v3 = struct.pack(">hi", 3, 1) + struct.pack(">h", 1) + b"a" + struct.pack(">i", 0) + b"more"
    assert subscribed_topics(v3) == ["a"]
    for junk in (b"", b"\x00", b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x09"):
        assert subscribed_topics(junk) is None
    assert check_protocols("consumer", (("range", subscription("a")),)) is None
    assert check_protocols("connect", (("v1", b"anything"),)) is None
    assert "empty" in check_protocols("", (("range", subscription("a")),))
    assert "no protocol" in check_protocols("consumer", ())
    assert "not a consumer subscription" in check_protocols("consumer", (("range", b""),))


async def test_an_unused_group_is_held_by_its_claim_then_free(tmp_path):
    from managed_ledger import LocalStore
    from stableline.broker.kafka.coordinator.group_access import GroupOwners
    from stableline.broker.kafka.coordinator.group_records import LocalGroupRecords

    store = LocalStore(tmp_path / "store")
    owners = GroupOwners(LocalGroupRecords(store), hold_s=0.2)
    try:
        assert owners.owner("g") is None and not owners.claimed_lately("g")
        assert await owners.claim("g", "alice", None)
        assert owners.owner("g") == "alice" and owners.claimed_lately("g")
        deadline = time.monotonic() + 5
        while owners.claimed_lately("g"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert owners.owner("g") == "alice"  # durable; whether in use is the caller's
        assert GroupOwners(LocalGroupRecords(store)).owner("g") == "alice"
    finally:
        store.close()
