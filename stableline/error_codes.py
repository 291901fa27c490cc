"""The one table of the stable error codes the broker sends, shared by the broker and
the client (Kafka's `Errors` enum is the model: one row per error, used by every face).

A code travels in the gRPC trailing metadata key `ERROR_METADATA_KEY` (or in the
error field of a stream's response); the HTTP admin answers the same refusal with
the row's HTTP status, the Kafka port with the row's Kafka error code. The broker
maps its exceptions to codes (stableline/broker/errors.py) and each face reads its
column here; the client raises the exception its own table names for the code.
tests/test_error_codes.py keeps the broker, the faces and the client to this table,
and docs/reference/errors.md is written from it (`make docs`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import grpc

ERROR_METADATA_KEY = "stableline-error"
# With NotOwner for a transaction: the gRPC address of its coordinator shard's leader.
LEADER_METADATA_KEY = "stableline-leader"


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One stable code and how each face reports it."""

    code: str
    grpc_status: grpc.StatusCode
    http_status: int
    kafka_error: (
        KafkaError | None
    )  # what the Kafka port answers; None: Kafka's port has no equivalent
    meaning: str


_S = grpc.StatusCode


class KafkaError(enum.IntEnum):
    """The Kafka error codes of the table, numbered as Kafka's protocol numbers them
    (the Kafka face's own `ErrorCode` holds these and the rest)."""

    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    ILLEGAL_GENERATION = 22
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    TOPIC_ALREADY_EXISTS = 36
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58


_K = KafkaError

# fmt: off
ROWS: tuple[ErrorCode, ...] = (
    ErrorCode("InvalidTopicName", _S.INVALID_ARGUMENT, 400, _K.INVALID_TOPIC_EXCEPTION,
              "the text is not a topic name"),
    ErrorCode("InvalidArgument", _S.INVALID_ARGUMENT, 400, _K.INVALID_REQUEST,
              "a malformed request or value (a name, a count, a batch); the message says why"),
    ErrorCode("TopicNotFound", _S.NOT_FOUND, 404, _K.UNKNOWN_TOPIC_OR_PARTITION,
              "the topic does not exist (and this caller may not create it)"),
    ErrorCode("TopicConflict", _S.ALREADY_EXISTS, 409, _K.TOPIC_ALREADY_EXISTS,
              "the name is taken by a topic of the other kind (partitioned or not)"),
    ErrorCode("TopicBusy", _S.FAILED_PRECONDITION, 409, None,
              "the topic has connected producers or consumers; close them or force"),
    # Pulsar answers 412 to a full namespace too.
    ErrorCode("TooManyTopics", _S.RESOURCE_EXHAUSTED, 412, _K.POLICY_VIOLATION,
              "the namespace holds `max_topics_per_namespace` topics"),
    # HTTP redirects (307) to the owner instead, as Pulsar does.
    ErrorCode("NotOwner", _S.FAILED_PRECONDITION, 307, _K.NOT_LEADER_OR_FOLLOWER,
              "another broker owns the topic, or leads the transaction's coordinator shard"),
    ErrorCode("TopicUnavailable", _S.UNAVAILABLE, 503, _K.NOT_LEADER_OR_FOLLOWER,
              "the owning broker is down, or a topic cannot be placed while etcd is away; retry "
              "later"),
    # Kafka's CreateTopics answers INVALID_REPLICATION_FACTOR instead (api_topics.py).
    ErrorCode("NotEnoughBrokers", _S.UNAVAILABLE, 503, _K.NOT_ENOUGH_REPLICAS,
              "fewer live brokers than the namespace's persistence policy asks for (its "
              "ensemble); retry once more are up, or lower it (`set-persistence`)"),
    ErrorCode("CoordinatorUnavailable", _S.UNAVAILABLE, 503, _K.COORDINATOR_NOT_AVAILABLE,
              "the broker leading the transaction's coordinator shard is down"),
    ErrorCode("BrokerUnavailable", _S.UNAVAILABLE, 503, _K.NOT_LEADER_OR_FOLLOWER,
              "another broker of the cluster, asked on the caller's behalf, did not answer; or "
              "a fenced broker (its session lost) cannot name a topic's owner: ask another"),
    ErrorCode("MetadataStoreUnavailable", _S.UNAVAILABLE, 503, None,
              "the cluster's etcd cannot answer a change of shared metadata; retry later"),
    ErrorCode("BrokerFenced", _S.UNAVAILABLE, 503, _K.NOT_LEADER_OR_FOLLOWER,
              "the broker lost its cluster session and takes no writes until it is back"),
    ErrorCode("NotEnoughReplicas", _S.UNAVAILABLE, 503, _K.NOT_ENOUGH_REPLICAS,
              "fewer replicas of the topic's ensemble can hold a write than its ack quorum; "
              "nothing was kept, and writes resume once enough are back: retry"),
    ErrorCode("TopicFenced", _S.UNAVAILABLE, 503, _K.NOT_LEADER_OR_FOLLOWER,
              "another broker took the topic (a newer epoch); look it up again and retry"),
    ErrorCode("TopicNotMovable", _S.FAILED_PRECONDITION, 409, None,
              "a topic cannot move to that broker: one copy only (on its owner's disk), or the "
              "broker is not a live member of its ensemble; the message says which"),
    ErrorCode("NotReady", _S.UNAVAILABLE, 503, _K.NOT_LEADER_OR_FOLLOWER,
              "the topic is still recovering (past `topic_recovery_wait_s`), or its ledger is "
              "closing; retryable"),
    ErrorCode("SubscriptionBusy", _S.FAILED_PRECONDITION, 409, None,
              "the subscription cannot take this consumer (Exclusive taken, another type)"),
    ErrorCode("ConsumerAssignError", _S.FAILED_PRECONDITION, 409, None,
              "a Key_Shared consumer's sticky ranges overlap another's, or its mode differs"),
    ErrorCode("IsolationLevelMismatch", _S.FAILED_PRECONDITION, 409, None,
              "the subscription exists with the other isolation level"),
    ErrorCode("SubscriptionClosed", _S.FAILED_PRECONDITION, 409, None,
              "the subscription is closing (unsubscribed, its topic unloading)"),
    ErrorCode("InvalidAck", _S.INVALID_ARGUMENT, 400, None,
              "an ack or seek names a message that does not exist or is not allowed"),
    ErrorCode("TransactionConflict", _S.ABORTED, 409, _K.ILLEGAL_GENERATION,
              "a transactional ack names a message already acknowledged, or held by an open "
              "transaction: abort and consume again"),
    ErrorCode("TooManyConsumers", _S.RESOURCE_EXHAUSTED, 429, None,
              "`max_consumers_per_subscription`"),
    ErrorCode("MessageTooBig", _S.INVALID_ARGUMENT, 413, _K.MESSAGE_TOO_LARGE,
              "a message or batch past `max_message_size`"),
    ErrorCode("StorageFull", _S.RESOURCE_EXHAUSTED, 507, _K.KAFKA_STORAGE_ERROR,
              "the disk is full; nothing of the write was kept"),
    ErrorCode("StorageError", _S.UNAVAILABLE, 503, _K.KAFKA_STORAGE_ERROR,
              "the disk failed the write; nothing of it was kept, a retry is safe"),
    ErrorCode("TooManyOpenFiles", _S.RESOURCE_EXHAUSTED, 503, _K.KAFKA_STORAGE_ERROR,
              "the broker is out of file descriptors; the message names the limit"),
    ErrorCode("TransactionEnded", _S.FAILED_PRECONDITION, 409, _K.INVALID_PRODUCER_EPOCH,
              "a send, ack or end of a transaction that has already ended"),
    ErrorCode("TransactionNotFound", _S.NOT_FOUND, 404, None,
              "no such transaction (or it was forgotten: `txn_ended_retention_s`)"),
    ErrorCode("TooManyTransactions", _S.RESOURCE_EXHAUSTED, 429, None,
              "`max_open_transactions` or `max_open_transactions_per_client`"),
    ErrorCode("TooManyTransactionAcks", _S.RESOURCE_EXHAUSTED, 429, _K.INVALID_COMMIT_OFFSET_SIZE,
              "`max_acks_per_transaction`"),
    ErrorCode("ProducerBusy", _S.FAILED_PRECONDITION, 409, None,
              "another role's producer of that name is connected, or this one was replaced by a "
              "newer one of its name"),
    ErrorCode("AuthenticationFailed", _S.UNAUTHENTICATED, 401, _K.SASL_AUTHENTICATION_FAILED,
              "no valid token, or it expired"),
    ErrorCode("NotAuthorized", _S.PERMISSION_DENIED, 403, _K.TOPIC_AUTHORIZATION_FAILED,
              "the role may not do this (a grant, or a transaction of another role)"),
    ErrorCode("TooManyConnections", _S.RESOURCE_EXHAUSTED, 429, None,
              "`max_connections` or `max_connections_per_address`"),
    ErrorCode("IdleStream", _S.DEADLINE_EXCEEDED, 408, None,
              "a stream sent no opening request within `connection_idle_timeout_s`"),
    # Refusals of a replica to the topic's writer (Peer service); clients never get them.
    ErrorCode("ReplicaFenced", _S.FAILED_PRECONDITION, 409, None,
              "a replica holds a higher epoch for the topic: a newer owner took it"),
    ErrorCode("ReplicaGap", _S.OUT_OF_RANGE, 416, None,
              "a replica holds fewer entries of the ledger than the write or close assumes; "
              "the count it holds is in the trailing metadata `stableline-replica-held`"),
    ErrorCode("ReplicaLedgerClosed", _S.FAILED_PRECONDITION, 409, None,
              "a replica holds the ledger as closed, or a newer one"),
    ErrorCode("ReplicaCorruptEntry", _S.INVALID_ARGUMENT, 400, None,
              "an entry sent to or read from a replica fails its checks; nothing was written"),
    ErrorCode("ReplicaSnapshotMismatch", _S.FAILED_PRECONDITION, 409, None,
              "a replica holds another transaction buffer snapshot than the change sent "
              "follows; nothing was written (the writer sends the whole snapshot)"),
    ErrorCode("ReplicaRefused", _S.FAILED_PRECONDITION, 409, None,
              "a replica refused a write that would cut confirmed entries"),
    ErrorCode("Internal", _S.INTERNAL, 500, _K.UNKNOWN_SERVER_ERROR,
              "an unexpected error; the message is `internal error (id ...); see the broker "
              "log`, and the log has the details under that id"),
)
# fmt: on

ERROR_CODES: dict[str, ErrorCode] = {row.code: row for row in ROWS}
assert len(ERROR_CODES) == len(ROWS), "a code appears twice in the table"

INTERNAL = ERROR_CODES["Internal"]


def row_of(code: str) -> ErrorCode:
    """The code's row; a code this table does not know (a newer peer's) is Internal's."""
    return ERROR_CODES.get(code, INTERNAL)
