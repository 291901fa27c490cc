"""What this broker asks of the other brokers of its cluster, in the broker's own values.

`PeerClient` is the one way the core (txn/, cluster/) reaches another broker: each
method takes and returns transaction ids, states, topic names and stats documents,
never a wire message. The gRPC face implements it (grpc/peer_client.py: the Peer
service for transactions, the Admin service for a partition's stats and deletion,
Broker.EndTransaction as a client would call it); the app builds that one and hands
it to what needs it.

Promises of an implementation:
- A call has a deadline (`timeout_s`); callers that must get through (a decided
  transaction's end) retry with their own backoff.
- It goes with this broker's credentials (PeerCredentials: TLS and the brokers' own
  token where security is on, as Pulsar's brokerClientAuthentication).
- A refusal the transaction engine names comes back as the engine's own error
  (TransactionEndedError, TransactionNotFoundError, TransactionNotOwnedError,
  TooManyTransactionsError, TransactionTooLargeError), whichever broker refused; any
  other refusal as a Refusal (broker/errors.py) with the peer's own code, so it
  reaches this broker's client unchanged; a peer that cannot be reached as UNAVAILABLE
  (BrokerUnavailable) naming it.
- The replica calls (`replicate`, `fence_replica`, `read_replica`,
  `close_replica_ledger`, `replicate_snapshot`...) raise a replica's refusal as the storage engine's own
  error (ReplicaFencedError, ReplicaGapError with the count the replica holds,
  ReplicaLedgerClosedError, ReplicaCorruptEntryError, ReplicaSnapshotMismatchError,
  ReplicaError), and an
  unreachable replica as BrokerUnavailable, as above.
- The admin calls (`topic_stats`, `delete_topic`) raise TopicNotFoundError for a
  topic the owner does not have, and PeerCallError (peer_admin.py: retry later) for
  anything else, naming the owner and what it said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from managed_ledger import Position, ReplicaState, SnapshotCopy, TxnId
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName
from txnbuffer import TxnAck, TxnState

# A peer call waits this long; callers that must get through (a decided transaction's
# end) retry with their own backoff.
PEER_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """How this broker reaches its peers: TLS trusting `trust_certs` (PEM bytes; None:
    plaintext) and a token sent as the bearer (None: none)."""

    trust_certs: bytes | None = None
    token: str | None = None
    # Client certificate and key (PEM) for peers that require one.
    cert_chain: bytes | None = None
    private_key: bytes | None = None


@dataclass(frozen=True, slots=True)
class PeerTransaction:
    """A transaction as the leader of its shard answers for it."""

    txn_id: TxnId
    state: TxnState


@dataclass(frozen=True, slots=True)
class PeerTransactionState:
    """A transaction's state, and its shard's low watermark, from the shard's leader."""

    state: TxnState
    low_watermark: int


@dataclass(frozen=True, slots=True)
class GroupOffsetCommit:
    """A Kafka consumer group's offset for one partition (Kafka topic name), handed
    to the partition's owner, which alone may acknowledge on its subscription."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class GroupOffsetHold:
    """A Kafka consumer group's offset for one partition committed in a transaction
    (TxnOffsetCommit): the owner holds its acknowledgement in the transaction.
    `held_from`: the offset the transaction held for the partition before (-1: none)."""

    topic: str
    partition: int
    offset: int
    held_from: int = -1


@dataclass(frozen=True, slots=True)
class FetchedGroupOffset:
    """A group's committed offset on one partition as its owner answers it (-1: none),
    with a Kafka error code (0: none)."""

    offset: int
    metadata: str
    error_code: int = 0


class GroupOffsetsHere(Protocol):
    """What the Kafka face does for a group's coordinator on another broker: commit and
    read the group's offsets on the partitions this broker owns (Kafka error codes,
    one per offset or partition in order; NOT_LEADER_OR_FOLLOWER where it owns none)."""

    async def commit_here(
        self, group_id: str, read_committed: bool, offsets: list[GroupOffsetCommit]
    ) -> list[int]: ...

    async def fetch_here(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[FetchedGroupOffset]: ...

    async def hold_here(
        self, group_id: str, read_committed: bool, txn_id: TxnId, holds: list[GroupOffsetHold]
    ) -> list[int]: ...


class ReplicaPeers(Protocol):
    """The calls a topic's writer and its recovery make to the other members of its
    ensemble, at their gRPC `address`."""

    timeout_s: float

    async def replicate(
        self,
        address: str,
        topic: str,
        epoch: int,
        ledger_id: int,
        first_entry_id: int,
        frames: list[bytes],
        last_add_confirmed: Position,
        timeout_s: float | None = None,
    ) -> ReplicaState:
        """Write `frames` (each as the writer's Segment put it on disk) as entries
        first_entry_id... of `ledger_id` on the replica; answered once they are durable
        there. `timeout_s`: this call's deadline (None: `timeout_s`)."""
        ...

    async def fence_replica(self, address: str, topic: str, epoch: int) -> ReplicaState:
        """Make the replica hold `epoch` for `topic` and refuse lower ones from now on."""
        ...

    async def read_replica(
        self,
        address: str,
        topic: str,
        ledger_id: int,
        first_entry_id: int,
        max_entries: int,
        max_bytes: int,
    ) -> list[bytes]:
        """Frames the replica holds of `ledger_id`, in order from `first_entry_id`."""
        ...

    async def close_replica_ledger(
        self, address: str, topic: str, epoch: int, ledger_id: int, last_entry_id: int
    ) -> ReplicaState:
        """Close the replica's copy of `ledger_id` at `last_entry_id` (cutting the rest)."""
        ...

    async def trim_replica(
        self, address: str, topic: str, epoch: int, below_ledger_id: int
    ) -> ReplicaState:
        """Delete the replica's copies of ledgers below `below_ledger_id` (retention)."""
        ...

    async def replicate_cursors(
        self, address: str, topic: str, epoch: int, states: dict[str, bytes], deleted: list[str]
    ) -> None:
        """Keep the writer's cursor states (and forget the deleted ones) beside the copy."""
        ...

    async def read_replica_cursors(self, address: str, topic: str) -> dict[str, bytes]:
        """The cursor states the replica holds beside its copy (name -> persisted form)."""
        ...

    async def replicate_snapshot(
        self,
        address: str,
        topic: str,
        epoch: int,
        copy: SnapshotCopy,
        timeout_s: float | None = None,
    ) -> None:
        """Keep the writer's transaction-buffer snapshot (a change of it, or the
        whole) beside the copy; ReplicaSnapshotMismatchError when the replica holds
        another state than the change follows."""
        ...


class PeerClient(ReplicaPeers, Protocol):
    """Calls to the broker at a gRPC `address` (a shard's leader, a topic's owner).

    `caller` is the role a client's call was made with, which the peer checks as if
    the client had called it; None: this broker's own call, checked by nobody."""

    timeout_s: float

    async def open_transaction(
        self, address: str, shard: int, timeout_ms: int, name: str, owner: str, client: str
    ) -> PeerTransaction:
        """A new (or the named) transaction on `shard`, which the peer leads."""
        ...

    async def add_topic(self, address: str, txn_id: TxnId, topic: str, caller: str | None) -> None:
        """Record that the transaction writes to `topic`."""
        ...

    async def check_ack(self, address: str, txn_id: TxnId, caller: str | None, count: int) -> None:
        """Raise what add_ack of `count` messages would refuse, recording nothing."""
        ...

    async def add_ack(self, address: str, txn_id: TxnId, ack: TxnAck, caller: str | None) -> None:
        """Record a transactional ack with the transaction's coordinator."""
        ...

    async def transaction_state(self, address: str, txn_id: TxnId) -> PeerTransactionState:
        """The transaction's state on its shard's leader (TransactionNotFoundError if
        it does not know it)."""
        ...

    async def end_on_topic(
        self, address: str, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        """Write the transaction's end marker into `topic`, which the peer owns."""
        ...

    async def end_acks(self, address: str, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        """Apply (commit) or release (abort) the transaction's acks on a subscription of
        a topic the peer owns."""
        ...

    async def end_transaction(self, address: str, txn_id: TxnId, commit: bool) -> TxnState:
        """End the transaction as its client would (Broker.EndTransaction, with this
        broker's own credentials): its state after the call."""
        ...

    async def commit_group_offsets(
        self, address: str, group_id: str, read_committed: bool, offsets: list[GroupOffsetCommit]
    ) -> list[int]:
        """Commit a Kafka group's offsets on partitions the peer owns, durably once this
        returns: a Kafka error code for each offset, in order (GroupOffsetsHere)."""
        ...

    async def fetch_group_offsets(
        self, address: str, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[FetchedGroupOffset]:
        """A Kafka group's committed offsets on partitions the peer owns, in order."""
        ...

    async def hold_group_offsets(
        self,
        address: str,
        group_id: str,
        read_committed: bool,
        txn_id: TxnId,
        holds: list[GroupOffsetHold],
    ) -> list[int]:
        """Hold in transaction `txn_id` the acknowledgements a Kafka group's offsets
        make on partitions the peer owns: a Kafka error code for each, in order."""
        ...

    async def topic_stats(self, owner: BrokerInfo, topic: TopicName) -> dict[str, Any]:
        """The topic's stats document, as its owner's GET .../stats answers it."""
        ...

    async def delete_topic(self, owner: BrokerInfo, topic: TopicName) -> None:
        """Delete the topic at its owner (its files and its ownership record)."""
        ...

    async def unload_topic(self, owner: BrokerInfo, topic: TopicName, to: str | None = None) -> str:
        """Unload the topic at its owner (TopicMoves.transfer there), to broker `to`
        when given (the balancer's moves): the broker serving it now."""
        ...

    async def close(self) -> None:
        """Close every connection to a peer (after the last call)."""
        ...
