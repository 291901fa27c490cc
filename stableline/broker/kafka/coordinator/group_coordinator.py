"""Kafka's consumer group coordinator (the classic protocol), in memory.

Members join a group, one generation at a time: every JoinGroup of a rebalance is
answered together once each known member has (re)joined or the rebalance timeout
passed (those that did not are removed); the answer names the generation, the
protocol chosen, the leader, and gives the leader every member's metadata. The
leader's SyncGroup hands out the assignment; every member's SyncGroup answers with
its own part. Heartbeats keep a member; one that stops for its session timeout is
removed and the group rebalances: the others' heartbeats answer
REBALANCE_IN_PROGRESS until they have joined again. The states are Kafka's
(GroupState, whose table group_state.py keeps); the error codes are those Kafka answers in each case:
UNKNOWN_MEMBER_ID for a member (or group) not known, ILLEGAL_GENERATION for
another generation, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID for a static member
replaced by a newer instance, MEMBER_ID_REQUIRED for a JoinGroup from v4 without
a member id (KIP-394: the member joins again with the id given, so a client that
gave up on a join leaves no phantom member behind).

Static members (group.instance.id, KIP-345) keep their place when they restart:
a join under a known instance id replaces the old member id (fencing it) and,
while the group is Stable, takes the old member's assignment without a rebalance;
a static member that does not rejoin is not removed at the end of a rebalance,
only when its session times out.

Kafka waits group.initial.rebalance.delay.ms before the first generation of an
empty group so that members starting together land in one generation;
`GroupLimits.initial_rebalance_delay_ms` is that delay, extended while members
keep arriving, up to the rebalance timeout.

What is kept: only memory. A group with no member is forgotten at once (its
committed offsets live in its subscriptions, group_offsets.py), and a restart
forgets every group: members learn it from UNKNOWN_MEMBER_ID and join again.
Bounded: at most `max_groups` groups with members, `max_members_per_group`
members (and members awaiting their id) in each, `max_members` in all. A group
made by a role (JoinRequest.role: with authorization on, the group's owner,
group_access.py) counts against that role's shares, `max_groups_per_role` groups
and `max_members_per_role` members, so one role cannot take every group or member
place from the others; superusers (role None) count only against the totals.

Every method runs on the event loop; timers are the loop's. No network code.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from stableline.broker.kafka.coordinator.group_state import GroupState, check_group_transition
from stableline.broker.kafka.protocol.messages import ErrorCode

log = logging.getLogger(__name__)

# A member that joined for the first time and is still waiting for its generation
# is removed after this long even while it waits [Kafka: group.new.member.join.timeout].
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """The coordinator's bounds and timings (the broker's kafka_group_* config)."""

    max_groups: int = 10_000
    max_members_per_group: int = 1000  # [Kafka: group.max.size]
    max_members: int = 100_000
    initial_rebalance_delay_ms: int = 3000  # [Kafka: group.initial.rebalance.delay.ms]
    # One role's share of max_groups and max_members.
    max_groups_per_role: int = 1000
    max_members_per_role: int = 10_000
    # A member's session timeout must lie within these [group.min/max.session.timeout.ms;
    # Kafka's are 6 s and 30 min: a member that vanishes holds its partitions that long].
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str  # "" for a first join
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), preferred first
    # JoinGroup v4+: a first join is answered MEMBER_ID_REQUIRED with its id.
    require_known_member_id: bool = True
    # The role whose shares a group it makes counts against (None: only the totals).
    role: str | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[MemberMetadata, ...] = ()  # for the leader alone


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # for the chosen protocol, while Stable
    assignment: bytes  # while Stable


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str  # "" unless Stable
    members: tuple[MemberDescription, ...]


@dataclass(slots=True, eq=False)
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # Its JoinGroup / SyncGroup waiting for the generation / the assignment.
    joining: asyncio.Future[JoinResult] | None = None
    syncing: asyncio.Future[SyncResult] | None = None
    # Joined for the first time and not yet given a generation.
    is_new: bool = True
    expiry: asyncio.TimerHandle | None = None

    @classmethod
    def joining_with(cls, member_id: str, request: JoinRequest, **state) -> _Member:
        """A member as its JoinGroup describes it (`state`: the other fields)."""
        return cls(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocols,
            **state,
        )

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")


@dataclass(slots=True, eq=False)
class _Group:
    group_id: str
    # The role whose shares this group and its members count against (None: none).
    role: str | None = None
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    # Insertion-ordered: the first member is the leader when one is needed.
    members: dict[str, _Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Member ids handed out by MEMBER_ID_REQUIRED, expiring after a session timeout.
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    # Members of the current generation whose SyncGroup has not come yet.
    pending_sync: set[str] = field(default_factory=set)
    join_timer: asyncio.TimerHandle | None = None
    sync_timer: asyncio.TimerHandle | None = None
    # This rebalance is the group's first (from Empty): it waits the initial delay.
    initial_rebalance: bool = False
    new_member_added: bool = False

    def all_joined(self) -> bool:
        return not self.pending and all(m.joining is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


def _answer(future: asyncio.Future | None, value: object) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class GroupCoordinator:
    """Every group of this broker; see the module docstring."""

    def __init__(self, limits: GroupLimits | None = None) -> None:
        self.limits = limits or GroupLimits()
        self._groups: dict[str, _Group] = {}
        self._member_count = 0  # members and pending member ids of every group
        # Groups and members (pending ids included) counted against each role.
        self._role_groups: dict[str, int] = {}
        self._role_members: dict[str, int] = {}

    # ------------------------------------------------------------ views

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group, or None when it has no member (Empty or unknown)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        members = tuple(
            MemberDescription(
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                member.metadata_for(protocol) if stable else b"",
                member.assignment if stable else b"",
            )
            for member in group.members.values()
        )
        return GroupDescription(
            group_id, group.state, group.protocol_type or "", protocol if stable else "", members
        )

    def groups(self) -> list[tuple[str, str, GroupState]]:
        """(group id, protocol type, state) of every group with members."""
        return [(g.group_id, g.protocol_type or "", g.state) for g in self._groups.values()]

    @property
    def member_count(self) -> int:
        return self._member_count

    def knows(self, group_id: str) -> bool:
        """Whether the group has members (or member ids handed out) here."""
        return group_id in self._groups

    # ------------------------------------------------------------ JoinGroup

    async def join(self, request: JoinRequest) -> JoinResult:
        limits = self.limits
        if (
            not limits.min_session_timeout_ms
            <= request.session_timeout_ms
            <= (limits.max_session_timeout_ms)
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)
        group = self._groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id)
            if len(self._groups) >= limits.max_groups:
                log.warning(
                    "kafka: group %r refused: %d groups have members, the most "
                    "kafka_max_groups allows",
                    request.group_id,
                    len(self._groups),
                )
                return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            role = request.role
            if role is not None and self._role_groups.get(role, 0) >= limits.max_groups_per_role:
                log.warning(
                    "kafka: group %r refused: role %r has %d groups with members, the most "
                    "kafka_max_groups_per_role allows",
                    request.group_id,
                    role,
                    self._role_groups[role],
                )
                return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            group = self._groups[request.group_id] = _Group(request.group_id, role)
            if role is not None:
                self._role_groups[role] = self._role_groups.get(role, 0) + 1
        outcome = self._join(group, request)
        self._forget_if_empty(group)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _join(self, group: _Group, request: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        member_id = request.member_id
        known = (
            member_id in group.members
            or member_id in group.pending
            or (not member_id and request.group_instance_id in group.static_members)
        )
        if not known and not self._has_room(group, request):
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
        if not self._supports(group, request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            instance_id = request.group_instance_id
            new_id = f"{instance_id or request.client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                existing = group.static_members.get(instance_id)
                if existing is not None:
                    return self._replace_static_member(group, existing, new_id, request)
                return self._add_member(group, new_id, request)
            if request.require_known_member_id:
                loop = asyncio.get_running_loop()
                group.pending[new_id] = loop.call_later(
                    request.session_timeout_ms / 1000, self._expire_pending, group, new_id
                )
                self._count_members(group, 1)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
            return self._add_member(group, new_id, request)
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            self._count_members(group, -1)
            return self._add_member(group, member_id, request)
        error = self._check_member(group, member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member(group, member, request)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == request.protocols:
                # Its JoinGroup answer was lost: the generation again.
                return self._join_result(group, member, with_members=True)
            return self._update_member(group, member, request)
        if state is GroupState.STABLE:
            if member.member_id == group.leader_id or member.protocols != request.protocols:
                # The leader joins again to have the assignment made anew.
                return self._update_member(group, member, request)
            return self._join_result(group, member, with_members=False)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _has_room(self, group: _Group, request: JoinRequest) -> bool:
        limits = self.limits
        in_group = len(group.members) + len(group.pending)
        if in_group >= limits.max_members_per_group:
            return False
        if self._member_count >= limits.max_members:
            log.warning(
                "kafka: a member of group %r refused: %d members in all groups, the most "
                "kafka_max_group_members_total allows",
                request.group_id,
                self._member_count,
            )
            return False
        role = group.role
        if role is not None and self._role_members.get(role, 0) >= limits.max_members_per_role:
            log.warning(
                "kafka: a member of group %r refused: role %r has %d members in its groups, "
                "the most kafka_max_group_members_per_role allows",
                request.group_id,
                role,
                self._role_members[role],
            )
            return False
        return True

    def _count_members(self, group: _Group, delta: int) -> None:
        self._member_count += delta
        if group.role is not None:
            count = self._role_members.get(group.role, 0) + delta
            if count:
                self._role_members[group.role] = count
            else:
                del self._role_members[group.role]

    @staticmethod
    def _supports(
        group: _Group, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
    ) -> bool:
        """Whether a member with these protocols may join: into an empty group any
        (named) ones; otherwise the group's type and a protocol every member has."""
        names = {name for name, _ in protocols}
        if not group.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != group.protocol_type:
            return False
        return any(
            all(name in member.protocol_names() for member in group.members.values())
            for name in names
        )

    def _add_member(
        self, group: _Group, member_id: str, request: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        member = _Member.joining_with(member_id, request)
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_rebalance:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        self._count_members(group, 1)
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        future = member.joining = asyncio.get_running_loop().create_future()
        # A first join waits for its generation; it cannot heartbeat meanwhile.
        self._schedule_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._rebalance_or_complete(group)
        return future

    def _update_member(
        self, group: _Group, member: _Member, request: JoinRequest
    ) -> asyncio.Future[JoinResult]:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        # A second JoinGroup of one member (another connection): the first is told to
        # join again, the second waits for the generation.
        _answer(member.joining, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        future = member.joining = asyncio.get_running_loop().create_future()
        self._rebalance_or_complete(group)
        return future

    def _replace_static_member(
        self, group: _Group, old_id: str, new_id: str, request: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A known instance id joins with no member id: it is the same instance
        restarted, and takes the old member's place (the old id is fenced)."""
        old = group.members.pop(old_id)
        if old.expiry is not None:
            old.expiry.cancel()
        _answer(old.joining, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _answer(old.syncing, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        leader_before = group.leader_id
        member = _Member.joining_with(new_id, request, assignment=old.assignment, is_new=False)
        group.members[new_id] = member
        assert request.group_instance_id is not None
        group.static_members[request.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._schedule_expiry(group, member, member.session_timeout_ms)
        if group.state is GroupState.STABLE and self._select_protocol(group) == group.protocol_name:
            # Same protocol: no rebalance; it syncs and gets the old member's part.
            # Named the leader only if the leader was someone else, as Kafka answers.
            return JoinResult(
                ErrorCode.NONE,
                new_id,
                group.generation_id,
                group.protocol_name,
                leader_before or "",
            )
        future = member.joining = asyncio.get_running_loop().create_future()
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return future

    def _join_result(self, group: _Group, member: _Member, with_members: bool) -> JoinResult:
        protocol = group.protocol_name or ""
        members: tuple[MemberMetadata, ...] = ()
        if with_members and member.member_id == group.leader_id:
            members = tuple(
                MemberMetadata(m.member_id, m.group_instance_id, m.metadata_for(protocol))
                for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    # ------------------------------------------------------------ rebalancing

    def _rebalance_or_complete(self, group: _Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: _Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The generation told is void: its members join again.
            for member in group.members.values():
                member.assignment = b""
                self._propagate_sync(group, member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync.clear()
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        initial = group.state is GroupState.EMPTY
        self._move(group, GroupState.PREPARING_REBALANCE)
        group.initial_rebalance = initial
        group.new_member_added = False
        loop = asyncio.get_running_loop()
        log.info("kafka: group %r rebalances (generation %d)", group.group_id, group.generation_id)
        if initial:
            delay_ms = self.limits.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            group.join_timer = loop.call_later(
                delay_ms / 1000, self._initial_rebalance_waited, group, delay_ms, remaining_ms
            )
        elif group.all_joined():
            self._complete_join(group)
        else:
            group.join_timer = loop.call_later(
                group.rebalance_timeout_ms() / 1000, self._complete_join, group
            )

    def _maybe_complete_join(self, group: _Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_rebalance
            and group.all_joined()
        ):
            self._complete_join(group)

    def _initial_rebalance_waited(self, group: _Group, delay_ms: int, remaining_ms: int) -> None:
        if not self._current(group) or group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and remaining_ms > 0:
            # Members keep arriving: wait a little longer, within the rebalance timeout.
            group.new_member_added = False
            next_delay_ms = min(delay_ms, remaining_ms)
            group.join_timer = asyncio.get_running_loop().call_later(
                next_delay_ms / 1000,
                self._initial_rebalance_waited,
                group,
                next_delay_ms,
                max(remaining_ms - delay_ms, 0),
            )
            return
        self._complete_join(group)

    def _complete_join(self, group: _Group) -> None:
        """End the join phase: members that did not join are removed (static ones
        stay), the next generation is made and every waiting JoinGroup answered."""
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        if not self._current(group) or group.state is not GroupState.PREPARING_REBALANCE:
            return
        for member in list(group.members.values()):
            if member.joining is None and member.group_instance_id is None:
                log.info(
                    "kafka: group %r removes member %s: it did not join again in time",
                    group.group_id,
                    member.member_id,
                )
                self._remove(group, member)
        joined = [m for m in group.members.values() if m.joining is not None]
        if group.members and not joined:
            # Only static members that did not rejoin: give them another rebalance timeout.
            group.join_timer = asyncio.get_running_loop().call_later(
                group.rebalance_timeout_ms() / 1000, self._complete_join, group
            )
            return
        leader = group.members.get(group.leader_id or "")
        if leader is None or leader.joining is None:
            group.leader_id = joined[0].member_id if joined else None
        group.generation_id += 1
        group.initial_rebalance = False
        if not group.members:
            self._move(group, GroupState.EMPTY)
            group.protocol_name = None
            log.info(
                "kafka: group %r is empty (generation %d)", group.group_id, group.generation_id
            )
            self._forget_if_empty(group)
            return
        group.protocol_name = self._select_protocol(group)
        self._move(group, GroupState.COMPLETING_REBALANCE)
        log.info(
            "kafka: group %r generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            future, member.joining = member.joining, None
            _answer(future, self._join_result(group, member, with_members=True))
            member.is_new = False
            self._schedule_expiry(group, member, member.session_timeout_ms)
            group.pending_sync.add(member.member_id)
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms() / 1000,
            self._expire_pending_sync,
            group,
            group.generation_id,
        )

    @staticmethod
    def _select_protocol(group: _Group) -> str:
        """The protocol every member supports that most members prefer (ties: the
        one the earliest member prefers)."""
        members = list(group.members.values())
        candidates = set(members[0].protocol_names())
        for member in members[1:]:
            candidates &= set(member.protocol_names())
        votes: dict[str, int] = {}
        for member in members:
            vote = next(name for name in member.protocol_names() if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def _expire_pending_sync(self, group: _Group, generation_id: int) -> None:
        if not self._current(group) or group.generation_id != generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info(
                    "kafka: group %r removes member %s: no SyncGroup within the rebalance timeout",
                    group.group_id,
                    member_id,
                )
                self._remove(group, member)
        self._prepare_rebalance(group)
        self._forget_if_empty(group)

    # ------------------------------------------------------------ SyncGroup

    async def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """`assignments` (member id -> its part) counts only from the leader."""
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        error = self._check_member(group, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            self._synced(group, member_id)
            return SyncResult(ErrorCode.NONE, member.assignment)
        assert group.state is GroupState.COMPLETING_REBALANCE, group.state
        _answer(member.syncing, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        future = member.syncing = asyncio.get_running_loop().create_future()
        self._synced(group, member_id)
        if member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            self._move(group, GroupState.STABLE)
            log.info("kafka: group %r generation %d is stable", group.group_id, group.generation_id)
            for each in group.members.values():
                self._propagate_sync(group, each, SyncResult(ErrorCode.NONE, each.assignment))
        return await future

    def _synced(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _propagate_sync(self, group: _Group, member: _Member, result: SyncResult) -> None:
        future, member.syncing = member.syncing, None
        if future is not None:
            _answer(future, result)
            # Its session was not counted while it waited for the leader.
            self._schedule_expiry(group, member, member.session_timeout_ms)

    # ------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = self._check_member(group, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = group.members[member_id]
        self._schedule_expiry(group, member, member.session_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ------------------------------------------------------------ LeaveGroup

    def leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(member id, instance id) pairs leave (an instance id alone names a static
        member): the group's error, and each member's."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        errors = []
        removed = False
        for member_id, instance_id in leaving:
            if not member_id:
                existing = group.static_members.get(instance_id or "")
                if instance_id is None or existing is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                member_id = existing
            elif member_id in group.pending:
                group.pending.pop(member_id).cancel()
                self._count_members(group, -1)
                errors.append(ErrorCode.NONE)
                continue
            else:
                error = self._check_member(group, member_id, instance_id)
                if error is not ErrorCode.NONE:
                    errors.append(error)
                    continue
            member = group.members[member_id]
            log.info("kafka: member %s leaves group %r", member_id, group_id)
            _answer(member.joining, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
            self._remove(group, member)
            errors.append(ErrorCode.NONE)
            removed = True
        if removed:
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._prepare_rebalance(group)
            else:
                self._maybe_complete_join(group)
        self._forget_if_empty(group)
        return ErrorCode.NONE, errors

    # ------------------------------------------------------------ OffsetCommit

    def check_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Whether an OffsetCommit may be applied (Kafka's rules): from a member of
        the current generation, or, with generation -1 and no member, while the
        group has no member (a consumer that assigns itself partitions, an admin
        tool). A member's commit counts as its heartbeat."""
        group = self._groups.get(group_id)
        if group is None or not group.members:
            if generation_id < 0:
                return ErrorCode.NONE
            if group is None:
                return ErrorCode.ILLEGAL_GENERATION  # Kafka's answer before OffsetCommit v9
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.UNKNOWN_MEMBER_ID  # the group has members: they commit
        error = self._check_member(group, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members[member_id]
        if group.state is GroupState.STABLE:
            self._schedule_expiry(group, member, member.session_timeout_ms)
        return ErrorCode.NONE

    # ------------------------------------------------------------ members

    @staticmethod
    def _check_member(group: _Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            existing = group.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _schedule_expiry(self, group: _Group, member: _Member, timeout_ms: int) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._expire_member, group, member
        )

    def _expire_member(self, group: _Group, member: _Member) -> None:
        if not self._current(group) or group.members.get(member.member_id) is not member:
            return
        member.expiry = None
        if not member.is_new and (member.joining is not None or member.syncing is not None):
            return  # waiting for the group: its session counts again once answered
        log.info(
            "kafka: group %r removes member %s: no heartbeat within its session timeout (%d ms)",
            group.group_id,
            member.member_id,
            member.session_timeout_ms,
        )
        _answer(member.joining, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._remove(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(group)
        self._forget_if_empty(group)

    def _expire_pending(self, group: _Group, member_id: str) -> None:
        if not self._current(group) or group.pending.pop(member_id, None) is None:
            return
        self._count_members(group, -1)
        if group.state is GroupState.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(group)
        self._forget_if_empty(group)

    def _remove(self, group: _Group, member: _Member) -> None:
        del group.members[member.member_id]
        self._count_members(group, -1)
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None
        instance_id = member.group_instance_id
        if instance_id is not None and group.static_members.get(instance_id) == member.member_id:
            del group.static_members[instance_id]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        group.pending_sync.discard(member.member_id)
        # Nothing waits for ever on a member that is gone.
        _answer(member.syncing, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        member.syncing = None

    # ------------------------------------------------------------ groups

    @staticmethod
    def _move(group: _Group, new: GroupState) -> None:
        """The one place a group's state changes; an illegal move raises
        (group_state.py)."""
        check_group_transition(group.group_id, group.state, new)
        group.state = new

    def _current(self, group: _Group) -> bool:
        return self._groups.get(group.group_id) is group

    def _forget_if_empty(self, group: _Group) -> None:
        if group.members or group.pending or not self._current(group):
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            return  # the rebalance in course ends it (to Empty) and forgets it
        for timer in (group.join_timer, group.sync_timer):
            if timer is not None:
                timer.cancel()
        del self._groups[group.group_id]
        if group.role is not None:
            left = self._role_groups[group.role] - 1
            if left:
                self._role_groups[group.role] = left
            else:
                del self._role_groups[group.role]

    def close(self) -> None:
        """The broker stops: every waiting request is answered NOT_COORDINATOR (the
        clients find the coordinator again) and every timer cancelled."""
        for group in self._groups.values():
            for timer in (group.join_timer, group.sync_timer, *group.pending.values()):
                if timer is not None:
                    timer.cancel()
            for member in group.members.values():
                if member.expiry is not None:
                    member.expiry.cancel()
                _answer(member.joining, JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                _answer(member.syncing, SyncResult(ErrorCode.NOT_COORDINATOR))
        self._groups.clear()
        self._member_count = 0
        self._role_groups.clear()
        self._role_members.clear()
