"""stableline: a message broker whose heart is the transaction buffer.

The blocking client lives here; `stableline.aio` has the same names with async/await.
"""

from stableline._auth import AuthenticationToken
from stableline._errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnavailable,
    ConsumerAssignError,
    InvalidArgument,
    InvalidMessageId,
    InvalidTopicName,
    IsolationLevelMismatch,
    LimitExceeded,
    MessageTooBig,
    NotReady,
    ProducerQueueIsFull,
    StableLineError,
    StorageError,
    StorageFull,
    SubscriptionBusy,
    Timeout,
    TopicNotFound,
    TransactionEnded,
    TransactionNotFound,
)
from stableline._keys import BatchingType, KeySharedMode, KeySharedPolicy
from stableline._sync import Client, Consumer, Producer, Reader, Transaction
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    Message,
    MessageId,
    Messages,
    TransactionState,
)
from stableline.aio._options import ClientOptions, ConsumerOptions, ProducerOptions, ReaderOptions

__all__ = [
    "AuthenticationError",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchingType",
    "BrokerUnavailable",
    "Client",
    "ClientOptions",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerOptions",
    "ConsumerType",
    "InitialPosition",
    "InvalidArgument",
    "InvalidMessageId",
    "InvalidTopicName",
    "IsolationLevel",
    "IsolationLevelMismatch",
    "KeySharedMode",
    "KeySharedPolicy",
    "LimitExceeded",
    "Message",
    "MessageId",
    "MessageTooBig",
    "Messages",
    "NotReady",
    "Producer",
    "ProducerOptions",
    "ProducerQueueIsFull",
    "Reader",
    "ReaderOptions",
    "StableLineError",
    "StorageError",
    "StorageFull",
    "SubscriptionBusy",
    "Timeout",
    "TopicNotFound",
    "Transaction",
    "TransactionEnded",
    "TransactionNotFound",
    "TransactionState",
]
