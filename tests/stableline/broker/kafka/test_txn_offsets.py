"""Which messages an offset committed in a transaction acknowledges, in process on a
real topic: whole entries as (position, -1), partial ones by batch index, nothing
already acknowledged, no marker, bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher import IsolationLevel, SubscriptionType
from managed_ledger import EntryHeader, LocalStore, ManagedLedger, Position, TxnId
from stableline.broker.kafka.coordinator.txn_offsets import TooManyToAcknowledge, messages_between
from stableline.broker.topics.topic import Topic
from stableline.topic_name import TopicName


@pytest.fixture
async def topic(tmp_path: Path, store: LocalStore) -> AsyncIterator[Topic]:
    """Offsets 0-2 (one entry of three), 3 (an entry committed in a transaction), 4
    (its commit marker), 5-6 (one entry of two)."""
    name = TopicName.parse("ledger")
    opened = Topic(name, await ManagedLedger.open(name.storage_name, tmp_path / "t", store))
    await opened.recover()  # nothing to replay: transactions may append
    await opened.publish(EntryHeader(num_messages=3), b"batch")
    txn = TxnId(0, 1)
    await opened.publish(EntryHeader(num_messages=1, txn_id=txn), b"batch")
    await opened.end_transaction(txn, True, 0)
    await opened.publish(EntryHeader(num_messages=2), b"batch")
    yield opened
    await opened.close()


def positions(topic: Topic) -> list[Position]:
    return [entry.position for entry in topic.ledger.read(topic.ledger.first_position(), 10)]


def subscription(topic: Topic):
    return topic.create_subscription(
        "copier", SubscriptionType.FAILOVER, IsolationLevel.READ_COMMITTED, True
    )


async def test_whole_entries_by_position_and_partial_ones_by_batch_index(topic):
    first, single, _marker, pair = positions(topic)
    group = subscription(topic)
    assert messages_between(topic, group, 0, 7, 100) == [(first, -1), (single, -1), (pair, -1)]
    assert messages_between(topic, group, 1, 6, 100) == [
        (first, 1),
        (first, 2),
        (single, -1),
        (pair, 0),
    ]
    assert messages_between(topic, group, 4, 5, 100) == []  # the marker alone
    assert messages_between(topic, group, 5, 5, 100) == []
    assert messages_between(topic, group, 6, 99, 100) == [(pair, 1)]  # stops at the end


async def test_what_is_acknowledged_already_is_left_out(topic):
    first, single, _marker, pair = positions(topic)
    group = subscription(topic)
    group.ack([(first, 1), (single, -1)])
    assert messages_between(topic, group, 0, 2, 100) == [(first, 0)]
    assert messages_between(topic, group, 1, 6, 100) == [(first, 2), (pair, 0)]
    # A whole entry partly acknowledged: -1 names its messages not acknowledged yet.
    assert messages_between(topic, group, 0, 7, 100) == [(first, -1), (pair, -1)]


async def test_more_messages_than_a_transaction_may_acknowledge_are_refused(topic):
    group = subscription(topic)
    # Counted as the coordinator counts them (max_acks_per_txn): message ids.
    assert len(messages_between(topic, group, 1, 7, 4)) == 4
    with pytest.raises(TooManyToAcknowledge, match="commit offsets more often"):
        messages_between(topic, group, 1, 7, 3)
