"""Acking in a transaction (stableline/broker/txn/transactional_acks.py) over a real ledger,
subscription and coordinator; only the coordinator's participant, which ends a
transaction on its topics, is a stub that has nothing to end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher import (
    Consumer,
    InvalidAckError,
    IsolationLevel,
    LogReadView,
    Subscription,
    SubscriptionType,
)
from managed_ledger import EntryHeader, LocalStore, ManagedLedger, ManagedLedgerConfig, TxnId
from stableline.broker.txn.transactional_acks import ack_in_transaction
from txnbuffer import (
    TransactionCoordinator,
    TransactionEndedError,
    TransactionLimits,
    TransactionNotFoundError,
    TransactionTooLargeError,
    TxnAck,
)

TIMEOUT_MS = 60_000
DEADLINE_S = 5.0


class NothingToEnd:
    async def end_on_topic(self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int):
        pass

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        pass


@pytest.fixture
async def ledger(tmp_path: Path, store: LocalStore) -> AsyncIterator[ManagedLedger]:
    opened = await ManagedLedger.open(
        "persistent://public/default/t", tmp_path / "t", store, ManagedLedgerConfig()
    )
    yield opened
    await opened.close()


@pytest.fixture
async def subscription(ledger: ManagedLedger) -> AsyncIterator[Subscription]:
    properties = Subscription.properties_for(
        SubscriptionType.SHARED, IsolationLevel.READ_UNCOMMITTED
    )
    cursor, _ = ledger.open_cursor("sub", True, properties)
    opened = Subscription(ledger.name, cursor, lambda _level: LogReadView(ledger))
    yield opened
    await opened.close()


@pytest.fixture
async def coordinator(store: LocalStore) -> AsyncIterator[TransactionCoordinator]:
    tc = TransactionCoordinator(1, store, NothingToEnd())
    await tc.recover()
    yield tc
    await tc.close()


@pytest.fixture
async def entries(ledger: ManagedLedger):
    return [(await ledger.append(EntryHeader(), b"m"), -1) for _ in range(3)]


def held_by_another(coordinator, subscription, ids) -> bool:
    """Whether another open transaction is refused these entries because one holds them."""
    probe = coordinator.new_transaction(TIMEOUT_MS)
    try:
        ack_in_transaction(coordinator, subscription, probe, ids)
    except InvalidAckError as error:
        assert "acknowledged in open transaction" in str(error)
        return True
    subscription.end_transaction_acks(probe, ids, commit=False)
    return False


async def test_an_ack_in_an_open_transaction_holds_the_entries_and_is_recorded(
    coordinator, subscription, entries
):
    txn = coordinator.new_transaction(TIMEOUT_MS)
    ack_in_transaction(coordinator, subscription, txn, entries[:2])
    assert held_by_another(coordinator, subscription, entries[:1])
    assert not held_by_another(coordinator, subscription, entries[2:])
    assert not subscription.cursor.is_acked(entries[0][0])
    [recorded] = coordinator.get(txn).acks
    assert (recorded.topic, recorded.subscription) == (subscription.topic, "sub")
    assert recorded.message_ids == [(p.ledger_id, p.entry_id, b) for p, b in entries[:2]]


async def test_an_ack_in_an_ended_transaction_is_refused_and_leaves_nothing_held(
    coordinator, subscription, entries
):
    txn = coordinator.new_transaction(TIMEOUT_MS)
    await coordinator.end(txn, commit=False)
    with pytest.raises(TransactionEndedError, match=f"transaction {txn} is ABORTED"):
        ack_in_transaction(coordinator, subscription, txn, entries[:1])
    assert not held_by_another(coordinator, subscription, entries[:1])
    assert coordinator.get(txn).acks == []


async def test_a_refused_ack_leaves_a_delivered_entry_with_its_consumer(
    coordinator, subscription, entries
):
    consumer = Consumer("c")
    subscription.add_consumer(consumer, SubscriptionType.SHARED, IsolationLevel.READ_UNCOMMITTED)
    subscription.flow(consumer, 1)
    async with asyncio.timeout(DEADLINE_S):
        [delivery] = await consumer.outbox.get()
    position = delivery.entry.position
    txn = coordinator.new_transaction(TIMEOUT_MS)
    await coordinator.end(txn, commit=True)
    with pytest.raises(TransactionEndedError):
        ack_in_transaction(coordinator, subscription, txn, [(position, -1)])
    with pytest.raises(TransactionNotFoundError):
        ack_in_transaction(coordinator, subscription, TxnId(1, 999), [(position, -1)])
    assert consumer.pending == {position: 1}


async def test_an_ack_in_an_unknown_transaction_is_refused_before_anything_is_held(
    coordinator, subscription, entries
):
    with pytest.raises(TransactionNotFoundError, match="transaction 1:999 is not known"):
        ack_in_transaction(coordinator, subscription, TxnId(1, 999), entries[:1])
    assert not held_by_another(coordinator, subscription, entries[:1])


@pytest.mark.parametrize(
    ("cumulative", "count", "complaint"),
    [(True, 1, "individual, not cumulative"), (False, 0, "at least one message id")],
)
async def test_a_cumulative_or_empty_transactional_ack_is_refused(
    coordinator, subscription, entries, cumulative, count, complaint
):
    txn = coordinator.new_transaction(TIMEOUT_MS)
    with pytest.raises(ValueError, match=complaint):
        ack_in_transaction(coordinator, subscription, txn, entries[:count], cumulative)
    assert not held_by_another(coordinator, subscription, entries[:1])
    assert coordinator.get(txn).acks == []


async def test_an_entry_held_by_another_open_transaction_is_refused_to_the_second(
    coordinator, subscription, entries
):
    first = coordinator.new_transaction(TIMEOUT_MS)
    second = coordinator.new_transaction(TIMEOUT_MS)
    ack_in_transaction(coordinator, subscription, first, entries[:1])
    with pytest.raises(InvalidAckError, match=f"open transaction {first}$"):
        ack_in_transaction(coordinator, subscription, second, entries[:1])
    assert coordinator.get(second).acks == []


async def test_an_unrecorded_ack_releases_only_what_it_held_in_a_batched_entry(
    store, subscription, ledger
):
    coordinator = TransactionCoordinator(
        1, store, NothingToEnd(), TransactionLimits(max_acks_per_txn=1)
    )
    await coordinator.recover()
    try:
        position = await ledger.append(EntryHeader(num_messages=3), b"abc")
        txn = coordinator.new_transaction(TIMEOUT_MS)
        ack_in_transaction(coordinator, subscription, txn, [(position, 0)])
        with pytest.raises(TransactionTooLargeError):
            ack_in_transaction(coordinator, subscription, txn, [(position, 1)])

        # Index 0, recorded, is still held; index 1, refused, is free again.
        assert held_by_another(coordinator, subscription, [(position, 0)])
        assert not held_by_another(coordinator, subscription, [(position, 1)])
    finally:
        await coordinator.close()
