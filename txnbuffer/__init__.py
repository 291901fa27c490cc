"""Transactions: the per-topic TransactionBuffer, its abort index, and the coordinator."""

from txnbuffer.abort_index import AbortedTxn, AbortIndex
from txnbuffer.buffer import BufferState, SnapshotPolicy, TransactionBuffer
from txnbuffer.coordinator import (
    TransactionCoordinator,
    TransactionParticipant,
    TxnAck,
    TxnMetadata,
    TxnState,
)
from txnbuffer.errors import (
    TransactionBufferNotReadyError,
    TransactionEndedError,
    TransactionError,
    TransactionNotFoundError,
)

__all__ = [
    "AbortIndex",
    "AbortedTxn",
    "BufferState",
    "SnapshotPolicy",
    "TransactionBuffer",
    "TransactionBufferNotReadyError",
    "TransactionCoordinator",
    "TransactionEndedError",
    "TransactionError",
    "TransactionNotFoundError",
    "TransactionParticipant",
    "TxnAck",
    "TxnMetadata",
    "TxnState",
]
