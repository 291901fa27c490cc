"""Acknowledging in a transaction: the subscription holds, the coordinator records.

An ack sent with a transaction takes effect only when that transaction commits
(DESIGN, "Acks"). Taking one is a handshake between the subscription, which holds
the entries, and the coordinator, which must know the ack to apply it at the end
(broker/transactions.py applies it then: commit acks, abort redelivers).

Promises of `ack_in_transaction`:
- An unknown transaction (TransactionNotFoundError), an ended one
  (TransactionEndedError), a cumulative ack or an empty one (ValueError) changes
  nothing: an entry a consumer holds stays with it, not sent to another.
- A message already acknowledged, or already acknowledged in an open transaction
  (another, or this one), is refused (TransactionConflictError, an InvalidAckError)
  and nothing of the ack is held: the application aborts rather than commit the
  output of a second copy.
- The entries are held (neither acked nor redelivered) before the coordinator records
  the ack, so an end that follows always finds them held.
- If the coordinator still refuses the ack (or fails to record it), exactly what
  this ack held is released (those messages go back for redelivery; what the
  transaction held before stays held) before the error is raised: nothing stays
  held for a transaction that will never end it.
- What is held is batch indexes (dispatcher/pending_acks.py): transactions acking
  disjoint messages of one batched entry both succeed, and each end applies to its
  own messages only.

`ack_in_any_transaction` keeps the same promises for a transaction whose coordinator
shard another broker leads, asking that broker (coordinators.py) whether the ack
may be taken before anything is held and recording it after; should the
transaction end between the two, the refused record releases what the ack held,
and those messages are redelivered.

Promise of `restore_pending_acks`: a subscription loaded again (a restart, or its
topic loaded after an unload) holds again, before any consumer can join it, what
each transaction not yet ended acknowledged on it, read from the coordinator's ack
records (their layout is unchanged: each already names batch indexes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from dispatcher import Subscription
from managed_ledger import Position, TxnId
from txnbuffer import TransactionCoordinator, TransactionEndedError, TxnState

if TYPE_CHECKING:
    from stableline.broker.txn.coordinators import Coordinators


def ack_in_transaction(
    coordinator: TransactionCoordinator,
    subscription: Subscription,
    txn_id: TxnId,
    message_ids: list[tuple[Position, int]],
    cumulative: bool = False,
) -> None:
    """Hold message_ids (entry position, batch index) for txn_id and record the ack."""
    if not message_ids:
        raise ValueError("an ack must name at least one message id")
    if cumulative:
        raise ValueError("a transactional ack must be individual, not cumulative")
    # Checked before anything is held: holding may take entries from their consumer.
    state = coordinator.get(txn_id).state
    if state is not TxnState.OPEN:
        raise TransactionEndedError(
            f"transaction {txn_id} is {state.value}; start a new transaction"
        )
    taken = subscription.hold_for_transaction(txn_id, message_ids)
    try:
        coordinator.add_ack(
            txn_id,
            subscription.topic,
            subscription.name,
            [(position.ledger_id, position.entry_id, batch) for position, batch in message_ids],
        )
    except BaseException:
        # Unrecorded, the ack would never be ended: exactly what it took goes back.
        subscription.unhold_for_transaction(txn_id, taken)
        raise


async def ack_in_any_transaction(
    coordinators: Coordinators,
    subscription: Subscription,
    txn_id: TxnId,
    message_ids: list[tuple[Position, int]],
    cumulative: bool,
    caller: str | None,
) -> None:
    """ack_in_transaction, for `caller`, wherever the transaction's shard is led."""
    await coordinators.ready.wait()
    local = coordinators.coordinator_of(txn_id)
    if local is not None:
        # Before anything is held: another role's transaction is refused untouched.
        local.check_ack(txn_id, caller, len(message_ids))
        ack_in_transaction(local, subscription, txn_id, message_ids, cumulative)
        await local.log.flushed()
        return
    if not message_ids:
        raise ValueError("an ack must name at least one message id")
    if cumulative:
        raise ValueError("a transactional ack must be individual, not cumulative")
    await coordinators.check_ack(txn_id, caller, len(message_ids))
    taken = subscription.hold_for_transaction(txn_id, message_ids)
    ids = [(position.ledger_id, position.entry_id, batch) for position, batch in message_ids]
    try:
        await coordinators.add_ack(txn_id, subscription.topic, subscription.name, ids, caller)
    except BaseException:
        subscription.unhold_for_transaction(txn_id, taken)
        raise
    # Held again after a restart of this broker (txn/remote_acks.py); the leader has it.
    coordinators.remote_acks.record(subscription.topic, subscription.name, txn_id, ids)


def restore_pending_acks(
    coordinator: TransactionCoordinator, topic: str, subscriptions: Mapping[str, Subscription]
) -> int:
    """Hold again in a just-loaded topic's subscriptions what the transactions not yet
    ended (open, or decided and still ending) acknowledged on them; the number of ack
    records applied. Costs O(acks of transactions not ended): nothing when none are."""
    restored = 0
    for meta in coordinator.list_open():
        for ack in meta.acks:
            subscription = subscriptions.get(ack.subscription) if ack.topic == topic else None
            if subscription is not None:
                subscription.restore_transaction_acks(
                    meta.txn_id,
                    [(Position(ledger, entry), batch) for ledger, entry, batch in ack.message_ids],
                )
                restored += 1
    return restored
