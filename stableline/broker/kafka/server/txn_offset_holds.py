"""Holding a group's offset committed in a Kafka transaction, on the partition's owner.

TxnOffsetCommit of offset O on a partition holds, in the stableline transaction, the
acknowledgement committing O makes on the group's subscription (group_offsets.py,
txn_offsets.py): the messages from where the subscription's acknowledgement stands,
or from the offset the transaction held before on that partition, up to O. Only the
partition's owner may hold on its subscription, so `hold_offset_here` runs there:
on the group's coordinator for the partitions it owns (api_txn.py), and on the owner
for the others, called over the Peer service's HoldGroupOffsets
(group_offsets_peers.py). The transaction ends the hold wherever its coordinator
shard is led (txn/transactional_acks.py ack_in_any_transaction, txn/remote_acks.py).

Refusals, as Kafka clients expect them: messages another open transaction holds (or
acknowledged already) ILLEGAL_GENERATION, which clients treat as a stale consumer
(they abort and consume again); more than max_acks_per_transaction message ids
INVALID_COMMIT_OFFSET_SIZE; an ended or unknown transaction INVALID_PRODUCER_EPOCH;
the partition owned by another broker NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dispatcher import InvalidAckError, IsolationLevel, Subscription
from managed_ledger import TxnId
from stableline.broker.kafka.coordinator.group_offsets import GroupOffsets, acknowledged_offset
from stableline.broker.kafka.coordinator.txn_coordinator import TxnRefused
from stableline.broker.kafka.coordinator.txn_offsets import TooManyToAcknowledge, messages_between
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.broker.txn.coordinator_errors import CoordinatorUnavailableError
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.transactional_acks import ack_in_any_transaction
from stableline.metadata import MetadataStoreError
from txnbuffer import (
    TooManyTransactionsError,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionTooLargeError,
)

log = logging.getLogger(__name__)


def txn_refusal(error: Exception) -> TxnRefused | None:
    """A failure of the coordinator's own calls as a Kafka refusal (None: not one
    of those, a fault of this broker)."""
    if isinstance(error, TxnRefused):
        return error
    if isinstance(error, BrokerFencedError):
        # This broker takes no writes now: the client finds its coordinator again.
        return TxnRefused(m.ErrorCode.NOT_COORDINATOR, str(error))
    if isinstance(
        error, CoordinatorUnavailableError | TooManyTransactionsError | MetadataStoreError
    ):
        # Retried by clients after a back-off: the shard's leader comes back, other
        # transactions end, the metadata store answers again.
        return TxnRefused(m.ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
    return None


@dataclass(frozen=True, slots=True)
class HeldOffset:
    """What holding one offset came to: NONE with the topic and subscription it was
    held on, or the error code to answer."""

    error: m.ErrorCode
    topic: Topic | None = None
    subscription: Subscription | None = None


async def hold_offset_here(
    group_offsets: GroupOffsets,
    coordinators: Coordinators,
    txn_id: TxnId,
    group_id: str,
    kafka_topic: str,
    partition: int,
    offset: int,
    held_from: int | None,
    level: IsolationLevel,
) -> HeldOffset:
    """Hold in `txn_id` the acknowledgement committing `offset` makes on the group's
    subscription of the partition (made at `level` if missing), starting past
    `held_from` (the offset the transaction held before; None: none)."""
    try:
        found = await group_offsets.subscription(group_id, kafka_topic, partition, level)
        if isinstance(found, m.ErrorCode):
            return HeldOffset(found)
        topic, subscription = found
        start = acknowledged_offset(topic, subscription)
        if held_from is not None:
            start = max(start, held_from)
        ids = messages_between(
            topic, subscription, start, offset, coordinators.limits.max_acks_per_txn
        )
        if ids:
            await ack_in_any_transaction(
                coordinators, subscription, txn_id, ids, cumulative=False, caller=None
            )
    except InvalidAckError as error:
        # Acknowledged already, or held by another open transaction: another
        # consumer of the group has these records (a stale generation, to Kafka
        # clients: they abort the transaction and consume again).
        log.info("kafka: group %r offset commit in %s refused: %s", group_id, txn_id, error)
        return HeldOffset(m.ErrorCode.ILLEGAL_GENERATION)
    except (TooManyToAcknowledge, TransactionTooLargeError) as error:
        log.info("kafka: group %r offset commit in %s refused: %s", group_id, txn_id, error)
        return HeldOffset(m.ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
    except (TransactionEndedError, TransactionNotFoundError) as error:
        log.info("kafka: group %r offset commit in %s refused: %s", group_id, txn_id, error)
        return HeldOffset(m.ErrorCode.INVALID_PRODUCER_EPOCH)  # its timeout fenced the producer
    except Exception as error:
        refused = txn_refusal(error)
        if refused is None:
            raise
        return HeldOffset(refused.code)
    return HeldOffset(m.ErrorCode.NONE, topic, subscription)
