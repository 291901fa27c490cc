"""A consumer group's offsets on partitions another broker of the cluster owns.

A group's coordinator (the leader of the coordinator shard the group hashes to) and
the owners of its partitions' topics are often different brokers, and only a
topic's owner may acknowledge on its subscriptions. So:

- `PeerGroupOffsets` (the coordinator's side, group_offsets.OffsetsElsewhere) finds
  each partition's live owner and hands it the offsets of its partitions in one
  Peer call per owner (CommitGroupOffsets, FetchGroupOffsets; HoldGroupOffsets for
  offsets committed in a transaction, txn_offset_holds.py). Whatever stops that
  (the owner down or its topic moving, a peer call failing, the owner no longer
  owning it) is answered COORDINATOR_LOAD_IN_PROGRESS for those partitions, which
  Kafka clients retry: a commit not answered NONE may or may not have reached the
  owner's cursor, as with any Kafka commit that timed out, and the group's next
  commit replaces it.
- `GroupOffsetsHere` (the owner's side, cluster.peers.GroupOffsetsHere) commits,
  reads and holds on the partitions this broker owns, handing nothing on.

Standalone every partition is here and neither is used.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

from dispatcher import IsolationLevel
from managed_ledger import TxnId
from stableline.broker.cluster.peers import (
    FetchedGroupOffset,
    GroupOffsetCommit,
    GroupOffsetHold,
    PeerClient,
)
from stableline.broker.kafka.coordinator.group_offsets import (
    CommittedOffset,
    GroupOffsets,
    OffsetToCommit,
)
from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.broker.kafka.server.txn_offset_holds import hold_offset_here
from stableline.broker.topics.placement import TopicPlacement
from stableline.broker.txn.coordinators import Coordinators
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)

# What a partition whose owner cannot be reached now answers: clients retry it.
RETRY_LATER = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

PartitionName = Callable[[str, int], Awaitable[TopicName | None]]


class PeerGroupOffsets:
    """Hands a group's offsets to the owners of its partitions (module docstring)."""

    def __init__(
        self,
        partition_name: PartitionName,
        placement: TopicPlacement,
        peers: Callable[[], PeerClient],
    ) -> None:
        """`partition_name(kafka topic, partition)`: its stableline topic (None: none);
        `peers`: the peer client (asked for only when a call is made)."""
        self._partition_name = partition_name
        self._placement = placement
        self._peers = peers

    async def _owner(self, kafka_topic: str, partition: int) -> str | None:
        """The gRPC address of the partition's live owner; None when it has none now
        (or it is this broker again: the caller retries)."""
        name = await self._partition_name(kafka_topic, partition)
        if name is None:
            return None
        try:
            owner = await self._placement.serving_broker(name)
        except Exception as error:  # not live, or the metadata store away: retried
            log.info("kafka: the owner of %s cannot be reached now: %s", name, error)
            return None
        return None if owner is None else owner.grpc_address

    async def _by_owner(self, partitions: Sequence[tuple[str, int]]) -> dict[str | None, list[int]]:
        """The indexes of `partitions`, grouped by their owners' addresses."""
        owners = await asyncio.gather(*(self._owner(topic, index) for topic, index in partitions))
        grouped: dict[str | None, list[int]] = defaultdict(list)
        for at, owner in enumerate(owners):
            grouped[owner].append(at)
        return grouped

    async def commit(
        self, group_id: str, offsets: Sequence[OffsetToCommit], level: IsolationLevel
    ) -> list[ErrorCode]:
        results = [RETRY_LATER] * len(offsets)
        grouped = await self._by_owner([(each.topic, each.partition) for each in offsets])
        read_committed = level is IsolationLevel.READ_COMMITTED

        async def at_owner(owner: str, indexes: list[int]) -> None:
            commits = [
                GroupOffsetCommit(
                    offsets[at].topic,
                    offsets[at].partition,
                    offsets[at].offset,
                    offsets[at].metadata or "",
                )
                for at in indexes
            ]
            try:
                codes = await self._peers().commit_group_offsets(
                    owner, group_id, read_committed, commits
                )
            except Exception as error:
                log.info("kafka: group %r's commit at %s failed: %s", group_id, owner, error)
                return
            for at, code in zip(indexes, codes, strict=True):
                results[at] = _retried(ErrorCode(code))

        await asyncio.gather(
            *(at_owner(owner, indexes) for owner, indexes in grouped.items() if owner is not None)
        )
        return results

    async def fetch(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> list[CommittedOffset]:
        results = [CommittedOffset(-1, "", RETRY_LATER)] * len(partitions)
        grouped = await self._by_owner(partitions)

        async def at_owner(owner: str, indexes: list[int]) -> None:
            try:
                fetched = await self._peers().fetch_group_offsets(
                    owner, group_id, [partitions[at] for at in indexes]
                )
            except Exception as error:
                log.info("kafka: group %r's offsets at %s: %s", group_id, owner, error)
                return
            for at, each in zip(indexes, fetched, strict=True):
                results[at] = CommittedOffset(
                    each.offset, each.metadata, _retried(ErrorCode(each.error_code))
                )

        await asyncio.gather(
            *(at_owner(owner, indexes) for owner, indexes in grouped.items() if owner is not None)
        )
        return results

    async def hold(
        self,
        group_id: str,
        txn_id: TxnId,
        holds: Sequence[GroupOffsetHold],
        level: IsolationLevel,
    ) -> list[ErrorCode]:
        """Hold each offset's acknowledgement in `txn_id` at the partition's owner: an
        error code for each, in order."""
        results = [RETRY_LATER] * len(holds)
        grouped = await self._by_owner([(each.topic, each.partition) for each in holds])
        read_committed = level is IsolationLevel.READ_COMMITTED

        async def at_owner(owner: str, indexes: list[int]) -> None:
            try:
                codes = await self._peers().hold_group_offsets(
                    owner, group_id, read_committed, txn_id, [holds[at] for at in indexes]
                )
            except Exception as error:
                log.info(
                    "kafka: group %r's hold in %s at %s failed: %s", group_id, txn_id, owner, error
                )
                return
            for at, code in zip(indexes, codes, strict=True):
                results[at] = _retried(ErrorCode(code))

        await asyncio.gather(
            *(at_owner(owner, indexes) for owner, indexes in grouped.items() if owner is not None)
        )
        return results


def _retried(code: ErrorCode) -> ErrorCode:
    """The owner no longer owns it (it moved meanwhile): the client retries."""
    return RETRY_LATER if code is ErrorCode.NOT_LEADER_OR_FOLLOWER else code


class GroupOffsetsHere:
    """The owner's side: a coordinator elsewhere commits and reads here (module
    docstring); implements cluster.peers.GroupOffsetsHere."""

    def __init__(self, offsets: GroupOffsets, coordinators: Coordinators | None = None) -> None:
        """`coordinators`: this broker's, for holds in transactions (None: refused)."""
        self._offsets = offsets
        self._coordinators = coordinators

    async def commit_here(
        self, group_id: str, read_committed: bool, offsets: list[GroupOffsetCommit]
    ) -> list[int]:
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        results = await self._offsets.commit(
            group_id,
            [
                OffsetToCommit(each.topic, each.partition, each.offset, each.metadata or None)
                for each in offsets
            ],
            level,
            here_only=True,
        )
        return [int(error) for _, _, error in results]

    async def fetch_here(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[FetchedGroupOffset]:
        fetched = await self._offsets.fetch(group_id, partitions, here_only=True)
        return [
            FetchedGroupOffset(each.offset, each.metadata, int(each.error))
            for _, _, each in fetched
        ]

    async def hold_here(
        self, group_id: str, read_committed: bool, txn_id: TxnId, holds: list[GroupOffsetHold]
    ) -> list[int]:
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        if self._coordinators is None:
            return [int(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * len(holds)
        codes = []
        for each in holds:
            held = await hold_offset_here(
                self._offsets,
                self._coordinators,
                txn_id,
                group_id,
                each.topic,
                each.partition,
                each.offset,
                None if each.held_from < 0 else each.held_from,
                level,
            )
            codes.append(int(held.error))
        return codes
