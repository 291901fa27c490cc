"""The cluster's PeerClient over gRPC: this broker's calls to the other brokers.

One channel per peer, made on first use and kept while this broker runs; TLS and
a bearer token when the cluster's security asks for them (PeerCredentials). Each
call turns the broker's values into the peer's request and its answer back
(convert.py), so nothing past this module sees a protobuf message, and turns a
failed call into the error cluster/peers.py promises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from managed_ledger import (
    Position,
    ReplicaCorruptEntryError,
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
    ReplicaState,
    SnapshotCopy,
    TxnId,
)
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2_grpc, cluster_pb2_grpc
from stableline._proto import broker_pb2 as pb
from stableline._proto import cluster_pb2 as cpb
from stableline.broker.cluster.peer_admin import PeerCallError
from stableline.broker.cluster.peers import (
    PEER_CALL_TIMEOUT_S,
    FetchedGroupOffset,
    GroupOffsetCommit,
    GroupOffsetHold,
    PeerCredentials,
    PeerTransaction,
    PeerTransactionState,
)
from stableline.broker.cluster.topic_moves import HAND_OVER_STEP_TIMEOUT_S
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import (
    ERROR_METADATA_KEY,
    REPLICA_HELD_METADATA_KEY,
    RpcRefusal,
)
from stableline.broker.topics.registry import TopicNotFoundError
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName
from txnbuffer import (
    TooManyTransactionsError,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
    TxnAck,
    TxnState,
)

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", -1),
]

# A peer's refusal that the transaction engine names, raised here as the engine's error.
ENGINE_ERRORS: dict[str, type[Exception]] = {
    "TransactionEnded": TransactionEndedError,
    "TransactionNotFound": TransactionNotFoundError,
    "NotAuthorized": TransactionNotOwnedError,
    "TooManyTransactions": TooManyTransactionsError,
    "TooManyTransactionAcks": TransactionTooLargeError,
    "ReplicaFenced": ReplicaFencedError,
    "ReplicaLedgerClosed": ReplicaLedgerClosedError,
    "ReplicaCorruptEntry": ReplicaCorruptEntryError,
    "ReplicaSnapshotMismatch": ReplicaSnapshotMismatchError,
    "ReplicaRefused": ReplicaError,
}

Stub = TypeVar("Stub")

# The default max_message_size: a peer's gRPC port takes requests up to it plus 1 MiB.
DEFAULT_MAX_REPLICATE_BYTES = 5 * 1024 * 1024


class GrpcPeerClient:
    """Implements cluster.peers.PeerClient over the peers' gRPC services."""

    def __init__(
        self,
        credentials: PeerCredentials | None = None,
        max_replicate_bytes: int = DEFAULT_MAX_REPLICATE_BYTES,
    ):
        self._credentials = credentials or PeerCredentials()
        self.timeout_s = PEER_CALL_TIMEOUT_S
        # The frames one ReplicateEntries request carries at most (a lone larger frame
        # goes alone): a peer takes requests of up to max_message_size plus 1 MiB.
        self.max_replicate_bytes = max_replicate_bytes
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, type], Any] = {}

    # ------------------------------------------------------------ channels

    def _channel(self, address: str) -> grpc.aio.Channel:
        """The channel to the broker at `address` (made on first use, then kept)."""
        channel = self._channels.get(address)
        if channel is None:
            credentials = self._credentials
            if credentials.trust_certs is not None:
                channel = grpc.aio.secure_channel(
                    address,
                    grpc.ssl_channel_credentials(
                        credentials.trust_certs,
                        credentials.private_key,
                        credentials.cert_chain,
                    ),
                    options=_CHANNEL_OPTIONS,
                )
            else:
                channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
            self._channels[address] = channel
        return channel

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call to a peer sends: this broker's bearer token, if any."""
        token = self._credentials.token
        return (("authorization", f"Bearer {token}"),) if token else ()

    def _stub(self, address: str, kind: Callable[[grpc.aio.Channel], Stub]) -> Stub:
        key = (address, kind)
        stub = self._stubs.get(key)
        if stub is None:
            stub = self._stubs[key] = kind(self._channel(address))
        return stub

    async def _call(
        self,
        address: str,
        method: Callable[[Any], Callable[..., Awaitable[Any]]],
        request: Any,
        service: Callable[[grpc.aio.Channel], Any] = cluster_pb2_grpc.PeerStub,
        refused: Callable[[grpc.aio.AioRpcError], Exception] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """`method(stub)(request)` on `service` (the Peer service unless named) at
        `address`, within `timeout_s` (`self.timeout_s` unless given); a refusal is
        raised as `refused` makes it (peer_refusal unless named)."""
        try:
            return await method(self._stub(address, service))(
                request,
                timeout=self.timeout_s if timeout_s is None else timeout_s,
                metadata=self.metadata,
            )
        except grpc.aio.AioRpcError as error:
            raise (peer_refusal(address, error) if refused is None else refused(error)) from None

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            with contextlib.suppress(Exception):
                await asyncio.shield(channel.close())

    # ------------------------------------------------------------ transactions

    async def open_transaction(
        self, address: str, shard: int, timeout_ms: int, name: str, owner: str, client: str
    ) -> PeerTransaction:
        request = cpb.OpenTransactionRequest(
            coordinator_shard=shard, timeout_ms=timeout_ms, name=name, owner=owner, client=client
        )
        response = await self._call(address, lambda s: s.OpenTransaction, request)
        return convert.peer_transaction(response)

    async def add_topic(self, address: str, txn_id: TxnId, topic: str, caller: str | None) -> None:
        request = cpb.AddTopicToTransactionRequest(
            txn_id=convert.txn_id_to_proto(txn_id),
            topic=topic,
            caller=convert.on_behalf_of(caller),
        )
        await self._call(address, lambda s: s.AddTopicToTransaction, request)

    async def check_ack(self, address: str, txn_id: TxnId, caller: str | None, count: int) -> None:
        request = cpb.AddAckToTransactionRequest(
            txn_id=convert.txn_id_to_proto(txn_id),
            caller=convert.on_behalf_of(caller),
            check_only=True,
            check_count=count,
        )
        await self._call(address, lambda s: s.AddAckToTransaction, request)

    async def add_ack(self, address: str, txn_id: TxnId, ack: TxnAck, caller: str | None) -> None:
        request = cpb.AddAckToTransactionRequest(
            txn_id=convert.txn_id_to_proto(txn_id),
            topic=ack.topic,
            subscription=ack.subscription,
            messages=convert.acked_messages_to_proto(ack.message_ids),
            caller=convert.on_behalf_of(caller),
        )
        await self._call(address, lambda s: s.AddAckToTransaction, request)

    async def transaction_state(self, address: str, txn_id: TxnId) -> PeerTransactionState:
        request = pb.GetTransactionRequest(txn_id=convert.txn_id_to_proto(txn_id))
        response = await self._call(address, lambda s: s.GetTransactionState, request)
        return convert.peer_transaction_state(response)

    async def end_on_topic(
        self, address: str, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        request = cpb.EndTransactionOnTopicRequest(
            topic=topic,
            txn_id=convert.txn_id_to_proto(txn_id),
            commit=commit,
            low_watermark=low_watermark,
        )
        await self._call(address, lambda s: s.EndTransactionOnTopic, request)

    async def end_acks(self, address: str, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        request = cpb.EndTransactionAcksRequest(
            topic=ack.topic,
            subscription=ack.subscription,
            txn_id=convert.txn_id_to_proto(txn_id),
            commit=commit,
            messages=convert.acked_messages_to_proto(ack.message_ids),
        )
        await self._call(address, lambda s: s.EndTransactionAcks, request)

    async def end_transaction(self, address: str, txn_id: TxnId, commit: bool) -> TxnState:
        request = pb.EndTransactionRequest(
            txn_id=convert.txn_id_to_proto(txn_id), action=convert.txn_action(commit)
        )
        response = await self._call(
            address, lambda s: s.EndTransaction, request, broker_pb2_grpc.BrokerStub
        )
        return TxnState(response.state)

    # ------------------------------------------------------------ Kafka groups

    async def commit_group_offsets(
        self, address: str, group_id: str, read_committed: bool, offsets: list[GroupOffsetCommit]
    ) -> list[int]:
        request = cpb.CommitGroupOffsetsRequest(
            group_id=group_id,
            read_committed=read_committed,
            offsets=[
                cpb.GroupOffsetCommit(
                    topic=each.topic,
                    partition=each.partition,
                    offset=each.offset,
                    metadata=each.metadata,
                )
                for each in offsets
            ],
        )
        response = await self._call(address, lambda s: s.CommitGroupOffsets, request)
        return list(response.error_codes)

    async def fetch_group_offsets(
        self, address: str, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[FetchedGroupOffset]:
        request = cpb.FetchGroupOffsetsRequest(
            group_id=group_id,
            partitions=[
                cpb.GroupPartition(topic=topic, partition=partition)
                for topic, partition in partitions
            ],
        )
        response = await self._call(address, lambda s: s.FetchGroupOffsets, request)
        return [
            FetchedGroupOffset(each.offset, each.metadata, each.error_code)
            for each in response.offsets
        ]

    async def hold_group_offsets(
        self,
        address: str,
        group_id: str,
        read_committed: bool,
        txn_id: TxnId,
        holds: list[GroupOffsetHold],
    ) -> list[int]:
        request = cpb.HoldGroupOffsetsRequest(
            group_id=group_id,
            read_committed=read_committed,
            txn_id=convert.txn_id_to_proto(txn_id),
            holds=[
                cpb.GroupOffsetHold(
                    topic=each.topic,
                    partition=each.partition,
                    offset=each.offset,
                    held_from=each.held_from,
                )
                for each in holds
            ],
        )
        response = await self._call(address, lambda s: s.HoldGroupOffsets, request)
        return list(response.error_codes)

    # ------------------------------------------------------------ replicas

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
        """One request per `max_replicate_bytes` of frames, in order: a batch larger
        than a peer takes goes in parts, each made durable before the next is sent
        (a part refused leaves the ones before it held, which a resend finds)."""
        response = None
        for first, part in replicate_parts(first_entry_id, frames, self.max_replicate_bytes):
            request = cpb.ReplicateEntriesRequest(
                topic=topic,
                epoch=epoch,
                ledger_id=ledger_id,
                first_entry_id=first,
                frames=part,
                last_add_confirmed_ledger_id=last_add_confirmed.ledger_id,
                last_add_confirmed_entry_id=last_add_confirmed.entry_id,
            )
            response = await self._call(
                address, lambda s: s.ReplicateEntries, request, timeout_s=timeout_s
            )
        assert response is not None
        return convert.replica_state(response)

    async def fence_replica(self, address: str, topic: str, epoch: int) -> ReplicaState:
        request = cpb.FenceReplicaRequest(topic=topic, epoch=epoch)
        return convert.replica_state(await self._call(address, lambda s: s.FenceReplica, request))

    async def read_replica(
        self,
        address: str,
        topic: str,
        ledger_id: int,
        first_entry_id: int,
        max_entries: int,
        max_bytes: int,
    ) -> list[bytes]:
        request = cpb.ReadReplicaEntriesRequest(
            topic=topic,
            ledger_id=ledger_id,
            first_entry_id=first_entry_id,
            max_entries=max_entries,
            max_bytes=max_bytes,
        )
        response = await self._call(address, lambda s: s.ReadReplicaEntries, request)
        return list(response.frames)

    async def close_replica_ledger(
        self, address: str, topic: str, epoch: int, ledger_id: int, last_entry_id: int
    ) -> ReplicaState:
        request = cpb.CloseReplicaLedgerRequest(
            topic=topic, epoch=epoch, ledger_id=ledger_id, last_entry_id=last_entry_id
        )
        response = await self._call(address, lambda s: s.CloseReplicaLedger, request)
        return convert.replica_state(response)

    async def trim_replica(
        self, address: str, topic: str, epoch: int, below_ledger_id: int
    ) -> ReplicaState:
        request = cpb.TrimReplicaRequest(topic=topic, epoch=epoch, below_ledger_id=below_ledger_id)
        response = await self._call(address, lambda s: s.TrimReplica, request)
        return convert.replica_state(response)

    async def replicate_cursors(
        self, address: str, topic: str, epoch: int, states: dict[str, bytes], deleted: list[str]
    ) -> None:
        request = cpb.ReplicateCursorsRequest(
            topic=topic, epoch=epoch, states=states, deleted=deleted
        )
        await self._call(address, lambda s: s.ReplicateCursors, request)

    async def read_replica_cursors(self, address: str, topic: str) -> dict[str, bytes]:
        request = cpb.ReadReplicaCursorsRequest(topic=topic)
        response = await self._call(address, lambda s: s.ReadReplicaCursors, request)
        return dict(response.states)

    async def replicate_snapshot(
        self,
        address: str,
        topic: str,
        epoch: int,
        copy: SnapshotCopy,
        timeout_s: float | None = None,
    ) -> None:
        """One request: a snapshot is applied whole or not at all, so one larger than
        a peer takes is not sent (the member replays more of the log if it takes the
        topic)."""
        if copy.size > self.max_replicate_bytes:
            raise RpcRefusal(
                "MessageTooBig",
                f"the transaction buffer snapshot of {topic} is {copy.size} bytes, more "
                f"than the {self.max_replicate_bytes} one peer request carries",
            )
        request = cpb.ReplicateSnapshotRequest(
            topic=topic,
            epoch=epoch,
            follows=copy.follows,
            whole=copy.whole,
            puts=copy.puts,
            delete_prefixes=list(copy.delete_prefixes),
        )
        await self._call(address, lambda s: s.ReplicateSnapshot, request, timeout_s=timeout_s)

    # ------------------------------------------------------------ admin

    async def topic_stats(self, owner: BrokerInfo, topic: TopicName) -> dict[str, Any]:
        reply = await self._admin_call(owner, topic, "stats", lambda s: s.GetStats)
        return json.loads(reply.json)

    async def delete_topic(self, owner: BrokerInfo, topic: TopicName) -> None:
        await self._admin_call(owner, topic, "deletion", lambda s: s.DeleteTopic)

    async def unload_topic(self, owner: BrokerInfo, topic: TopicName, to: str | None = None) -> str:
        reply = await self._call(
            owner.grpc_address,
            lambda stub: stub.TransferTopic,
            admin_pb2.TransferTopicRequest(topic=str(topic), broker=to or ""),
            admin_pb2_grpc.AdminStub,
            lambda error: admin_refusal(owner, topic, "unload", error),
            # A hand-over waits for the writes in flight and the cursors, then the record.
            timeout_s=max(self.timeout_s, 2 * HAND_OVER_STEP_TIMEOUT_S + 5),
        )
        return reply.broker

    async def _admin_call(
        self, owner: BrokerInfo, topic: TopicName, what: str, method: Callable[[Any], Any]
    ) -> Any:
        return await self._call(
            owner.grpc_address,
            method,
            admin_pb2.TopicRequest(topic=str(topic)),
            admin_pb2_grpc.AdminStub,
            lambda error: admin_refusal(owner, topic, what, error),
        )


def replicate_parts(
    first_entry_id: int, frames: list[bytes], max_bytes: int
) -> list[tuple[int, list[bytes]]]:
    """`frames` cut into runs of at most `max_bytes` (a larger frame alone), each with
    the entry id it starts at; no frames: one empty run (it still carries the LAC)."""
    parts: list[tuple[int, list[bytes]]] = []
    start, part, size = first_entry_id, [], 0
    for frame in frames:
        if part and size + len(frame) > max_bytes:
            parts.append((start, part))
            start, part, size = start + len(part), [], 0
        part.append(frame)
        size += len(frame)
    parts.append((start, part))
    return parts


def _trailing(error: grpc.aio.AioRpcError, wanted: str) -> str:
    """The value of one trailing metadata key of the peer's answer, "" when absent."""
    for key, value in error.trailing_metadata() or ():
        if key == wanted:
            return value
    return ""


def _error_code(error: grpc.aio.AioRpcError) -> str:
    """The peer's own error code (trailing metadata), "" when it sent none."""
    return _trailing(error, ERROR_METADATA_KEY)


def peer_refusal(address: str, error: grpc.aio.AioRpcError) -> Exception:
    """The peer's refusal as this broker's own error: the engine's for a code the
    engine names, else a refusal with the peer's code (so the table's status for it)."""
    code = _error_code(error)
    if code:
        message = error.details() or code
        if code == "ReplicaGap":
            held = _trailing(error, REPLICA_HELD_METADATA_KEY)
            if held.isdigit():
                return ReplicaGapError(message, int(held))
        kind = ENGINE_ERRORS.get(code)
        return RpcRefusal(code, message) if kind is None else kind(message)
    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return RpcRefusal(
            "BrokerUnavailable",
            f"broker {address} did not answer ({error.code().name}: {error.details()}); "
            "retry once it is back",
        )
    return RpcRefusal(
        "Internal",
        f"broker {address} failed the call ({error.code().name}: {error.details()})",
    )


def admin_refusal(
    owner: BrokerInfo, topic: TopicName, what: str, error: grpc.aio.AioRpcError
) -> Exception:
    """TopicNotFoundError when the owner has no such topic; PeerCallError otherwise."""
    details = error.details() or error.code().name
    if error.code() is grpc.StatusCode.NOT_FOUND:
        return TopicNotFoundError(details)
    code = _error_code(error) or error.code().name
    return PeerCallError(
        f"broker {owner.grpc_address}, which owns {topic}, did not answer its {what}: "
        f"{code}: {details}; retry later"
    )
