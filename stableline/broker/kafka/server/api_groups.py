"""Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups.

The group protocol runs in this broker's GroupCoordinator (group_coordinator.py,
in memory); committed offsets are the acknowledgements of the group's stableline
subscriptions (group_offsets.py, durable). FindCoordinator answers the broker
_coordinator_node names for a group or a transactional id; the group APIs answer
NOT_COORDINATOR for a group another broker coordinates. A group id must be a
valid subscription name (stableline/names.py): else INVALID_GROUP_ID. With
authorization on, a group is its owner role's (group_access.py): other roles get
GROUP_AUTHORIZATION_FAILED, ListGroups lists a role's own groups only.
"""

from __future__ import annotations

import logging
from typing import Any

from stableline.broker.kafka.coordinator.group_access import (
    GroupOwners,
    check_protocols,
    protocol_topics,
)
from stableline.broker.kafka.coordinator.group_coordinator import GroupCoordinator, JoinRequest
from stableline.broker.kafka.coordinator.group_offsets import (
    GroupOffsets,
    OffsetToCommit,
    check_group_id,
)
from stableline.broker.kafka.coordinator.group_records import GroupRecords, LocalGroupRecords
from stableline.broker.kafka.coordinator.group_state import GroupState
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_groups as mg
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.kafka.server.api_base import (
    CoordinatorNodeUnavailable,
    KafkaApiBase,
    KafkaSettings,
)
from stableline.broker.kafka.server.client_address import client_host
from stableline.broker.kafka.server.group_offsets_peers import (
    RETRY_LATER,
    GroupOffsetsHere,
    PeerGroupOffsets,
)
from stableline.broker.security.permissions import Action
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.txn.coordinators import Coordinators
from stableline.metadata import MetadataStoreError

log = logging.getLogger(__name__)

# ListGroups' protocol type of a group known only by its committed offsets (Kafka's
# "simple" groups, which commit without joining, have none either).
_NO_PROTOCOL = ""


class GroupApis(KafkaApiBase):
    HANDLES = {
        m.ApiKey.FIND_COORDINATOR: "_find_coordinator",
        m.ApiKey.JOIN_GROUP: "_join_group",
        m.ApiKey.SYNC_GROUP: "_sync_group",
        m.ApiKey.HEARTBEAT: "_heartbeat",
        m.ApiKey.LEAVE_GROUP: "_leave_group",
        m.ApiKey.OFFSET_COMMIT: "_offset_commit",
        m.ApiKey.OFFSET_FETCH: "_offset_fetch",
        m.ApiKey.DESCRIBE_GROUPS: "_describe_groups",
        m.ApiKey.LIST_GROUPS: "_list_groups",
    }

    def __init__(
        self,
        registry: TopicRegistry,
        settings: KafkaSettings,
        coordinators: Coordinators | None = None,
        *,
        group_records: GroupRecords | None = None,
        **options: Any,
    ) -> None:
        super().__init__(registry, settings, coordinators, **options)
        self.group_coordinator = GroupCoordinator(settings.groups)
        # The internal API of committed offsets (a transactional commit uses it too).
        elsewhere: PeerGroupOffsets | None = None
        if coordinators is not None:
            leaders = coordinators.leaders
            elsewhere = PeerGroupOffsets(
                self._partition_name, registry.placement, lambda: leaders.peers
            )
        # The groups' indexes and owners: the broker's own store unless the app
        # hands over the cluster's (shared_group_records.py).
        records = group_records if group_records is not None else LocalGroupRecords(registry.store)
        self.group_offsets = GroupOffsets(self._topic, records, elsewhere)
        # How TxnOffsetCommit reaches partitions another broker owns (api_txn.py).
        self._offsets_elsewhere = elsewhere
        # What a group's coordinator on another broker asks of this one (the Peer
        # service's group calls, handed over by the app).
        self.group_offsets_here = GroupOffsetsHere(self.group_offsets, coordinators)
        self._group_owners = GroupOwners(records)

    async def _group_error(self, group_id: str, claim: bool = False) -> m.ErrorCode:
        """INVALID_GROUP_ID, NOT_COORDINATOR (another broker's group),
        GROUP_AUTHORIZATION_FAILED (another role's group), or NONE. `claim`: the
        request makes the group the caller's when nobody uses it (group_access.py)."""
        error = check_group_id(group_id)
        if error is not m.ErrorCode.NONE:
            return error
        try:
            # A consumer group belongs to no role: every member finds one coordinator.
            coordinator = await self._coordinator_node(group_id, owner="")
        except CoordinatorNodeUnavailable:
            return m.ErrorCode.COORDINATOR_NOT_AVAILABLE
        if coordinator.node_id != self._this_node().node_id:
            return m.ErrorCode.NOT_COORDINATOR
        return await self._group_access(group_id, claim)

    def _group_role(self) -> str | None:
        """The role whose groups the caller uses: None for every group (a superuser,
        or authorization off)."""
        caller = self._caller()
        if self._guard is None or caller is None or self._guard.is_superuser(caller.role):
            return None
        return caller.role

    def _group_in_use(self, group_id: str) -> bool:
        return (
            self.group_coordinator.knows(group_id)
            or self.group_offsets.has_offsets(group_id)
            or self._group_owners.claimed_lately(group_id)
        )

    async def _group_access(self, group_id: str, claim: bool) -> m.ErrorCode:
        """GROUP_AUTHORIZATION_FAILED unless the caller may use the group: it owns it,
        or nobody uses it (then a claim makes it the caller's), or nobody owns the
        group in use and the caller claims it (one from before authorization)."""
        role = self._group_role()
        if role is None:
            return m.ErrorCode.NONE
        owner = self._group_owners.owner(group_id)
        if owner == role:
            return m.ErrorCode.NONE
        if self._group_in_use(group_id) and (owner is not None or not claim):
            log.info(
                "kafka: role %r refused group %r: it belongs to %s",
                role,
                group_id,
                "another role" if owner is not None else "no role yet (a member claims it)",
            )
            return m.ErrorCode.GROUP_AUTHORIZATION_FAILED
        if claim:
            try:
                claimed = await self._group_owners.claim(group_id, role, owner)
            except MetadataStoreError as error:
                log.warning("kafka: the claim of group %r cannot be written: %s", group_id, error)
                return m.ErrorCode.COORDINATOR_NOT_AVAILABLE
            if not claimed:
                return m.ErrorCode.GROUP_AUTHORIZATION_FAILED
        return m.ErrorCode.NONE

    def _may_see_group(self, group_id: str) -> bool:
        role = self._group_role()
        return role is None or self._group_owners.owner(group_id) == role

    # ------------------------------------------------------------ FindCoordinator

    async def _find_coordinator(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_find_coordinator(reader, version)
        if request.key_type not in (mg.GROUP_KEY, mg.TRANSACTION_KEY):
            return mg.write_find_coordinator(
                version,
                m.ErrorCode.INVALID_REQUEST,
                message=f"coordinator key type {request.key_type}: 0 (group) or 1 (transaction)",
            )
        if not request.key:
            return mg.write_find_coordinator(
                version, m.ErrorCode.INVALID_REQUEST, message="the coordinator key is empty"
            )
        if request.key_type == mg.GROUP_KEY and check_group_id(request.key) != m.ErrorCode.NONE:
            return mg.write_find_coordinator(
                version,
                m.ErrorCode.INVALID_GROUP_ID,
                message="a group id is a subscription name here: 1 to 255 bytes of "
                "printable UTF-8, without '/'",
            )
        owner = "" if request.key_type == mg.GROUP_KEY else None
        try:
            node = await self._coordinator_node(request.key, owner=owner)
        except CoordinatorNodeUnavailable as error:
            return mg.write_find_coordinator(
                version, m.ErrorCode.COORDINATOR_NOT_AVAILABLE, message=str(error)
            )
        return mg.write_find_coordinator(
            version, m.ErrorCode.NONE, node.node_id, node.host, node.port
        )

    # ------------------------------------------------------------ JoinGroup

    async def _join_group(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_join_group(reader, version)
        error = await self._group_error(request.group_id)
        if error is m.ErrorCode.NONE:
            error = self._join_refusal(request)
        if error is m.ErrorCode.NONE:
            error = await self._group_access(request.group_id, claim=True)
        if error is not m.ErrorCode.NONE:
            return mg.write_join_group(
                version, mg.JoinGroupResponse(error, member_id=request.member_id)
            )
        result = await self.group_coordinator.join(
            JoinRequest(
                request.group_id,
                request.member_id,
                request.group_instance_id,
                header.client_id or "",
                client_host.get(),
                request.session_timeout_ms,
                request.rebalance_timeout_ms,
                request.protocol_type,
                request.protocols,
                require_known_member_id=version >= 4,
                role=self._group_role(),
            )
        )
        return mg.write_join_group(
            version,
            mg.JoinGroupResponse(
                result.error,
                result.generation_id,
                result.protocol_name,
                result.leader,
                result.member_id,
                tuple(
                    mg.JoinedMember(each.member_id, each.group_instance_id, each.metadata)
                    for each in result.members
                ),
            ),
        )

    def _join_refusal(self, request: mg.JoinGroupRequest) -> m.ErrorCode:
        """INCONSISTENT_GROUP_PROTOCOL for protocols no member could use,
        GROUP_AUTHORIZATION_FAILED for a subscription to a topic the caller may not
        consume; NONE. Decided before the group is touched."""
        why = check_protocols(request.protocol_type, request.protocols)
        if why is not None:
            log.info("kafka: JoinGroup of group %r refused: %s", request.group_id, why)
            return m.ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if self._group_role() is None:
            return m.ErrorCode.NONE
        for kafka_name in sorted(protocol_topics(request.protocol_type, request.protocols)):
            name = self._topic_name(kafka_name)
            why = (
                f"{kafka_name!r} is not a topic name"
                if name is None
                else self._refusal(Action.CONSUME, name)
            )
            if why is not None:
                log.info("kafka: JoinGroup of group %r refused: %s", request.group_id, why)
                return m.ErrorCode.GROUP_AUTHORIZATION_FAILED
        return m.ErrorCode.NONE

    # ------------------------------------------------------------ SyncGroup

    async def _sync_group(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_sync_group(reader, version)
        error = await self._group_error(request.group_id)
        if error is not m.ErrorCode.NONE:
            return mg.write_sync_group(version, error)
        result = await self.group_coordinator.sync(
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id,
            dict(request.assignments),
        )
        return mg.write_sync_group(version, result.error, result.assignment)

    # ------------------------------------------------------------ Heartbeat

    async def _heartbeat(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_heartbeat(reader, version)
        error = await self._group_error(request.group_id)
        if error is m.ErrorCode.NONE:
            error = self.group_coordinator.heartbeat(
                request.group_id,
                request.generation_id,
                request.member_id,
                request.group_instance_id,
            )
        return mg.write_error_only(version, error)

    # ------------------------------------------------------------ LeaveGroup

    async def _leave_group(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_leave_group(reader, version)
        error = await self._group_error(request.group_id)
        if error is not m.ErrorCode.NONE:
            return mg.write_leave_group(version, error, [])
        error, errors = self.group_coordinator.leave(
            request.group_id,
            [(member.member_id, member.group_instance_id) for member in request.members],
        )
        if version <= 2 and error is m.ErrorCode.NONE and errors:
            error = errors[0]  # one member, its error is the answer's
        left = [
            mg.LeftMember(member.member_id, member.group_instance_id, member_error)
            for member, member_error in zip(request.members, errors, strict=False)
        ]
        return mg.write_leave_group(version, error, left)

    # ------------------------------------------------------------ OffsetCommit

    async def _offset_commit(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_offset_commit(reader, version, self._settings.max_partitions_per_request)
        error = await self._group_error(request.group_id, claim=True)
        if error is m.ErrorCode.NONE:
            error = self.group_coordinator.check_commit(
                request.group_id,
                request.generation_id,
                request.member_id,
                request.group_instance_id,
            )
        if error is not m.ErrorCode.NONE:
            results = [(each.topic, each.partition, error) for each in request.offsets]
            return mg.write_offset_commit(version, results)
        results = await self.group_offsets.commit(
            request.group_id,
            [
                OffsetToCommit(each.topic, each.partition, each.offset, each.metadata)
                for each in request.offsets
            ],
            self._fetch_levels.level_of(header.client_id),
        )
        return mg.write_offset_commit(version, results)

    # ------------------------------------------------------------ OffsetFetch

    async def _offset_fetch(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mg.read_offset_fetch(reader, version, self._settings.max_partitions_per_request)
        error = await self._group_error(request.group_id)
        if error is not m.ErrorCode.NONE:
            failed = mg.FetchedOffset(-1, "", error)
            results = [(topic, partition, failed) for topic, partition in request.partitions or ()]
            return mg.write_offset_fetch(version, results, error)
        fetched = await self.group_offsets.fetch(request.group_id, request.partitions)
        # A partition whose owner cannot be reached now: the whole answer says so
        # (from v2), so that clients retry instead of starting without its offset.
        whole = (
            RETRY_LATER
            if version >= 2 and any(each.error is RETRY_LATER for _, _, each in fetched)
            else m.ErrorCode.NONE
        )
        return mg.write_offset_fetch(
            version,
            [
                (topic, partition, mg.FetchedOffset(each.offset, each.metadata, each.error))
                for topic, partition, each in fetched
            ],
            whole,
        )

    # ------------------------------------------------------------ DescribeGroups

    async def _describe_groups(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        described = []
        for group_id in mg.read_describe_groups(reader, version):
            error = await self._group_error(group_id)
            if error is m.ErrorCode.NONE and not self._may_see_group(group_id):
                error = m.ErrorCode.GROUP_AUTHORIZATION_FAILED
            if error is not m.ErrorCode.NONE:
                described.append(mg.DescribedGroup(error, group_id, ""))
                continue
            described.append(self._describe(group_id))
        return mg.write_describe_groups(version, described)

    def _describe(self, group_id: str) -> mg.DescribedGroup:
        group = self.group_coordinator.describe(group_id)
        if group is None:
            # No member: Empty while it has committed offsets (they outlive its
            # members and restarts), else unknown, which Kafka calls Dead.
            state = (
                GroupState.EMPTY if self.group_offsets.has_offsets(group_id) else GroupState.DEAD
            )
            return mg.DescribedGroup(m.ErrorCode.NONE, group_id, state.value, _NO_PROTOCOL)
        return mg.DescribedGroup(
            m.ErrorCode.NONE,
            group_id,
            group.state.value,
            group.protocol_type,
            group.protocol_name,
            tuple(
                mg.DescribedMember(
                    member.member_id,
                    member.group_instance_id,
                    member.client_id,
                    member.client_host,
                    member.metadata,
                    member.assignment,
                )
                for member in group.members
            ),
        )

    # ------------------------------------------------------------ ListGroups

    async def _list_groups(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        mg.read_list_groups(reader, version)
        listed = {
            group_id: protocol_type
            for group_id, protocol_type, _state in self.group_coordinator.groups()
        }
        for group_id in self.group_offsets.groups_with_offsets():
            listed.setdefault(group_id, _NO_PROTOCOL)
        visible = [
            (group_id, kind) for group_id, kind in listed.items() if self._may_see_group(group_id)
        ]
        return mg.write_list_groups(version, m.ErrorCode.NONE, sorted(visible))
