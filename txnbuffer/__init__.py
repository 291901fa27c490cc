"""Transactions: the per-topic TransactionBuffer, its abort index, and the coordinator."""

from txnbuffer.abort_index import AbortedTxn, AbortIndex
from txnbuffer.buffer import BufferState, SnapshotPolicy, TransactionBuffer
from txnbuffer.coordinator import (
    TransactionCoordinator,
    TransactionLimits,
    TransactionParticipant,
    TxnAck,
    TxnMetadata,
)
from txnbuffer.errors import (
    CoordinatorFencedError,
    TooManyTransactionsError,
    TransactionBufferNotReadyError,
    TransactionEndedError,
    TransactionError,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
)
from txnbuffer.txn_state import IllegalTxnTransition, TxnState

__all__ = [
    "AbortIndex",
    "AbortedTxn",
    "BufferState",
    "CoordinatorFencedError",
    "IllegalTxnTransition",
    "SnapshotPolicy",
    "TooManyTransactionsError",
    "TransactionBuffer",
    "TransactionBufferNotReadyError",
    "TransactionCoordinator",
    "TransactionEndedError",
    "TransactionError",
    "TransactionLimits",
    "TransactionNotFoundError",
    "TransactionNotOwnedError",
    "TransactionParticipant",
    "TransactionTooLargeError",
    "TxnAck",
    "TxnMetadata",
    "TxnState",
]
