"""Acknowledging in a transaction: the subscription holds, the coordinator records.

An ack sent with a transaction takes effect only when that transaction commits
(DESIGN, "Acks"). Taking one is a handshake between the subscription, which holds
the entries, and the coordinator, which must know the ack to apply it at the end
(broker/transactions.py applies it then: commit acks, abort redelivers).

Promises of `ack_in_transaction`:
- An unknown transaction (TransactionNotFoundError), a cumulative ack or an empty one
  (ValueError) changes nothing.
- An entry already acknowledged, or held by another open transaction, is refused
  (InvalidAckError) and nothing of the ack is held.
- The entries are held (neither acked nor redelivered) before the coordinator records
  the ack, so an end that follows always finds them held.
- If the coordinator refuses the ack (the transaction has ended since), the hold is
  released before the error is raised: nothing stays held for a transaction that
  will never end it.
"""

from __future__ import annotations

from dispatcher import Subscription
from managed_ledger import Position, TxnId
from txnbuffer import TransactionCoordinator, TransactionError


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
    coordinator.get(txn_id)  # TransactionNotFoundError before anything is held
    subscription.hold_for_transaction(txn_id, message_ids)
    try:
        coordinator.add_ack(
            txn_id,
            subscription.topic,
            subscription.name,
            [(position.ledger_id, position.entry_id, batch) for position, batch in message_ids],
        )
    except TransactionError:
        subscription.end_transaction_acks(txn_id, message_ids, commit=False)
        raise
