"""A consumer group's committed offsets are its stableline subscription's acks.

A Kafka consumer group G is the subscription named G on each partition's topic.
Committing offset O for a partition acknowledges, on that subscription, every
message before O (a cumulative ack up to the entry before the one holding O, plus
the first messages of that entry when O falls inside it: ack_target) and nothing
from O on; a commit below the subscription's acknowledgement moves it back, as a
Kafka commit replaces the previous one. The commit is answered only once the
cursor holding it is fsynced (ManagedCursor.persist), so a committed offset
survives kill -9. OffsetFetch reads the acknowledgement back:

- the committed offset itself (and its metadata string), kept with the cursor in
  the same write, while the subscription's acknowledgement is still where that
  commit left it;
- otherwise the subscription's first unacknowledged offset (a stableline consumer
  of the same subscription acknowledged more, or someone moved it): the group
  resumes where the subscription stands;
- -1 when the partition's topic has no subscription of that name.

The subscription is made by the group's first commit on a partition, as Failover
(one consumer at a time reads a partition, as in a group), with the isolation
level of the committing client's latest Fetch on this broker (fetch_levels.py).
It holds back retention like any subscription: what the group has not committed
is kept. Which (topic, partition)s a group has committed on is the group's index
(group_records.py: the broker's own store standalone, the cluster's metadata store
in a cluster), for OffsetFetch of every partition, ListGroups and DescribeGroups of
a group with no member, across restarts and coordinator moves; a commit is answered
once its partitions are in the index, and an OffsetFetch that finds the
subscription deleted drops it from the index.

In a cluster a partition's topic may be owned by another broker than the group's
coordinator: only the owner may acknowledge on its subscriptions, so the coordinator
hands the offsets of such partitions to their owners (`elsewhere`,
OffsetsElsewhere: the Peer service's CommitGroupOffsets and FetchGroupOffsets),
which commit and read them here with `here_only`. The cursors are replicated with
their topic, so a group's committed offsets fail over with each partition's topic,
and its index with the cluster's metadata store, whichever broker coordinates the
group.

The commit metadata string is at most MAX_METADATA_BYTES of UTF-8 (Kafka's
offset.metadata.max.bytes); longer is refused with OFFSET_METADATA_TOO_LARGE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dispatcher import IsolationLevel, Subscription, SubscriptionType
from managed_ledger import Position
from stableline.broker.kafka.coordinator.group_records import GroupRecords
from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.metadata import MetadataStoreError
from stableline.names import InvalidNameError, check_name

log = logging.getLogger(__name__)

# Kafka's offset.metadata.max.bytes.
MAX_METADATA_BYTES = 4096

# Cursor properties of a commit: the offset, its metadata, and the first
# unacknowledged offset it left (while it still is, OffsetFetch answers the offset).
OFFSET_PROPERTY = "kafka.offset"
METADATA_PROPERTY = "kafka.metadata"
ACKED_PROPERTY = "kafka.acked"

TopicLookup = Callable[[str, int], Awaitable[Topic | ErrorCode]]


class OffsetsElsewhere(Protocol):
    """Commits and reads a group's offsets on partitions another broker owns (those
    this broker's topic look-up answers NOT_LEADER_OR_FOLLOWER): an error code for
    each commit, a CommittedOffset for each partition, in the order given."""

    async def commit(
        self, group_id: str, offsets: Sequence[OffsetToCommit], level: IsolationLevel
    ) -> list[ErrorCode]: ...

    async def fetch(
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> list[CommittedOffset]: ...


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str  # the Kafka topic name
    partition: int
    offset: int
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int  # -1: none
    metadata: str
    error: ErrorCode = ErrorCode.NONE


NO_OFFSET = CommittedOffset(-1, "")


@dataclass(frozen=True, slots=True)
class AckTarget:
    """Where "every message before offset O" lies in a topic: every entry at or
    before `before`, and the first `messages` messages of entry `within` (None when
    O is an entry's first offset, or at or past the log's end)."""

    before: Position
    within: Position | None = None
    messages: int = 0


def check_group_id(group_id: str) -> ErrorCode:
    """NONE if `group_id` can name a subscription, else INVALID_GROUP_ID."""
    try:
        check_name("subscription", group_id)
    except InvalidNameError:
        return ErrorCode.INVALID_GROUP_ID
    return ErrorCode.NONE


def ack_target(topic: Topic, offset: int) -> AckTarget:
    """Where the acknowledgement of every message before `offset` lies. An offset
    past the log's end acknowledges the whole log; one that retention deleted or a
    damaged entry held, up to the next entry that can be read."""
    ledger = topic.ledger
    offsets = ledger.offsets
    position = offsets.position_of(offset) if offset < offsets.end_offset else None
    if position is None:
        return AckTarget(ledger.last_confirmed)
    found = ledger.read(position, 1, position)
    before = Position(position.ledger_id, position.entry_id - 1)
    if not found:
        return AckTarget(before)
    base = offsets.base_of(found[0])
    if base >= offset:
        return AckTarget(before)
    return AckTarget(before, position, offset - base)


def acknowledged_offset(topic: Topic, subscription: Subscription) -> int:
    """The subscription's first unacknowledged offset: that of the first entry after
    its mark-delete position, past the batch indexes acknowledged from its start."""
    ledger = topic.ledger
    cursor = subscription.cursor
    following = ledger.first_position_after(cursor.mark_delete)
    if following is None or following > ledger.last_confirmed:
        return ledger.offsets.end_offset
    found = ledger.read(following, 1, following)
    if not found:
        return ledger.offsets.offset_after(following)
    acked = cursor.partial_acks.get(following, ())
    first_open = 0
    while first_open in acked:
        first_open += 1
    return ledger.offsets.base_of(found[0]) + first_open


class GroupOffsets:
    """Commits and reads consumer groups' offsets on their subscriptions.

    The internal API for other Kafka APIs (TxnOffsetCommit):

    - `commit(group_id, offsets, level)` commits plain offsets, durably, as
      OffsetCommit does, once the group coordinator has allowed it.
    - `subscription(group_id, topic, partition, level)` finds or makes the group's
      subscription on one partition: (Topic, Subscription), or the error code.
    - `ack_target(topic, offset)` (module function) says which entry positions and
      batch indexes "every message before offset" is, and
      `acknowledged_offset(topic, subscription)` where the acknowledgement stands.

    A transactional commit holds the same acknowledgement in a stableline
    transaction instead of applying it: for each partition, take the subscription,
    list the message ids from acknowledged_offset up to ack_target(offset) (each
    entry (position, -1) between, the batch indexes of `within`), hold them with
    stableline/broker/txn/transactional_acks.py ack_in_any_transaction, and call
    `record_commit` when the transaction commits so that OffsetFetch answers the
    exact offset and metadata (until then it answers the acknowledgement as it
    stands), and `index` for the group's index.
    """

    def __init__(
        self,
        topic_of: TopicLookup,
        records: GroupRecords,
        elsewhere: OffsetsElsewhere | None = None,
    ) -> None:
        """`topic_of(kafka topic, partition)`: the partition's Topic or the error
        code to answer (KafkaApiBase._topic); `records`: where the groups' indexes
        are kept; `elsewhere`: how partitions another broker owns are reached (None:
        standalone, every partition is here)."""
        self._topic_of = topic_of
        self._records = records
        self._elsewhere = elsewhere

    # ------------------------------------------------------------ commit

    async def subscription(
        self, group_id: str, kafka_topic: str, partition: int, level: IsolationLevel
    ) -> tuple[Topic, Subscription] | ErrorCode:
        """The group's subscription on the partition, made (at `level`) if missing.
        BrokerFencedError while the broker's write gate is closed."""
        topic = await self._topic_of(kafka_topic, partition)
        if isinstance(topic, ErrorCode):
            return topic
        subscription = topic.subscriptions.get(group_id)
        if subscription is None:
            subscription = topic.create_subscription(
                group_id, SubscriptionType.FAILOVER, level, start_at_earliest=True
            )
            log.info(
                "kafka: group %r has a subscription on %s now (%s)",
                group_id,
                topic.name,
                level.value,
            )
        return topic, subscription

    async def commit(
        self,
        group_id: str,
        offsets: Sequence[OffsetToCommit],
        level: IsolationLevel,
        here_only: bool = False,
    ) -> list[tuple[str, int, ErrorCode]]:
        """Commit each partition's offset; answered once every cursor is durable
        (here, or at the partition's owner). `level`: the isolation level of a
        subscription this commit makes. `here_only`: the group's coordinator on
        another broker asked for the partitions this broker owns; nothing is handed
        on, and the coordinator keeps the group's index."""
        results: list[tuple[str, int, ErrorCode]] = []
        durable: list[tuple[int, Topic, int, Subscription]] = []
        for commit in offsets:
            error, applied = await self._apply(group_id, commit, level)
            results.append((commit.topic, commit.partition, error))
            if applied is not None:
                durable.append((len(results) - 1, *applied))
        elsewhere = [
            at
            for at, (_, _, error) in enumerate(results)
            if error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        ]
        outcomes, handed_on = await asyncio.gather(
            asyncio.gather(
                *(
                    self._persist(topic, ticket, subscription)
                    for _, topic, ticket, subscription in durable
                )
            ),
            self._commit_elsewhere(group_id, [offsets[at] for at in elsewhere], level, here_only),
        )
        for (at, _topic, _ticket, _subscription), error in zip(durable, outcomes, strict=True):
            if error is not ErrorCode.NONE:
                topic_name, partition, _ = results[at]
                results[at] = (topic_name, partition, error)
        for at, error in zip(elsewhere, handed_on, strict=True):
            topic_name, partition, _ = results[at]
            results[at] = (topic_name, partition, error)
        if here_only:
            return results
        committed = [at for at, (_, _, error) in enumerate(results) if error is ErrorCode.NONE]
        indexed = await self.index(group_id, [results[at][:2] for at in committed])
        if indexed is not ErrorCode.NONE:
            for at in committed:
                topic_name, partition, _ = results[at]
                results[at] = (topic_name, partition, indexed)
        return results

    async def index(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> ErrorCode:
        """The group's index lists these (Kafka topic, partition)s: NONE once it is
        durable, COORDINATOR_NOT_AVAILABLE when the store cannot take it now (the
        offsets are committed; the client commits again, which notes them)."""
        if not partitions:
            return ErrorCode.NONE
        try:
            await self._records.note(group_id, partitions)
        except MetadataStoreError as error:
            log.warning("kafka: the index of group %r cannot be written: %s", group_id, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    async def _commit_elsewhere(
        self,
        group_id: str,
        offsets: Sequence[OffsetToCommit],
        level: IsolationLevel,
        here_only: bool,
    ) -> list[ErrorCode]:
        if not offsets:
            return []
        if here_only or self._elsewhere is None:
            return [ErrorCode.NOT_LEADER_OR_FOLLOWER] * len(offsets)
        return await self._elsewhere.commit(group_id, offsets, level)

    async def _apply(
        self, group_id: str, commit: OffsetToCommit, level: IsolationLevel
    ) -> tuple[ErrorCode, tuple[Topic, int, Subscription] | None]:
        if commit.offset < 0:
            return ErrorCode.INVALID_REQUEST, None
        metadata = commit.metadata or ""
        if len(metadata.encode("utf-8", errors="surrogatepass")) > MAX_METADATA_BYTES:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE, None
        try:
            found = await self.subscription(group_id, commit.topic, commit.partition, level)
            if isinstance(found, ErrorCode):
                return found, None
            topic, subscription = found
            ticket = topic.write_gate.admit(topic.name)
        except BrokerFencedError as error:
            log.info("kafka: commit of group %r refused: %s", group_id, error)
            return ErrorCode.NOT_COORDINATOR, None
        self._acknowledge(topic, subscription, commit.offset)
        self.record_commit(commit, topic, subscription)
        return ErrorCode.NONE, (topic, ticket, subscription)

    @staticmethod
    def _acknowledge(topic: Topic, subscription: Subscription, offset: int) -> None:
        target = ack_target(topic, offset)
        if offset < acknowledged_offset(topic, subscription):
            # A commit replaces the one before. Stableline consumers of the
            # subscription, if any, keep their permits (as an admin reset does).
            permits = {consumer: consumer.permits for consumer in subscription.consumers}
            subscription.seek(target.before)
            for consumer, count in permits.items():
                subscription.flow(consumer, max(count, 0))
        else:
            subscription.acknowledge_through(target.before)
        if target.within is not None:
            subscription.ack([(target.within, index) for index in range(target.messages)])

    @staticmethod
    def record_commit(commit: OffsetToCommit, topic: Topic, subscription: Subscription) -> None:
        """Note the commit with its cursor (written with its next write): OffsetFetch
        answers this offset while the acknowledgement stays where it is now."""
        properties = subscription.cursor.properties
        properties[OFFSET_PROPERTY] = str(commit.offset)
        properties[ACKED_PROPERTY] = str(acknowledged_offset(topic, subscription))
        if commit.metadata:
            properties[METADATA_PROPERTY] = commit.metadata
        else:
            properties.pop(METADATA_PROPERTY, None)

    @staticmethod
    async def _persist(topic: Topic, ticket: int, subscription: Subscription) -> ErrorCode:
        try:
            await subscription.cursor.persist()
            topic.write_gate.confirm(ticket, topic.name)
        except BrokerFencedError as error:
            log.info("kafka: commit on %s not confirmed: %s", topic.name, error)
            return ErrorCode.NOT_COORDINATOR
        except Exception:
            log.exception("kafka: commit on %s failed", topic.name)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    # ------------------------------------------------------------ fetch

    async def fetch(
        self,
        group_id: str,
        partitions: Iterable[tuple[str, int]] | None,
        here_only: bool = False,
    ) -> list[tuple[str, int, CommittedOffset]]:
        """Each partition's committed offset (None: every partition the group has
        committed on), read here or at the partition's owner. `here_only`: as for
        commit (the coordinator forgets what the owner does not have)."""
        if partitions is None:
            partitions = self.committed_partitions(group_id)
        results = []
        for kafka_topic, partition in partitions:
            fetched = await self._fetch_one(group_id, kafka_topic, partition, forget=not here_only)
            results.append((kafka_topic, partition, fetched))
        elsewhere = [
            at
            for at, (_, _, fetched) in enumerate(results)
            if fetched.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        ]
        if elsewhere and not here_only and self._elsewhere is not None:
            handed_on = await self._elsewhere.fetch(group_id, [results[at][:2] for at in elsewhere])
            for at, fetched in zip(elsewhere, handed_on, strict=True):
                kafka_topic, partition, _ = results[at]
                results[at] = (kafka_topic, partition, fetched)
        return results

    async def _fetch_one(
        self, group_id: str, kafka_topic: str, partition: int, forget: bool = True
    ) -> CommittedOffset:
        topic = await self._topic_of(kafka_topic, partition)
        if isinstance(topic, ErrorCode):
            if topic is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return CommittedOffset(-1, "", topic)
            if forget:
                await self._forget(group_id, kafka_topic, partition)
            return NO_OFFSET  # as Kafka: no offset for a topic it does not know
        subscription = topic.subscriptions.get(group_id)
        if subscription is None:
            if forget:
                await self._forget(group_id, kafka_topic, partition)
            return NO_OFFSET
        acknowledged = acknowledged_offset(topic, subscription)
        properties = subscription.cursor.properties
        if OFFSET_PROPERTY in properties and properties.get(ACKED_PROPERTY) == str(acknowledged):
            return CommittedOffset(
                int(properties[OFFSET_PROPERTY]), properties.get(METADATA_PROPERTY, "")
            )
        return CommittedOffset(acknowledged, "")

    # ------------------------------------------------------------ index

    async def _forget(self, group_id: str, kafka_topic: str, partition: int) -> None:
        """The subscription (or its topic) was deleted: the index forgets it (or
        does on a later OffsetFetch, if the store cannot take it now)."""
        try:
            await self._records.forget(group_id, kafka_topic, partition)
        except MetadataStoreError as error:
            log.warning("kafka: the index of group %r cannot be written: %s", group_id, error)

    def committed_partitions(self, group_id: str) -> list[tuple[str, int]]:
        return self._records.partitions(group_id)

    def has_offsets(self, group_id: str) -> bool:
        return self._records.has_partitions(group_id)

    def groups_with_offsets(self) -> list[str]:
        """Every group with committed offsets (in its index), in name order."""
        return self._records.groups()
