"""GrpcPeerClient: the cluster's PeerClient over gRPC.

The conversions round-trip (a broker value, its protobuf message, the same value
back), and a call through a real gRPC server reaches the peer as the values it was
made with; a refusal comes back as cluster/peers.py promises.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from managed_ledger import Position, ReplicaGapError, ReplicaState, SnapshotCopy, TxnId
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2_grpc, cluster_pb2_grpc
from stableline._proto import broker_pb2 as pb
from stableline._proto import cluster_pb2 as cpb
from stableline.broker.cluster.peer_admin import PeerCallError
from stableline.broker.cluster.peers import PeerClient, PeerTransaction, PeerTransactionState
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import RpcRefusal, abort
from stableline.broker.grpc.peer_client import ENGINE_ERRORS, GrpcPeerClient, replicate_parts
from stableline.broker.topics.registry import TopicNotFoundError
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName
from txnbuffer import TransactionEndedError, TxnAck, TxnMetadata, TxnState

TXN = TxnId(3, 41)
MESSAGES = [(7, 0, -1), (7, 1, 2), (2**40, 2**33, 0)]

# ------------------------------------------------------------ conversions


@pytest.mark.parametrize("caller", [None, "", "alice"])
def test_the_caller_round_trips(caller):
    assert convert.checked_as(convert.on_behalf_of(caller)) == caller


def test_acked_messages_round_trip():
    message = cpb.EndTransactionAcksRequest(messages=convert.acked_messages_to_proto(MESSAGES))
    again = cpb.EndTransactionAcksRequest.FromString(message.SerializeToString())
    assert convert.acked_messages(again.messages) == MESSAGES


@pytest.mark.parametrize("state", list(TxnState))
def test_an_opened_transaction_round_trips(state):
    message = convert.new_transaction_response(TXN, state)
    assert convert.peer_transaction(message) == PeerTransaction(TXN, state)


@pytest.mark.parametrize("state", list(TxnState))
def test_a_transaction_state_round_trips(state):
    meta = TxnMetadata(TXN, state, timeout_ms=1000, opened_ms=5)
    message = convert.transaction_to_proto(meta)
    message.coordinator_low_watermark = 17
    assert convert.peer_transaction_state(message) == PeerTransactionState(state, 17)


def test_the_end_action_says_commit_or_abort():
    assert convert.txn_action(True) == pb.TXN_ACTION_COMMIT
    assert convert.txn_action(False) == pb.TXN_ACTION_ABORT


def test_the_grpc_client_has_every_method_of_the_protocol_with_its_signature():
    wanted = {
        name: member
        for name, member in vars(PeerClient).items()
        if inspect.iscoroutinefunction(member)
    }
    assert wanted, "PeerClient declares its calls"
    for name, member in wanted.items():
        implemented = getattr(GrpcPeerClient, name)
        assert inspect.iscoroutinefunction(implemented), name
        assert inspect.signature(implemented) == inspect.signature(member), name


# ------------------------------------------------------------ through a server


class FakePeer(cluster_pb2_grpc.PeerServicer):
    """Records each request as the values the real PeerService reads from it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.refuse: BaseException | None = None

    async def _answer(self, context, name: str, values: Any, response: Any) -> Any:
        self.seen.append((name, values))
        if self.refuse is not None:
            await abort(context, self.refuse)
        return response

    async def OpenTransaction(self, request, context):
        values = (
            request.coordinator_shard,
            request.timeout_ms,
            request.name,
            request.owner,
            request.client,
        )
        response = convert.new_transaction_response(
            TxnId(request.coordinator_shard, 9), TxnState.OPEN
        )
        return await self._answer(context, "open", values, response)

    async def AddTopicToTransaction(self, request, context):
        values = (convert.txn_id(request.txn_id), request.topic, convert.checked_as(request.caller))
        return await self._answer(context, "add_topic", values, cpb.AddTopicToTransactionResponse())

    async def AddAckToTransaction(self, request, context):
        values = (
            convert.txn_id(request.txn_id),
            request.topic,
            request.subscription,
            convert.acked_messages(request.messages),
            convert.checked_as(request.caller),
            request.check_only,
            request.check_count,
        )
        return await self._answer(context, "add_ack", values, cpb.AddAckToTransactionResponse())

    async def GetTransactionState(self, request, context):
        txn_id = convert.txn_id(request.txn_id)
        response = convert.transaction_to_proto(TxnMetadata(txn_id, TxnState.COMMITTING, 1000, 5))
        response.coordinator_low_watermark = 12
        return await self._answer(context, "state", txn_id, response)

    async def EndTransactionOnTopic(self, request, context):
        values = (
            request.topic,
            convert.txn_id(request.txn_id),
            request.commit,
            request.low_watermark,
        )
        return await self._answer(
            context, "end_on_topic", values, cpb.EndTransactionOnTopicResponse()
        )

    async def EndTransactionAcks(self, request, context):
        values = (
            request.topic,
            request.subscription,
            convert.txn_id(request.txn_id),
            request.commit,
            convert.acked_messages(request.messages),
        )
        return await self._answer(context, "end_acks", values, cpb.EndTransactionAcksResponse())

    async def ReplicateEntries(self, request, context):
        values = (
            request.topic,
            request.epoch,
            request.ledger_id,
            request.first_entry_id,
            list(request.frames),
            Position(request.last_add_confirmed_ledger_id, request.last_add_confirmed_entry_id),
        )
        response = convert.replica_state_to_proto(ReplicaState(request.epoch, 4, 3, False))
        return await self._answer(context, "replicate", values, response)

    async def FenceReplica(self, request, context):
        response = convert.replica_state_to_proto(ReplicaState(request.epoch, -1, 0, False))
        return await self._answer(context, "fence", (request.topic, request.epoch), response)

    async def ReadReplicaEntries(self, request, context):
        values = (
            request.topic,
            request.ledger_id,
            request.first_entry_id,
            request.max_entries,
            request.max_bytes,
        )
        response = cpb.ReadReplicaEntriesResponse(frames=[b"one", b"two"])
        return await self._answer(context, "read_replica", values, response)

    async def CloseReplicaLedger(self, request, context):
        values = (request.topic, request.epoch, request.ledger_id, request.last_entry_id)
        response = convert.replica_state_to_proto(ReplicaState(request.epoch, 4, 2, True))
        return await self._answer(context, "close_replica", values, response)

    async def ReplicateSnapshot(self, request, context):
        values = (
            request.topic,
            request.epoch,
            SnapshotCopy(
                request.follows, request.whole, dict(request.puts), tuple(request.delete_prefixes)
            ),
        )
        return await self._answer(
            context, "replicate_snapshot", values, cpb.ReplicateSnapshotResponse()
        )


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, peer: FakePeer):
        self.peer = peer

    async def EndTransaction(self, request, context):
        values = (convert.txn_id(request.txn_id), request.action == pb.TXN_ACTION_COMMIT)
        response = pb.EndTransactionResponse(txn_id=request.txn_id, state="COMMITTED")
        return await self.peer._answer(context, "end_transaction", values, response)


class FakeAdmin(admin_pb2_grpc.AdminServicer):
    def __init__(self, peer: FakePeer):
        self.peer = peer

    async def GetStats(self, request, context):
        response = admin_pb2.StatsResponse(json='{"msgInCounter": 3}')
        return await self.peer._answer(context, "stats", request.topic, response)

    async def DeleteTopic(self, request, context):
        response = admin_pb2.DeleteTopicResponse(topic=request.topic)
        return await self.peer._answer(context, "delete", request.topic, response)


@pytest.fixture
async def peer() -> AsyncIterator[tuple[FakePeer, GrpcPeerClient, str]]:
    fake = FakePeer()
    server = grpc.aio.server()
    cluster_pb2_grpc.add_PeerServicer_to_server(fake, server)
    broker_pb2_grpc.add_BrokerServicer_to_server(FakeBroker(fake), server)
    admin_pb2_grpc.add_AdminServicer_to_server(FakeAdmin(fake), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = GrpcPeerClient()
    try:
        yield fake, client, f"127.0.0.1:{port}"
    finally:
        await client.close()
        await server.stop(None)


def _owner(address: str) -> BrokerInfo:
    return BrokerInfo(
        broker_id=address,
        grpc_address=address,
        http_url="http://127.0.0.1:1",
        version="test",
        started_ms=0,
        hostname="peer",
        pid=1,
        instance="run-1",
    )


async def test_each_call_reaches_the_peer_as_the_values_it_was_made_with(peer):
    fake, client, address = peer
    ack = TxnAck("persistent://t/n/a", "sub", MESSAGES)
    opened = await client.open_transaction(address, 3, 5000, "named", "alice", "10.0.0.1")
    assert opened == PeerTransaction(TxnId(3, 9), TxnState.OPEN)
    await client.add_topic(address, TXN, "persistent://t/n/a", "alice")
    await client.add_topic(address, TXN, "persistent://t/n/b", None)
    await client.check_ack(address, TXN, "bob", 4)
    await client.add_ack(address, TXN, ack, None)
    assert await client.transaction_state(address, TXN) == PeerTransactionState(
        TxnState.COMMITTING, 12
    )
    await client.end_on_topic(address, "persistent://t/n/a", TXN, True, 11)
    await client.end_acks(address, ack, TXN, False)
    assert await client.end_transaction(address, TXN, True) is TxnState.COMMITTED
    topic = TopicName.parse("persistent://t/n/a-partition-0")
    assert await client.topic_stats(_owner(address), topic) == {"msgInCounter": 3}
    await client.delete_topic(_owner(address), topic)
    assert fake.seen == [
        ("open", (3, 5000, "named", "alice", "10.0.0.1")),
        ("add_topic", (TXN, "persistent://t/n/a", "alice")),
        ("add_topic", (TXN, "persistent://t/n/b", None)),
        ("add_ack", (TXN, "", "", [], "bob", True, 4)),
        ("add_ack", (TXN, ack.topic, "sub", MESSAGES, None, False, 0)),
        ("state", TXN),
        ("end_on_topic", ("persistent://t/n/a", TXN, True, 11)),
        ("end_acks", (ack.topic, "sub", TXN, False, MESSAGES)),
        ("end_transaction", (TXN, True)),
        ("stats", str(topic)),
        ("delete", str(topic)),
    ]


@pytest.mark.parametrize("code", sorted(ENGINE_ERRORS))
async def test_a_refusal_the_engine_names_is_the_engines_error(peer, code):
    fake, client, address = peer
    kind = ENGINE_ERRORS[code]
    fake.refuse = kind(f"refused with {code}")
    with pytest.raises(kind, match=f"refused with {code}"):
        await client.add_topic(address, TXN, "persistent://t/n/a", None)
    with pytest.raises(kind):
        await client.end_transaction(address, TXN, False)


async def test_any_other_refusal_keeps_the_peers_status_and_code(peer):
    fake, client, address = peer
    fake.refuse = TopicNotFoundError("no such topic there")
    with pytest.raises(RpcRefusal) as raised:
        await client.end_on_topic(address, "persistent://t/n/a", TXN, True, 0)
    assert (raised.value.status, raised.value.code) == (grpc.StatusCode.NOT_FOUND, "TopicNotFound")
    assert str(raised.value) == "no such topic there"


async def test_a_peer_that_does_not_answer_is_unavailable_naming_it():
    client = GrpcPeerClient()
    client.timeout_s = 0.5
    try:
        with pytest.raises(RpcRefusal) as raised:
            await client.transaction_state("127.0.0.1:1", TXN)
    finally:
        await client.close()
    assert raised.value.status is grpc.StatusCode.UNAVAILABLE
    assert raised.value.code == "BrokerUnavailable"
    assert "127.0.0.1:1" in str(raised.value)


async def test_an_admin_refusal_is_topic_not_found_or_retry_later(peer):
    fake, client, address = peer
    topic = TopicName.parse("persistent://t/n/a-partition-1")
    fake.refuse = TopicNotFoundError("gone")
    with pytest.raises(TopicNotFoundError, match="gone"):
        await client.topic_stats(_owner(address), topic)
    fake.refuse = TransactionEndedError("not now")
    with pytest.raises(PeerCallError, match=f"{address}, which owns {topic}.*TransactionEnded"):
        await client.delete_topic(_owner(address), topic)


@pytest.mark.parametrize(
    "state", [ReplicaState(-1, -1, 0, False), ReplicaState(2**40, 7, 12, True)]
)
def test_a_replica_state_round_trips(state):
    message = convert.replica_state_to_proto(state)
    again = cpb.ReplicaState.FromString(message.SerializeToString())
    assert convert.replica_state(again) == state


async def test_each_replica_call_reaches_the_peer_as_the_values_it_was_made_with(peer):
    fake, client, address = peer
    topic = "persistent://t/n/a"
    state = await client.replicate(address, topic, 9, 4, 1, [b"f1", b"f2"], Position(4, 0), 2.5)
    assert state == ReplicaState(9, 4, 3, False)
    assert await client.fence_replica(address, topic, 10) == ReplicaState(10, -1, 0, False)
    assert await client.read_replica(address, topic, 4, 1, 100, 2**33) == [b"one", b"two"]
    assert await client.close_replica_ledger(address, topic, 10, 4, 1) == ReplicaState(
        10, 4, 2, True
    )
    assert fake.seen == [
        ("replicate", (topic, 9, 4, 1, [b"f1", b"f2"], Position(4, 0))),
        ("fence", (topic, 10)),
        ("read_replica", (topic, 4, 1, 100, 2**33)),
        ("close_replica", (topic, 10, 4, 1)),
    ]


async def test_a_snapshot_reaches_the_peer_as_it_was_sent_and_one_too_large_is_not_sent(peer):
    fake, client, address = peer
    topic = "persistent://t/n/a"
    change = SnapshotCopy(b"digest", False, {"meta": b"m", "a\x00k": b"v"}, ("a\x00old",))
    whole = SnapshotCopy(b"", True, {"meta": b"m2"})
    await client.replicate_snapshot(address, topic, 7, change, timeout_s=2.0)
    await client.replicate_snapshot(address, topic, 7, whole)
    assert fake.seen == [
        ("replicate_snapshot", (topic, 7, change)),
        ("replicate_snapshot", (topic, 7, whole)),
    ]
    client.max_replicate_bytes = 5  # the whole is 6 bytes of keys and values
    with pytest.raises(RpcRefusal, match="more than the 5") as refused:
        await client.replicate_snapshot(address, topic, 7, whole)
    assert refused.value.code == "MessageTooBig"
    assert len(fake.seen) == 2


async def test_a_replica_gap_comes_back_with_the_count_the_replica_holds(peer):
    fake, client, address = peer
    fake.refuse = ReplicaGapError("ledger 4 holds 7 entries here", 7)
    with pytest.raises(ReplicaGapError, match="holds 7 entries") as refused:
        await client.replicate(address, "persistent://t/n/a", 1, 4, 9, [b"f"], Position(4, 6))
    assert refused.value.held == 7
    with pytest.raises(ReplicaGapError) as refused:
        await client.close_replica_ledger(address, "persistent://t/n/a", 1, 4, 20)
    assert refused.value.held == 7


def test_a_replicated_batch_is_cut_into_parts_a_peer_takes():
    frames = [b"a" * 4, b"b" * 4, b"c" * 9, b"d" * 2, b"e" * 2]
    assert replicate_parts(7, frames, 8) == [
        (7, [b"a" * 4, b"b" * 4]),
        (9, [b"c" * 9]),  # larger than a part: alone
        (10, [b"d" * 2, b"e" * 2]),
    ]
    assert replicate_parts(3, [], 8) == [(3, [])]


async def test_a_batch_larger_than_a_part_reaches_the_peer_in_order(peer):
    fake, client, address = peer
    client.max_replicate_bytes = 4
    await client.replicate(address, "persistent://t/n/a", 1, 0, 5, [b"aaa", b"bbb"], Position(0, 4))
    assert [(values[3], values[4]) for _, values in fake.seen] == [(5, [b"aaa"]), (6, [b"bbb"])]
