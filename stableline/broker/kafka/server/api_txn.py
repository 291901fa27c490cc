"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (a producer's
calls on its transaction coordinator), and TxnOffsetCommit (on its consumer
group's coordinator).

InitProducerId without a transactional id gives an idempotent producer a new
producer id (epoch 0), from any broker. With one, and the others, it is the
transactional id's coordinator (txn_coordinator.py) that answers: these requests
translate to its calls, and its refusals to the error codes each version's clients
expect (PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH below the version that
introduced it). An AddPartitionsToTxn naming a partition that does not exist is
refused for that partition (UNKNOWN_TOPIC_OR_PARTITION, or
TOPIC_AUTHORIZATION_FAILED for one the caller may not produce to) and not attempted
for the others (OPERATION_NOT_ATTEMPTED), as Kafka does. A transactional id is the
calling role's (TransactionalId): with authentication on, one role can neither
fence another's producer nor end its transactions, and each role's transactions
are its own stableline transactions.

TxnOffsetCommit commits a group's offsets in the transaction AddOffsetsToTxn added
the group to: the acknowledgement each offset makes on the group's subscription
(group_offsets.py, txn_offsets.py) is held by the stableline transaction, applied
when it commits and handed back when it aborts (txn_offset_holds.py); once an EndTxn
on this broker commits it, OffsetFetch answers each offset and its metadata exactly.
In a cluster a partition another broker owns is held there (the Peer service's
HoldGroupOffsets); once committed, OffsetFetch answers that subscription's
acknowledgement, which is the offset (its metadata string is not kept). Messages
another open transaction holds (or acknowledged already) are refused with
ILLEGAL_GENERATION, which clients treat as a stale consumer: they abort and
consume again. More than max_acks_per_transaction message ids in one transaction
get INVALID_COMMIT_OFFSET_SIZE.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dispatcher import IsolationLevel
from managed_ledger import TxnId
from stableline.broker.cluster.peers import GroupOffsetHold
from stableline.broker.kafka.coordinator.group_offsets import (
    MAX_METADATA_BYTES,
    GroupOffsets,
    OffsetToCommit,
    check_group_id,
)
from stableline.broker.kafka.coordinator.txn_coordinator import (
    KafkaTransactionCoordinator,
    PartitionOfGroup,
    TxnRefused,
    callers_transactional_id,
)
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_txn as mt
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.kafka.server.api_base import KafkaApiBase
from stableline.broker.kafka.server.group_offsets_peers import PeerGroupOffsets
from stableline.broker.kafka.server.txn_offset_holds import hold_offset_here, txn_refusal
from stableline.broker.security.permissions import Action

log = logging.getLogger(__name__)

T = TypeVar("T")


class TransactionApis(KafkaApiBase):
    HANDLES = {
        m.ApiKey.INIT_PRODUCER_ID: "_init_producer_id",
        m.ApiKey.ADD_PARTITIONS_TO_TXN: "_add_partitions_to_txn",
        m.ApiKey.ADD_OFFSETS_TO_TXN: "_add_offsets_to_txn",
        m.ApiKey.END_TXN: "_end_txn",
        m.ApiKey.TXN_OFFSET_COMMIT: "_txn_offset_commit",
    }
    # The consumer groups' APIs (api_groups.py), beside this group in the handler:
    # their committed offsets, and whether a group is coordinated here.
    group_offsets: GroupOffsets
    # How partitions another broker owns are reached (None: standalone).
    _offsets_elsewhere: PeerGroupOffsets | None
    _group_error: Callable[..., Awaitable[m.ErrorCode]]
    _group_access: Callable[[str, bool], Awaitable[m.ErrorCode]]

    async def _coordinate(
        self,
        call: Callable[[KafkaTransactionCoordinator], Awaitable[T]],
        header: m.RequestHeader,
        api: str,
    ) -> T | TxnRefused:
        """`call` on the transaction coordinator: its answer, or the refusal to send."""
        if self._kafka_txns is None:
            return TxnRefused(
                m.ErrorCode.COORDINATOR_NOT_AVAILABLE, "this Kafka port serves no transactions"
            )
        try:
            return await call(self._kafka_txns)
        except Exception as error:
            refused = txn_refusal(error)
            if refused is None:
                raise
        if refused.code is m.ErrorCode.PRODUCER_FENCED:
            refused.code = mt.fenced_error(api, header.api_version)
        log.info(
            "kafka: %s from %s refused with %s: %s",
            api,
            header.client_id,
            refused.code.name,
            refused,
        )
        return refused

    # ------------------------------------------------------------ InitProducerId

    async def _init_producer_id(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = m.read_init_producer_id(reader, version)
        if request.transactional_id is None:
            producer_id = self._producer_ids.allocate(self._producer_role())
            return m.write_init_producer_id(version, m.ErrorCode.NONE, producer_id, 0)
        answer = await self._coordinate(
            lambda coordinator: coordinator.init_producer_id(
                callers_transactional_id(request.transactional_id),
                request.transaction_timeout_ms,
                request.producer_id,
                request.producer_epoch,
            ),
            header,
            "init_producer_id",
        )
        if isinstance(answer, TxnRefused):
            return m.write_init_producer_id(version, answer.code)
        producer_id, epoch = answer
        return m.write_init_producer_id(version, m.ErrorCode.NONE, producer_id, epoch)

    # ------------------------------------------------------------ AddPartitionsToTxn

    async def _add_partitions_to_txn(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mt.read_add_partitions_to_txn(
            reader, version, self._settings.max_partitions_per_request
        )
        topics: dict[str, None] = {}
        refused: dict[tuple[str, int], m.ErrorCode] = {}
        for name, partitions in request.topics:
            for partition in partitions:
                topic = await self._txn_topic(name, partition)
                if isinstance(topic, m.ErrorCode):
                    refused[name, partition] = topic
                else:
                    topics[topic] = None
        error: m.ErrorCode | None = None
        if not refused:
            answer = await self._coordinate(
                lambda coordinator: coordinator.add_topics(
                    callers_transactional_id(request.transactional_id),
                    request.producer_id,
                    request.producer_epoch,
                    list(topics),
                    f"kafka:{header.client_id or ''}",
                ),
                header,
                "add_partitions_to_txn",
            )
            error = answer.code if isinstance(answer, TxnRefused) else m.ErrorCode.NONE

        def code(name: str, partition: int) -> m.ErrorCode:
            if error is not None:
                return error
            return refused.get((name, partition), m.ErrorCode.OPERATION_NOT_ATTEMPTED)

        results = [
            (name, [(partition, code(name, partition)) for partition in partitions])
            for name, partitions in request.topics
        ]
        return mt.write_add_partitions_to_txn(version, results)

    async def _txn_topic(self, kafka_name: str, partition: int) -> str | m.ErrorCode:
        """The stableline topic of a partition added to a transaction: the name
        Produce finds its batches' topic under; UNKNOWN_TOPIC_OR_PARTITION when there
        is none, TOPIC_AUTHORIZATION_FAILED when the caller may not produce to it.
        Not loaded here: in a cluster another broker may own it (the coordinator's
        end reaches it there)."""
        name = await self._partition_name(kafka_name, partition)
        if name is None or not await self._registry.taken_in_cluster(name):
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        why = self._refusal(Action.PRODUCE, name)
        if why is not None:
            return self._refused(m.ErrorCode.TOPIC_AUTHORIZATION_FAILED, why)
        return str(name)

    # ------------------------------------------------------------ EndTxn

    async def _end_txn(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = mt.read_end_txn(reader, header.api_version)

        answer = await self._coordinate(
            lambda coordinator: coordinator.end(
                callers_transactional_id(request.transactional_id),
                request.producer_id,
                request.producer_epoch,
                request.committed,
            ),
            header,
            "end_txn",
        )
        error = answer.code if isinstance(answer, TxnRefused) else m.ErrorCode.NONE
        return mt.write_end_txn(header.api_version, error)

    # ------------------------------------------------------------ AddOffsetsToTxn

    async def _add_offsets_to_txn(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = mt.read_add_offsets_to_txn(reader, header.api_version)
        if check_group_id(request.group_id) is not m.ErrorCode.NONE:
            return mt.write_add_offsets_to_txn(header.api_version, m.ErrorCode.INVALID_GROUP_ID)
        # Another role's group is refused before the transaction takes it in (the
        # claim is TxnOffsetCommit's, on the group's coordinator).
        refused = await self._group_access(request.group_id, False)
        if refused is not m.ErrorCode.NONE:
            return mt.write_add_offsets_to_txn(header.api_version, refused)
        answer = await self._coordinate(
            lambda coordinator: coordinator.add_group(
                callers_transactional_id(request.transactional_id),
                request.producer_id,
                request.producer_epoch,
                request.group_id,
                f"kafka:{header.client_id or ''}",
            ),
            header,
            "add_offsets_to_txn",
        )
        error = answer.code if isinstance(answer, TxnRefused) else m.ErrorCode.NONE
        return mt.write_add_offsets_to_txn(header.api_version, error)

    # ------------------------------------------------------------ TxnOffsetCommit

    async def _txn_offset_commit(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mt.read_txn_offset_commit(
            reader, version, self._settings.max_partitions_per_request
        )
        error = await self._group_error(request.group_id, claim=True)
        txn_id: TxnId | None = None
        if error is m.ErrorCode.NONE:
            answer = await self._coordinate(
                lambda coordinator: coordinator.offsets_transaction(
                    callers_transactional_id(request.transactional_id),
                    request.producer_id,
                    request.producer_epoch,
                    request.group_id,
                ),
                header,
                "txn_offset_commit",
            )
            if isinstance(answer, TxnRefused):
                error = answer.code
            else:
                txn_id = answer
        results = []
        for offset in request.offsets:
            if txn_id is not None:
                error = await self._hold_offset(txn_id, request.group_id, offset, header.client_id)
            results.append((offset.topic, offset.partition, error))
        return mt.write_txn_offset_commit(version, results)

    async def _hold_offset(
        self, txn_id: TxnId, group_id: str, offset: mt.TxnOffset, client_id: str | None
    ) -> m.ErrorCode:
        """Hold in the transaction the acknowledgement that committing `offset` makes
        (txn_offsets.py); what OffsetFetch answers is noted once it commits."""
        assert self._kafka_txns is not None and self._coordinators is not None
        if offset.offset < 0:
            return m.ErrorCode.INVALID_REQUEST
        metadata = offset.metadata or ""
        if len(metadata.encode("utf-8", errors="surrogatepass")) > MAX_METADATA_BYTES:
            return m.ErrorCode.OFFSET_METADATA_TOO_LARGE
        partition = PartitionOfGroup(group_id, offset.topic, offset.partition)
        # The level of a subscription made here: the committing client's last Fetch
        # (a producer has none: READ_COMMITTED, what its consumer reads).
        level = self._fetch_levels.level_of(client_id)
        held_from = self._kafka_txns.offset_held(txn_id, partition)
        held = await hold_offset_here(
            self.group_offsets,
            self._coordinators,
            txn_id,
            group_id,
            offset.topic,
            offset.partition,
            offset.offset,
            held_from,
            level,
        )
        if held.error is m.ErrorCode.NOT_LEADER_OR_FOLLOWER and self._offsets_elsewhere is not None:
            return await self._hold_elsewhere(txn_id, partition, offset, held_from, level)
        if held.error is not m.ErrorCode.NONE:
            return held.error
        topic, subscription = held.topic, held.subscription
        assert topic is not None and subscription is not None
        commit = OffsetToCommit(offset.topic, offset.partition, offset.offset, offset.metadata)
        indexed = await self._index_now(group_id, offset)
        if indexed is not m.ErrorCode.NONE:
            return indexed

        async def note() -> None:
            """Once committed: OffsetFetch answers this offset and metadata, also
            after a crash."""
            self.group_offsets.record_commit(commit, topic, subscription)
            await subscription.cursor.persist()

        self._kafka_txns.note_offset(txn_id, partition, offset.offset, note)
        return m.ErrorCode.NONE

    async def _hold_elsewhere(
        self,
        txn_id: TxnId,
        partition: PartitionOfGroup,
        offset: mt.TxnOffset,
        held_from: int | None,
        level: IsolationLevel,
    ) -> m.ErrorCode:
        """The partition's owner is another broker: it holds the acknowledgement
        (the Peer service's HoldGroupOffsets). Once the transaction commits the
        group's index lists the partition; OffsetFetch then answers the owner's
        acknowledgement, which is the offset committed (its metadata string is not
        kept there)."""
        assert self._kafka_txns is not None and self._offsets_elsewhere is not None
        (error,) = await self._offsets_elsewhere.hold(
            partition.group_id,
            txn_id,
            [GroupOffsetHold(offset.topic, offset.partition, offset.offset, _or_none(held_from))],
            level,
        )
        if error is not m.ErrorCode.NONE:
            return error
        return await self._index_now(partition.group_id, offset)

    async def _index_now(self, group_id: str, offset: mt.TxnOffset) -> m.ErrorCode:
        """The group's index lists the partition from the hold on, not from the commit:
        the EndTxn that commits may reach another broker (the transactional id's
        coordinator), where nothing noted here runs. Until a commit, OffsetFetch of
        every partition answers the partition with its last committed offset (-1:
        none)."""
        return await self.group_offsets.index(group_id, [(offset.topic, offset.partition)])


def _or_none(held_from: int | None) -> int:
    return -1 if held_from is None else held_from
