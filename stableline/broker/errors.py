"""The broker's error root: every exception the broker raises derives from
BrokerError and names its stable code (a row of stableline/error_codes.py), so the
faces (gRPC, HTTP, Kafka) report one refusal the same way.

The engines (managed_ledger, txnbuffer, dispatcher) know nothing of the broker; their
exceptions, and the shared modules' (a topic name, the metadata store), get their
codes from FOREIGN_CODES here. code_of() is the one classification the faces use.
"""

from __future__ import annotations

import errno
import logging
import secrets

from dispatcher import (
    ConsumerAssignError,
    InvalidAckError,
    IsolationLevelMismatchError,
    SubscriptionBusyError,
    SubscriptionClosedError,
    TooManyConsumersError,
    TransactionConflictError,
)
from managed_ledger import (
    EntryTooLargeError,
    LedgerClosedError,
    ReplicaCorruptEntryError,
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from stableline.metadata import MetadataStoreUnavailable
from stableline.topic_name import InvalidTopicNameError
from txnbuffer import (
    CoordinatorFencedError,
    TooManyTransactionsError,
    TransactionBufferNotReadyError,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
)

INTERNAL = "Internal"

log = logging.getLogger(__name__)


class BrokerError(Exception):
    """The root of the broker's exceptions. `code` is a class attribute each subclass
    states; a Refusal sets its own per instance."""

    code: str = INTERNAL


class Refusal(BrokerError):
    """A refusal whose code is chosen where it is made: a face's guard or limit, or a
    peer broker's refusal carried on unchanged (its code read from the peer's answer)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


# Exceptions the broker does not own, by the code each is reported with; the first
# match wins, so a subclass comes before its base.
FOREIGN_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (InvalidTopicNameError, "InvalidTopicName"),
    # The cluster's etcd cannot answer: a change of shared metadata waits for it.
    (MetadataStoreUnavailable, "MetadataStoreUnavailable"),
    (SubscriptionBusyError, "SubscriptionBusy"),
    (IsolationLevelMismatchError, "IsolationLevelMismatch"),
    # Before InvalidAckError, its base: the application should abort, not fix an id.
    (TransactionConflictError, "TransactionConflict"),
    (InvalidAckError, "InvalidAck"),
    (SubscriptionClosedError, "SubscriptionClosed"),
    (TooManyConsumersError, "TooManyConsumers"),
    (ConsumerAssignError, "ConsumerAssignError"),
    (EntryTooLargeError, "MessageTooBig"),
    (LedgerClosedError, "NotReady"),
    # Before StorageError, its base: a full disk is a quota the operator can lift.
    (StorageFullError, "StorageFull"),
    (TooManyOpenFilesError, "TooManyOpenFiles"),
    (StorageError, "StorageError"),
    # Before ReplicaError, their base.
    (ReplicaFencedError, "ReplicaFenced"),
    (ReplicaGapError, "ReplicaGap"),
    (ReplicaLedgerClosedError, "ReplicaLedgerClosed"),
    (ReplicaCorruptEntryError, "ReplicaCorruptEntry"),
    (ReplicaSnapshotMismatchError, "ReplicaSnapshotMismatch"),
    (ReplicaError, "ReplicaRefused"),
    (TransactionEndedError, "TransactionEnded"),
    # The shard moved on: the client asks again and is sent to its new leader.
    (CoordinatorFencedError, "CoordinatorUnavailable"),
    (TransactionNotFoundError, "TransactionNotFound"),
    (TooManyTransactionsError, "TooManyTransactions"),
    (TransactionTooLargeError, "TooManyTransactionAcks"),
    # The same code as the guard's refusals: the client raises AuthorizationError.
    (TransactionNotOwnedError, "NotAuthorized"),
    (TransactionBufferNotReadyError, "NotReady"),
)


def code_of(error: BaseException) -> str:
    """The stable code `error` is reported with."""
    if isinstance(error, BrokerError):
        return error.code
    for kind, code in FOREIGN_CODES:
        if isinstance(error, kind):
            return code
    if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
        # Out of descriptors outside the ledger files (a snapshot, an index file).
        return "TooManyOpenFiles"
    if isinstance(error, ValueError):  # any other malformed value in a request
        return "InvalidArgument"
    return INTERNAL


def internal_error_message(error: BaseException) -> str:
    """Log an unexpected error with a fresh id; what the client gets is the id only.
    The error's own text (a storage library's message, a path) stays in the log."""
    incident = secrets.token_hex(4)
    log.error("internal error (id %s): %r", incident, error, exc_info=error)
    return f"internal error (id {incident}); see the broker log"
