"""How the broker reports errors: a gRPC status plus a stable error code.

The code travels in the trailing metadata key `stableline-error` (and in the
error fields of stream responses) so clients raise a typed exception without
parsing messages meant for people.
"""

from __future__ import annotations

import errno
import logging
import resource
import secrets

import grpc

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
    StorageError,
    StorageFullError,
    TooManyOpenFilesError,
)
from stableline.broker.cluster.ownership import NotOwnerError, TopicUnavailableError
from stableline.broker.cluster.peer_admin import PeerCallError
from stableline.broker.topics.partitioned import TopicBusyError, TopicConflictError
from stableline.broker.topics.registry import TooManyTopicsError, TopicNotFoundError
from stableline.broker.topics.topic import ProducerBusyError
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.broker.txn.coordinator_errors import (
    CoordinatorNotLeaderError,
    CoordinatorUnavailableError,
)
from stableline.metadata import MetadataStoreUnavailable
from stableline.topic_name import InvalidTopicNameError
from txnbuffer import (
    TooManyTransactionsError,
    TransactionBufferNotReadyError,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
)

ERROR_METADATA_KEY = "stableline-error"

log = logging.getLogger(__name__)


class BrokerError(Exception):
    """An error raised by the broker's faces, with its status and code."""

    def __init__(self, status: grpc.StatusCode, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code


_MAPPING: list[tuple[type[BaseException], grpc.StatusCode, str]] = [
    (InvalidTopicNameError, grpc.StatusCode.INVALID_ARGUMENT, "InvalidTopicName"),
    (TopicNotFoundError, grpc.StatusCode.NOT_FOUND, "TopicNotFound"),
    (NotOwnerError, grpc.StatusCode.FAILED_PRECONDITION, "NotOwner"),
    (TopicUnavailableError, grpc.StatusCode.UNAVAILABLE, "TopicUnavailable"),
    (CoordinatorNotLeaderError, grpc.StatusCode.FAILED_PRECONDITION, "NotOwner"),
    (CoordinatorUnavailableError, grpc.StatusCode.UNAVAILABLE, "CoordinatorUnavailable"),
    (PeerCallError, grpc.StatusCode.UNAVAILABLE, "TopicUnavailable"),
    # The cluster's etcd cannot answer: a change of shared metadata waits for it.
    (MetadataStoreUnavailable, grpc.StatusCode.UNAVAILABLE, "MetadataStoreUnavailable"),
    # Retryable: the client's NotReady, which reconnecting producers and consumers wait out.
    (BrokerFencedError, grpc.StatusCode.UNAVAILABLE, "BrokerFenced"),
    (TopicConflictError, grpc.StatusCode.ALREADY_EXISTS, "TopicConflict"),
    (TopicBusyError, grpc.StatusCode.FAILED_PRECONDITION, "TopicBusy"),
    (SubscriptionBusyError, grpc.StatusCode.FAILED_PRECONDITION, "SubscriptionBusy"),
    (IsolationLevelMismatchError, grpc.StatusCode.FAILED_PRECONDITION, "IsolationLevelMismatch"),
    # Before InvalidAckError, its base: the application should abort, not fix an id.
    (TransactionConflictError, grpc.StatusCode.ABORTED, "TransactionConflict"),
    (InvalidAckError, grpc.StatusCode.INVALID_ARGUMENT, "InvalidAck"),
    (SubscriptionClosedError, grpc.StatusCode.FAILED_PRECONDITION, "SubscriptionClosed"),
    (TooManyConsumersError, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyConsumers"),
    (TooManyTopicsError, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyTopics"),
    (ConsumerAssignError, grpc.StatusCode.FAILED_PRECONDITION, "ConsumerAssignError"),
    (EntryTooLargeError, grpc.StatusCode.INVALID_ARGUMENT, "MessageTooBig"),
    (LedgerClosedError, grpc.StatusCode.UNAVAILABLE, "NotReady"),
    # Before StorageError, its base: a full disk is a quota the operator can lift.
    (StorageFullError, grpc.StatusCode.RESOURCE_EXHAUSTED, "StorageFull"),
    (TooManyOpenFilesError, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyOpenFiles"),
    (StorageError, grpc.StatusCode.UNAVAILABLE, "StorageError"),
    (TransactionEndedError, grpc.StatusCode.FAILED_PRECONDITION, "TransactionEnded"),
    (TransactionNotFoundError, grpc.StatusCode.NOT_FOUND, "TransactionNotFound"),
    (TooManyTransactionsError, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyTransactions"),
    (TransactionTooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED, "TooManyTransactionAcks"),
    # The same code as the guard's refusals: the client raises AuthorizationError.
    (TransactionNotOwnedError, grpc.StatusCode.PERMISSION_DENIED, "NotAuthorized"),
    (ProducerBusyError, grpc.StatusCode.FAILED_PRECONDITION, "ProducerBusy"),
    (TransactionBufferNotReadyError, grpc.StatusCode.UNAVAILABLE, "NotReady"),
    # Last: any other malformed value in a request.
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument"),
]


def classify(error: BaseException) -> BrokerError:
    if isinstance(error, BrokerError):
        return error
    for kind, status, code in _MAPPING:
        if isinstance(error, kind):
            return BrokerError(status, code, str(error))
    if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
        # Out of descriptors outside the ledger files (a snapshot, an index file).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return BrokerError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TooManyOpenFiles",
            f"too many open files ({error}); the broker's open-files limit is {soft} "
            f"(hard limit {hard}): raise it (ulimit -n) or lower max_open_ledger_files",
        )
    return BrokerError(grpc.StatusCode.INTERNAL, "Internal", internal_error_message(error))


def internal_error_message(error: BaseException) -> str:
    """Log an unexpected error with a fresh id; what the client gets is the id only.
    The error's own text (a storage library's message, a path) stays in the log."""
    incident = secrets.token_hex(4)
    log.error("internal error (id %s): %r", incident, error, exc_info=error)
    return f"internal error (id {incident}); see the broker log"


def invalid(message: str, code: str = "InvalidArgument") -> BrokerError:
    return BrokerError(grpc.StatusCode.INVALID_ARGUMENT, code, message)


async def abort(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """End the RPC with the error's status; raises, as grpc.aio's abort does."""
    broker_error = classify(error)
    await context.abort(
        broker_error.status,
        str(broker_error),
        trailing_metadata=((ERROR_METADATA_KEY, broker_error.code),),
    )
