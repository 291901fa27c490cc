"""Protobuf messages <-> engine values. Nothing past this module sees protobuf."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dispatcher import (
    Delivery,
    HashRange,
    IsolationLevel,
    KeySharedMode,
    KeySharedPolicy,
    SubscriptionType,
    key_hash,
)
from managed_ledger import Entry, EntryHeader, EntryType, Position, ReplicaState, TxnId
from managed_ledger.ledger import LedgerInfo
from stableline._proto import broker_pb2 as pb
from stableline._proto import cluster_pb2 as cpb
from stableline.broker.cluster.peers import PeerTransaction, PeerTransactionState
from txnbuffer import TxnMetadata, TxnState

if TYPE_CHECKING:
    from stableline.broker.cluster.lookup import TopicOwner

SUBSCRIPTION_TYPES = {
    pb.SUBSCRIPTION_TYPE_EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    pb.SUBSCRIPTION_TYPE_SHARED: SubscriptionType.SHARED,
    pb.SUBSCRIPTION_TYPE_FAILOVER: SubscriptionType.FAILOVER,
    pb.SUBSCRIPTION_TYPE_KEY_SHARED: SubscriptionType.KEY_SHARED,
}
ISOLATION_LEVELS = {
    pb.ISOLATION_LEVEL_READ_COMMITTED: IsolationLevel.READ_COMMITTED,
    pb.ISOLATION_LEVEL_READ_UNCOMMITTED: IsolationLevel.READ_UNCOMMITTED,
}
ISOLATION_TO_PROTO = {level: value for value, level in ISOLATION_LEVELS.items()}
TXN_STATES_TO_PROTO = {
    TxnState.OPEN: pb.TXN_STATE_OPEN,
    TxnState.COMMITTING: pb.TXN_STATE_COMMITTING,
    TxnState.COMMITTED: pb.TXN_STATE_COMMITTED,
    TxnState.ABORTING: pb.TXN_STATE_ABORTING,
    TxnState.TIMEOUT: pb.TXN_STATE_TIMEOUT,
    TxnState.ABORTED: pb.TXN_STATE_ABORTED,
}
assert set(TXN_STATES_TO_PROTO) == set(TxnState), "every coordinator state has a wire value"
TXN_STATES_FROM_PROTO = {value: state for state, value in TXN_STATES_TO_PROTO.items()}
KEY_SHARED_MODES = {
    pb.KEY_SHARED_MODE_AUTO_SPLIT: KeySharedMode.AUTO_SPLIT,
    pb.KEY_SHARED_MODE_STICKY: KeySharedMode.STICKY,
}


def subscription_type(value: int) -> SubscriptionType:
    try:
        return SUBSCRIPTION_TYPES[value]
    except KeyError:
        raise ValueError(f"unknown subscription type {value}") from None


def isolation_level(value: int) -> IsolationLevel:
    try:
        return ISOLATION_LEVELS[value]
    except KeyError:
        names = ", ".join(level.value for level in IsolationLevel)
        raise ValueError(f"unknown isolation level {value}: use one of {names}") from None


def key_shared_policy(message: pb.KeySharedMeta) -> KeySharedPolicy:
    """A Key_Shared consumer's mode and ranges; ValueError names what is wrong."""
    try:
        mode = KEY_SHARED_MODES[message.mode]
    except KeyError:
        raise ValueError(
            f"unknown Key_Shared mode {message.mode}: use AUTO_SPLIT or STICKY"
        ) from None
    ranges = tuple(HashRange(r.start, r.end) for r in message.ranges)
    return KeySharedPolicy(mode, ranges)


def position(message: pb.Position) -> Position:
    return Position(message.ledger_id, message.entry_id)


def position_to_proto(value: Position) -> pb.Position:
    return pb.Position(ledger_id=value.ledger_id, entry_id=value.entry_id)


def message_positions(ids) -> list[tuple[Position, int]]:
    """(entry position, batch index) of each MessageIdData (acks, redeliveries)."""
    return [(Position(m.ledger_id, m.entry_id), m.batch_index) for m in ids]


def txn_id(message: pb.TxnId) -> TxnId:
    """Any message with most_bits and least_bits (the Admin service's look-ups too)."""
    return TxnId(message.most_bits, message.least_bits)


def optional_txn_id(message, field: str = "txn_id") -> TxnId | None:
    """The TxnId in `message.<field>`, or None when the field is not set."""
    return txn_id(getattr(message, field)) if message.HasField(field) else None


def txn_id_to_proto(value: TxnId) -> pb.TxnId:
    return pb.TxnId(most_bits=value.most_bits, least_bits=value.least_bits)


def transaction_to_proto(meta: TxnMetadata) -> pb.GetTransactionResponse:
    return pb.GetTransactionResponse(
        txn_id=txn_id_to_proto(meta.txn_id),
        state=TXN_STATES_TO_PROTO[meta.state],
        open_timestamp_ms=meta.opened_ms,
        timeout_at_ms=meta.opened_ms + meta.timeout_ms,
        ended_timestamp_ms=meta.ended_ms,
        name=meta.name,
    )


def txn_action(commit: bool) -> int:
    return pb.TXN_ACTION_COMMIT if commit else pb.TXN_ACTION_ABORT


# ------------------------------------------------------------ the Peer service


def on_behalf_of(caller: str | None) -> cpb.OnBehalfOf:
    """The role a client's call was made with (None: the broker's own, unchecked)."""
    return cpb.OnBehalfOf(checked=caller is not None, role=caller or "")


def checked_as(message: cpb.OnBehalfOf) -> str | None:
    """on_behalf_of's caller back."""
    return message.role if message.checked else None


def acked_messages_to_proto(message_ids: list[tuple[int, int, int]]) -> list[cpb.AckedMessage]:
    """(ledger id, entry id, batch index) of each acknowledged message."""
    return [
        cpb.AckedMessage(ledger_id=ledger, entry_id=entry, batch_index=batch)
        for ledger, entry, batch in message_ids
    ]


def acked_messages(messages) -> list[tuple[int, int, int]]:
    """acked_messages_to_proto's message ids back."""
    return [(m.ledger_id, m.entry_id, m.batch_index) for m in messages]


def new_transaction_response(
    txn_id: TxnId, state: TxnState, coordinator_address: str = ""
) -> pb.NewTransactionResponse:
    return pb.NewTransactionResponse(
        txn_id=txn_id_to_proto(txn_id), state=state.value, coordinator_address=coordinator_address
    )


def peer_transaction(message: pb.NewTransactionResponse) -> PeerTransaction:
    """A peer's answer to OpenTransaction."""
    return PeerTransaction(txn_id(message.txn_id), TxnState(message.state))


def peer_transaction_state(message: pb.GetTransactionResponse) -> PeerTransactionState:
    """A peer's answer to GetTransactionState."""
    return PeerTransactionState(
        TXN_STATES_FROM_PROTO[message.state], message.coordinator_low_watermark
    )


def replica_state_to_proto(state: ReplicaState) -> cpb.ReplicaState:
    return cpb.ReplicaState(
        epoch=state.epoch,
        ledger_id=state.ledger_id,
        entry_count=state.entry_count,
        closed=state.closed,
    )


def replica_state(message: cpb.ReplicaState) -> ReplicaState:
    return ReplicaState(message.epoch, message.ledger_id, message.entry_count, message.closed)


def owner_to_proto(owner: TopicOwner) -> pb.LookupResponse:
    broker = owner.broker
    return pb.LookupResponse(
        topic=str(owner.topic),
        grpc_address=broker.grpc_address,
        http_address=broker.http_address,
        tls=broker.tls,
        service_url=broker.service_url,
        http_url=broker.http_url,
        action=pb.LOOKUP_ACTION_CONNECT,
    )


def ledger_to_proto(info: LedgerInfo) -> pb.LedgerInfo:
    return pb.LedgerInfo(
        ledger_id=info.ledger_id, entries=info.entries, size_bytes=info.size, closed=info.closed
    )


def header_from_send(send: pb.ProducerSend, producer_name: str) -> EntryHeader:
    """The stored header of a sent batch; its sequence id is the send's (de-duplication)."""
    metadata = send.metadata
    return EntryHeader(
        type=EntryType.DATA,
        num_messages=metadata.num_messages,
        publish_time_ms=metadata.publish_time_ms or int(time.time() * 1000),
        producer_name=producer_name,
        sequence_id=send.sequence_id,
        txn_id=optional_txn_id(metadata),
        key_hash=key_hash(send.partition_key) if send.has_partition_key else None,
    )


def header_to_proto(header: EntryHeader) -> pb.EntryMetadata:
    metadata = pb.EntryMetadata(
        type=int(header.type),
        num_messages=header.num_messages,
        publish_time_ms=header.publish_time_ms,
        producer_name=header.producer_name,
        sequence_id=header.sequence_id,
        low_watermark=header.low_watermark,
    )
    if header.txn_id is not None:
        metadata.txn_id.most_bits = header.txn_id.most_bits
        metadata.txn_id.least_bits = header.txn_id.least_bits
    return metadata


def entry_to_proto(
    entry: Entry, redelivery_count: int = 0, acked_batch_indexes: tuple[int, ...] = ()
) -> pb.EntryDelivery:
    return pb.EntryDelivery(
        ledger_id=entry.position.ledger_id,
        entry_id=entry.position.entry_id,
        metadata=header_to_proto(entry.header),
        payload=entry.payload,
        redelivery_count=redelivery_count,
        acked_batch_indexes=acked_batch_indexes,
    )


def delivery_to_proto(delivery: Delivery) -> pb.EntryDelivery:
    return entry_to_proto(delivery.entry, delivery.redelivery_count, delivery.acked_batch_indexes)
