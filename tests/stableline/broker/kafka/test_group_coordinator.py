"""The group coordinator's state machine, on a real event loop with short timeouts:
generations, the leader's assignment, heartbeats and their expiry, rebalance
timeouts, static members, commits' checks, limits, and Kafka's error codes."""

from __future__ import annotations

import asyncio

import pytest

from stableline.broker.kafka.coordinator.group_coordinator import (
    GroupCoordinator,
    GroupLimits,
    GroupState,
    JoinRequest,
    JoinResult,
)
from stableline.broker.kafka.protocol.messages import ErrorCode

NONE = ErrorCode.NONE
PROTOCOLS = (("range", b"range-metadata"), ("roundrobin", b"rr-metadata"))


def join_request(
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 2_000,
    protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
    protocol_type: str = "consumer",
) -> JoinRequest:
    return JoinRequest(
        group,
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        session_ms,
        rebalance_ms,
        protocol_type,
        protocols,
    )


async def member_id_for(coordinator: GroupCoordinator, **kwargs) -> str:
    """A dynamic member's id, from the MEMBER_ID_REQUIRED answer to its first join."""
    first = await coordinator.join(join_request(**kwargs))
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    return first.member_id


def joining(coordinator: GroupCoordinator, member_id: str, **kwargs) -> asyncio.Task[JoinResult]:
    return asyncio.create_task(coordinator.join(join_request(member_id, **kwargs)))


async def stable_pair(coordinator: GroupCoordinator, **kwargs) -> tuple[str, str, int]:
    """Two members in a Stable generation: (leader, follower, generation)."""
    first = await member_id_for(coordinator, **kwargs)
    second = await member_id_for(coordinator, **kwargs)
    answers = await asyncio.gather(
        joining(coordinator, first, **kwargs), joining(coordinator, second, **kwargs)
    )
    assert {a.error for a in answers} == {NONE}
    leader = answers[0].leader
    follower = second if leader == first else first
    generation = answers[0].generation_id
    syncs = await asyncio.gather(
        coordinator.sync("g", generation, leader, None, {leader: b"p0", follower: b"p1"}),
        coordinator.sync("g", generation, follower, None, {}),
    )
    assert [s.assignment for s in syncs] == [b"p0", b"p1"]
    return leader, follower, generation


@pytest.fixture
def coordinator():
    made = GroupCoordinator(GroupLimits(initial_rebalance_delay_ms=0, min_session_timeout_ms=50))
    yield made
    made.close()


async def test_a_first_join_gets_its_member_id_then_leads_generation_one(coordinator):
    member = await member_id_for(coordinator)
    answer = await coordinator.join(join_request(member))
    assert answer.error is NONE
    assert (answer.generation_id, answer.leader, answer.member_id) == (1, member, member)
    assert answer.protocol_name == "range"  # the member's first choice
    assert [(m.member_id, m.metadata) for m in answer.members] == [(member, b"range-metadata")]
    assert coordinator.describe("g").state is GroupState.COMPLETING_REBALANCE
    synced = await coordinator.sync("g", 1, member, None, {member: b"all"})
    assert (synced.error, synced.assignment) == (NONE, b"all")
    assert coordinator.describe("g").state is GroupState.STABLE


async def test_followers_get_the_part_of_the_leaders_assignment_named_for_them(coordinator):
    leader, follower, generation = await stable_pair(coordinator)
    described = coordinator.describe("g")
    assert described.state is GroupState.STABLE and described.protocol_name == "range"
    assert {m.member_id: m.assignment for m in described.members} == {
        leader: b"p0",
        follower: b"p1",
    }
    # A SyncGroup in the stable generation answers the member's part at once.
    assert (await coordinator.sync("g", generation, follower, None, {})).assignment == b"p1"


async def test_a_new_member_rebalances_the_group_and_heartbeats_say_so_until_all_rejoin(
    coordinator,
):
    leader, follower, generation = await stable_pair(coordinator)
    newcomer = await member_id_for(coordinator)
    newcomer_join = joining(coordinator, newcomer)
    await asyncio.sleep(0)
    assert coordinator.heartbeat("g", generation, leader, None) is ErrorCode.REBALANCE_IN_PROGRESS
    assert coordinator.heartbeat("g", generation, follower, None) is ErrorCode.REBALANCE_IN_PROGRESS
    assert not newcomer_join.done()  # waits for the two others
    rejoins = [joining(coordinator, leader), joining(coordinator, follower)]
    answers = await asyncio.gather(newcomer_join, *rejoins)
    assert {a.generation_id for a in answers} == {generation + 1}
    assert {a.leader for a in answers} == {leader}  # the leader stays when it rejoins
    assert [len(a.members) for a in answers] == [0, 3, 0]


async def test_a_member_that_stops_heartbeating_is_removed_and_the_others_rebalance(
    coordinator,
):
    leader, follower, generation = await stable_pair(coordinator, session_ms=200)
    deadline = asyncio.get_running_loop().time() + 5
    while coordinator.describe("g").state is GroupState.STABLE:
        assert asyncio.get_running_loop().time() < deadline, "never evicted"
        coordinator.heartbeat("g", generation, leader, None)  # only the leader beats
        await asyncio.sleep(0.05)
    assert coordinator.heartbeat("g", generation, leader, None) is ErrorCode.REBALANCE_IN_PROGRESS
    assert coordinator.heartbeat("g", generation, follower, None) is ErrorCode.UNKNOWN_MEMBER_ID
    answer = await joining(coordinator, leader, session_ms=200)
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (
        generation + 1,
        [leader],
    )


async def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(coordinator):
    leader, follower, generation = await stable_pair(coordinator, rebalance_ms=300)
    started = asyncio.get_running_loop().time()
    answer = await joining(coordinator, leader, rebalance_ms=300)  # leader asks for a rebalance
    assert asyncio.get_running_loop().time() - started >= 0.25
    assert answer.generation_id == generation + 1
    assert [m.member_id for m in answer.members] == [leader]
    assert coordinator.heartbeat("g", answer.generation_id, follower, None) is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


async def test_members_starting_together_land_in_one_generation_after_the_initial_delay():
    coordinator = GroupCoordinator(GroupLimits(initial_rebalance_delay_ms=200))
    try:
        first = await member_id_for(coordinator)
        first_join = joining(coordinator, first)
        await asyncio.sleep(0.05)
        second = await member_id_for(coordinator)
        answers = await asyncio.gather(first_join, joining(coordinator, second))
        assert {a.generation_id for a in answers} == {1}
        assert sorted(len(a.members) for a in answers) == [0, 2]
    finally:
        coordinator.close()


async def test_wrong_generation_and_unknown_members_get_kafkas_errors(coordinator):
    leader, _follower, generation = await stable_pair(coordinator)
    assert coordinator.heartbeat("g", generation + 1, leader, None) is ErrorCode.ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", generation, "stranger", None) is ErrorCode.UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("nope", generation, leader, None) is ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coordinator.sync("g", generation - 1, leader, None, {})).error is (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert (await coordinator.sync("nope", 1, leader, None, {})).error is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert (await coordinator.join(join_request("stranger"))).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert (await coordinator.join(join_request("x", group="nope"))).error is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert (await coordinator.join(join_request(session_ms=10))).error is (
        ErrorCode.INVALID_SESSION_TIMEOUT
    )
    other_type = join_request(protocol_type="connect")
    assert (await coordinator.join(other_type)).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    other_protocol = join_request(protocols=(("sticky", b""),))
    assert (await coordinator.join(other_protocol)).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert coordinator.leave("g", [("stranger", None)]) == (NONE, [ErrorCode.UNKNOWN_MEMBER_ID])
    assert coordinator.leave("nope", [(leader, None)]) == (ErrorCode.UNKNOWN_MEMBER_ID, [])


async def test_commits_follow_kafkas_rules(coordinator):
    # No group: a commit from outside group management (generation -1) is allowed.
    assert coordinator.check_commit("g", -1, "", None) is NONE
    assert coordinator.check_commit("g", 3, "m", None) is ErrorCode.ILLEGAL_GENERATION
    leader, follower, generation = await stable_pair(coordinator)
    assert coordinator.check_commit("g", generation, follower, None) is NONE
    assert coordinator.check_commit("g", -1, "", None) is ErrorCode.UNKNOWN_MEMBER_ID
    assert coordinator.check_commit("g", generation, "stranger", None) is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert coordinator.check_commit("g", generation - 1, leader, None) is (
        ErrorCode.ILLEGAL_GENERATION
    )
    # While preparing a rebalance the old generation may still commit (on revoke) ...
    rejoin = joining(coordinator, leader)
    await asyncio.sleep(0)
    assert coordinator.check_commit("g", generation, follower, None) is NONE
    # ... and between the join and the leader's sync no one may.
    await asyncio.gather(rejoin, joining(coordinator, follower))
    assert coordinator.check_commit("g", generation + 1, follower, None) is (
        ErrorCode.REBALANCE_IN_PROGRESS
    )


async def test_the_last_member_leaving_forgets_the_group(coordinator):
    leader, follower, _ = await stable_pair(coordinator)
    assert coordinator.leave("g", [(leader, None), (follower, None)]) == (NONE, [NONE, NONE])
    assert coordinator.describe("g") is None
    assert coordinator.groups() == [] and coordinator.member_count == 0


async def test_a_restarted_static_member_takes_its_place_and_fences_the_old_id(coordinator):
    first = await coordinator.join(join_request(instance="i-1"))
    assert first.error is NONE  # static members need no MEMBER_ID_REQUIRED round
    synced = await coordinator.sync("g", 1, first.member_id, "i-1", {first.member_id: b"mine"})
    assert (synced.error, synced.assignment) == (NONE, b"mine")
    restarted = await coordinator.join(join_request(instance="i-1"))
    assert restarted.error is NONE and restarted.member_id != first.member_id
    assert restarted.generation_id == first.generation_id  # no rebalance
    again = await coordinator.sync("g", 1, restarted.member_id, "i-1", {})
    assert (again.error, again.assignment) == (NONE, b"mine")  # the old member's part
    assert coordinator.heartbeat("g", 1, first.member_id, "i-1") is ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.heartbeat("g", 1, restarted.member_id, "i-1") is NONE
    assert coordinator.leave("g", [("", "i-1")]) == (NONE, [NONE])
    assert coordinator.describe("g") is None


async def test_group_and_member_limits_refuse_the_one_past_them():
    coordinator = GroupCoordinator(
        GroupLimits(max_groups=1, max_members_per_group=1, initial_rebalance_delay_ms=0)
    )
    try:
        member = await member_id_for(coordinator)
        await coordinator.join(join_request(member))
        assert (await coordinator.join(join_request())).error is ErrorCode.GROUP_MAX_SIZE_REACHED
        other = await coordinator.join(join_request(group="h"))
        assert other.error is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert coordinator.member_count == 1
    finally:
        coordinator.close()


async def test_an_unanswered_member_id_expires_with_its_session(coordinator):
    await member_id_for(coordinator, session_ms=100)
    assert coordinator.member_count == 1
    deadline = asyncio.get_running_loop().time() + 5
    while coordinator.member_count:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    assert coordinator.groups() == []


async def test_close_answers_every_waiting_request_not_coordinator():
    coordinator = GroupCoordinator(GroupLimits(initial_rebalance_delay_ms=10_000))
    member = await member_id_for(coordinator)
    waiting = joining(coordinator, member)
    await asyncio.sleep(0)
    coordinator.close()
    assert (await waiting).error is ErrorCode.NOT_COORDINATOR


async def test_a_roles_share_of_groups_and_members_is_given_back_as_they_go() -> None:
    from dataclasses import replace

    coordinator = GroupCoordinator(
        GroupLimits(initial_rebalance_delay_ms=0, max_groups_per_role=2, max_members_per_role=3)
    )

    def as_role(role: str | None, **kwargs) -> JoinRequest:
        return replace(join_request(**kwargs), role=role)

    pending = []
    for group in ("a", "b"):
        answer = await coordinator.join(as_role("alice", group=group))
        assert answer.error is ErrorCode.MEMBER_ID_REQUIRED
        pending.append((group, answer.member_id))
    # A third group of alice's is refused; bob and superusers (None) are not.
    assert (await coordinator.join(as_role("alice", group="c"))).error is (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
    )
    assert (await coordinator.join(as_role("bob", group="c"))).error is (
        ErrorCode.MEMBER_ID_REQUIRED
    )
    assert (await coordinator.join(as_role(None, group="d"))).error is (
        ErrorCode.MEMBER_ID_REQUIRED
    )
    # Members: alice has 2, one more fits, then her groups are full.
    assert (await coordinator.join(as_role("alice", group="a"))).error is (
        ErrorCode.MEMBER_ID_REQUIRED
    )
    assert (await coordinator.join(as_role("alice", group="b"))).error is (
        ErrorCode.GROUP_MAX_SIZE_REACHED
    )
    # Leaving gives the places back: a group and a member.
    group, member = pending[1]
    assert coordinator.leave(group, [(member, None)]) == (NONE, [NONE])
    assert not coordinator.knows("b")
    assert (await coordinator.join(as_role("alice", group="c"))).error is (
        ErrorCode.MEMBER_ID_REQUIRED
    )
    coordinator.close()
