"""Typed client errors; every one derives from StableLineError."""

from __future__ import annotations

import grpc

from stableline.error_codes import ERROR_METADATA_KEY, LEADER_METADATA_KEY


class StableLineError(Exception):
    """Base class of every error the client raises."""


class Timeout(StableLineError):
    """Nothing arrived, or the broker did not answer, within the time given."""


class TopicNotFound(StableLineError):
    """The topic does not exist."""


class InvalidTopicName(StableLineError):
    """The text is not a topic name."""


class IsolationLevelMismatch(StableLineError):
    """The subscription exists with another isolation level."""


class SubscriptionBusy(StableLineError):
    """The subscription cannot take this consumer (Exclusive taken, or other type)."""


class ConsumerAssignError(SubscriptionBusy):
    """A Key_Shared subscription cannot give this consumer hashes: its sticky ranges
    overlap another consumer's, or its Key_Shared mode differs from theirs."""


class TransactionEnded(StableLineError):
    """Send, ack, commit or abort on a transaction that has already ended."""


class TransactionNotFound(StableLineError):
    """No transaction with that id is known to the coordinator."""


class MessageTooBig(StableLineError):
    """A message (or batch) exceeds the broker's max message size."""


class InvalidMessageId(StableLineError):
    """An acknowledgement or seek names a message that does not exist or is not allowed."""


class TransactionConflict(InvalidMessageId):
    """A transactional ack names a message already acknowledged, or already
    acknowledged in an open transaction (another, or the same one). Committing could
    commit the output for one message twice: abort the transaction and consume again.
    A subclass of InvalidMessageId, which this case raised before."""


class NotReady(StableLineError):
    """The topic or broker is not ready (starting, recovering or shutting down), or the
    broker is fenced: in a cluster, it takes no writes while it is out of its cluster
    (its metadata session lost). Producers and consumers wait it out by themselves."""


class StorageError(StableLineError):
    """The broker's disk failed the write; nothing of it was kept, so a retry is safe."""


class StorageFull(StorageError):
    """The broker's disk is full; nothing of the write was kept. Retry once space is freed."""


class LimitExceeded(StableLineError):
    """A broker limit refused the request (RESOURCE_EXHAUSTED): too many consumers on the
    subscription, open transactions, or connections. Nothing was done; retry later."""


class TooManyTopics(LimitExceeded):
    """The namespace holds max_topics_per_namespace topics; the topic was not created."""


class ProducerQueueIsFull(LimitExceeded):
    """The producer already holds max_pending_messages unacknowledged messages and was
    created with block_if_queue_full=False. The message was not queued."""


class ProducerBusy(StableLineError):
    """Another producer of that name is connected to the topic (under another role), or
    this one was replaced by a newer producer of its name. Nothing was sent."""


class BrokerUnavailable(StableLineError):
    """The broker cannot be reached or the connection broke."""


class MetadataUnavailable(BrokerUnavailable):
    """The cluster's metadata store (etcd) cannot answer a change of shared metadata
    (code MetadataStoreUnavailable); nothing was changed. Retry later."""


class IdleStream(Timeout):
    """The broker closed a stream that sent no opening request within its
    connection_idle_timeout_s."""


class InternalError(StableLineError):
    """The broker failed unexpectedly; the message holds an id under which the broker's
    log has the details."""


class AuthenticationError(StableLineError):
    """The broker did not accept the credentials (UNAUTHENTICATED)."""


class AuthorizationError(StableLineError):
    """The role may not do this (PERMISSION_DENIED)."""


class TopicConflict(StableLineError):
    """The name is taken by a topic of the other kind (partitioned or not), or the
    partitioned topic exists already."""


class TopicBusy(StableLineError):
    """The topic has connected producers or consumers; close them or force."""


class OperationNotSupported(StableLineError):
    """The call cannot be made on this kind of topic (a reader on a partitioned topic)."""


class TopicUnavailable(StableLineError):
    """The broker that owns the topic is down (the message names it and since when);
    its data comes back with it, so the call can be retried later. Also raised for a
    transaction whose coordinator shard's broker is down."""


class NotEnoughBrokers(TopicUnavailable):
    """Fewer brokers are live than the topic's namespace asks to hold each ledger (its
    persistence policy's ensemble); nothing was created. Retryable: the call succeeds
    once enough brokers are up, or after an admin lowers the policy
    (`stableline admin namespaces set-persistence`)."""


class NotOwner(StableLineError):
    """The broker asked does not own the topic; the client looks the topic up again
    and follows the answer (raised only once those retries are spent). For a
    transaction, `leader_address` names the broker leading its coordinator shard."""

    leader_address: str = ""


class InvalidArgument(StableLineError):
    """The broker refused a request as malformed; the message says why."""


CODES: dict[str, type[StableLineError]] = {
    "TopicNotFound": TopicNotFound,
    "TopicConflict": TopicConflict,
    "TopicBusy": TopicBusy,
    "TopicUnavailable": TopicUnavailable,
    "CoordinatorUnavailable": TopicUnavailable,
    "NotEnoughBrokers": NotEnoughBrokers,
    "OperationNotSupported": OperationNotSupported,
    "NotOwner": NotOwner,
    "InvalidTopicName": InvalidTopicName,
    "IsolationLevelMismatch": IsolationLevelMismatch,
    "SubscriptionBusy": SubscriptionBusy,
    "ConsumerAssignError": ConsumerAssignError,
    "TransactionEnded": TransactionEnded,
    "TransactionNotFound": TransactionNotFound,
    "MessageTooBig": MessageTooBig,
    "InvalidAck": InvalidMessageId,
    "TransactionConflict": TransactionConflict,
    "NotReady": NotReady,
    "BrokerUnavailable": BrokerUnavailable,
    "MetadataStoreUnavailable": MetadataUnavailable,
    "IdleStream": IdleStream,
    "Internal": InternalError,
    "BrokerFenced": NotReady,
    "NotEnoughReplicas": NotReady,
    "TopicFenced": NotReady,
    "TopicNotMovable": OperationNotSupported,
    "SubscriptionClosed": NotReady,
    "InvalidArgument": InvalidArgument,
    "TooManyConsumers": LimitExceeded,
    "TooManyTopics": TooManyTopics,
    "TooManyTransactions": LimitExceeded,
    "TooManyTransactionAcks": LimitExceeded,
    "ProducerBusy": ProducerBusy,
    # Refusals reported in a stream's response (a send, an ack) rather than its status.
    "AuthenticationFailed": AuthenticationError,
    "NotAuthorized": AuthorizationError,
    "TooManyConnections": LimitExceeded,
    "TooManyOpenFiles": LimitExceeded,
    "StorageFull": StorageFull,
    "StorageError": StorageError,
    # A replica's refusals to the topic's writer: a client meets one only relayed by
    # the owner, and then retries as for the owner's own (a newer owner: look it up).
    "ReplicaFenced": NotOwner,
    "ReplicaGap": NotReady,
    "ReplicaLedgerClosed": NotReady,
    "ReplicaRefused": NotReady,
    "ReplicaCorruptEntry": StorageError,
    "ReplicaSnapshotMismatch": NotReady,
}

STATUSES: dict[grpc.StatusCode, type[StableLineError]] = {
    grpc.StatusCode.NOT_FOUND: TopicNotFound,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.UNAVAILABLE: BrokerUnavailable,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthorizationError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitExceeded,
}


def from_code(code: str, message: str) -> StableLineError:
    return CODES.get(code, StableLineError)(message)


def from_rpc_error(error: grpc.aio.AioRpcError | grpc.RpcError) -> StableLineError:
    code = leader = ""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY:
            code = value
        elif key == LEADER_METADATA_KEY:
            leader = value
    message = error.details() or str(error.code())
    if code not in CODES:
        return STATUSES.get(error.code(), StableLineError)(message)
    converted = CODES[code](message)
    if leader and isinstance(converted, NotOwner):
        converted.leader_address = leader
    return converted
