"""Who may use a consumer group: its owner role, and what a member may say.

Kafka guards a group with ACLs (Read on the group for JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch and the transactional commits,
Describe for DescribeGroups). Here a group G is the subscription G on its topics,
and a subscription is its consumers' business, so with authorization on:

- A group belongs to the first role that claims it (a JoinGroup, an OffsetCommit,
  an AddOffsetsToTxn or a TxnOffsetCommit naming it); the owner is one of the
  group's records (group_records.py: the broker's own store, fsynced, standalone;
  the cluster's metadata store in a cluster) and durable before the claim is
  answered, so it outlives restarts and moves of the group's coordinator to
  another broker. Of two roles claiming a group at once one wins (compare-and-set
  on the owner read); the other is refused. Every group request of another role is
  refused GROUP_AUTHORIZATION_FAILED (DescribeGroups per group), and ListGroups
  shows a role only its own groups. Superuser roles may use every group and own
  none. A group that has neither members nor committed offsets, nor was claimed
  in the last CLAIM_HOLD_S (the claimant's join or commit may still be on its
  way), is unused: the next role to claim it owns it (nothing of the old owner's
  is left to protect, and a name is not kept from others for ever).
- Each topic still needs its own grant: OffsetCommit and OffsetFetch answer
  TOPIC_AUTHORIZATION_FAILED per partition without consume on it (api_base's
  `_topic`), and a JoinGroup of the "consumer" protocol is refused
  GROUP_AUTHORIZATION_FAILED when it subscribes to a topic the role may not consume.

Whatever authorization says, a JoinGroup must name its protocol type and at least
one protocol, and a "consumer" protocol's metadata must decode as Kafka's
ConsumerProtocolSubscription; otherwise INCONSISTENT_GROUP_PROTOCOL, before the
group is touched: the leader hands every member's metadata to its assignor, and
one member's empty metadata made librdkafka leaders abort.

With authentication off nobody owns anything: every check passes.
"""

from __future__ import annotations

import logging
import time

from stableline.broker.kafka.coordinator.group_records import GroupRecords
from stableline.broker.kafka.protocol.codec import MalformedRequest, Reader

log = logging.getLogger(__name__)

# The protocol type of Kafka consumers, whose metadata the broker can read.
CONSUMER_PROTOCOL_TYPE = "consumer"
# A claimed group counts as in use this long, whatever else shows it.
CLAIM_HOLD_S = 30.0


def subscribed_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: the fields after
    its topics are skipped), or None when the bytes are not one."""
    if len(metadata) < 2:
        return None
    reader = Reader(metadata)
    try:
        version = reader.int16()
        if version < 0:
            return None
        topics = reader.array(lambda each: each.string())
        reader.nullable_bytes()  # user data
    except MalformedRequest:
        return None
    return topics


def check_protocols(protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> str | None:
    """Why a JoinGroup's protocols cannot be taken (None: they can)."""
    if not protocol_type:
        return "the protocol type is empty"
    if not protocols:
        return "no protocol is offered"
    for name, metadata in protocols:
        if not name:
            return "a protocol has an empty name"
        if protocol_type == CONSUMER_PROTOCOL_TYPE and subscribed_topics(metadata) is None:
            return f"the metadata of protocol {name!r} is not a consumer subscription"
    return None


def protocol_topics(protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> set[str]:
    """Every topic the protocols subscribe to (none unless of the consumer type)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return set()
    topics: set[str] = set()
    for _name, metadata in protocols:
        topics.update(subscribed_topics(metadata) or ())
    return topics


class GroupOwners:
    """The durable owner role of each group (see the module docstring)."""

    def __init__(self, records: GroupRecords, hold_s: float = CLAIM_HOLD_S) -> None:
        self._records = records
        self._hold_s = hold_s
        # Groups claimed lately (monotonic time), oldest first.
        self._fresh: dict[str, float] = {}

    def owner(self, group_id: str) -> str | None:
        return self._records.owner(group_id)

    def claimed_lately(self, group_id: str) -> bool:
        claimed = self._fresh.get(group_id)
        return claimed is not None and time.monotonic() - claimed < self._hold_s

    async def claim(self, group_id: str, role: str, replacing: str | None) -> bool:
        """`role` owns the group from now on, if `replacing` (the owner the caller
        read) still does: True once durable. False when another role claimed it
        first (on this broker or another)."""
        now = time.monotonic()
        while self._fresh:
            oldest, claimed = next(iter(self._fresh.items()))
            if now - claimed < self._hold_s:
                break
            del self._fresh[oldest]
        self._fresh.pop(group_id, None)
        self._fresh[group_id] = now
        owner = await self._records.claim(group_id, role, replacing)
        if owner != role:
            log.info("kafka: role %r lost the claim of group %r to %r", role, group_id, owner)
            return False
        log.info("kafka: group %r belongs to role %r", group_id, role)
        return True
