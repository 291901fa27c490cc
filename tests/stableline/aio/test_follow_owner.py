"""Streams and calls follow their topic to a new owner: when the broker owning a topic
dies and another takes it over, producers, consumers and calls on the topic look it
up again and go on there, within operation_timeout_seconds.

In-process fake brokers over the client's transport seam (channel_factory), unary
calls and bidi streams alike; requests and answers go through the real serializers.
The brokers share one "replicated log" of what producers sent (by producer name
and sequence id), as the brokers of a cluster share a topic's replicated ledgers:
a new owner answers what the old one already held as a duplicate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import pytest

from stableline import aio
from stableline._errors import ERROR_METADATA_KEY
from stableline._proto import admin_pb2 as admin_pb
from stableline._proto import broker_pb2 as pb
from stableline.error_codes import LEADER_METADATA_KEY

TIMEOUT_S = 1.5
BACKOFF = aio.Backoff(initial_s=0.01, max_s=0.05)


def unavailable() -> grpc.aio.AioRpcError:
    """What a call to a dead broker's address fails with (connection refused)."""
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "refused"
    )


def refusal(code: str, details: str, leader: str = "") -> grpc.aio.AioRpcError:
    """A broker's typed error on the wire: its code in the trailers (and the shard's
    leader, for a transaction's NotOwner)."""
    trailers = [(ERROR_METADATA_KEY, code)] + ([(LEADER_METADATA_KEY, leader)] if leader else [])
    return grpc.aio.AioRpcError(
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*trailers),
        details,
    )


class FakeStream:
    """One bidi call: the client's writes go to the broker's handler, which answers
    with `push`; a killed broker fails the call."""

    def __init__(self, broker: FakeBroker, name: str, serialize, deserialize):
        self.broker = broker
        self.name = name
        self._serialize = serialize
        self._deserialize = deserialize
        self._answers: asyncio.Queue = asyncio.Queue()
        self.cancelled = False

    async def write(self, request) -> None:
        if not self.broker.alive or self.cancelled:
            raise unavailable()
        wire = self._serialize(request)
        self.broker.on_stream(self, type(request).FromString(wire))

    def push(self, answer) -> None:
        self._answers.put_nowait(self._deserialize(answer.SerializeToString()))

    def fail(self, error: grpc.aio.AioRpcError) -> None:
        self._answers.put_nowait(error)

    async def read(self):
        if not self.broker.alive:
            raise unavailable()
        answer = await self._answers.get()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def done_writing(self) -> None:
        pass

    def cancel(self) -> bool:
        self.cancelled = True
        self._answers.put_nowait(grpc.aio.EOF)
        return True

    def done(self) -> bool:
        return self.cancelled or not self.broker.alive

    async def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.OK


@dataclass
class Cluster:
    """The fake brokers by address, who owns the topic, and the shared log."""

    owner: str = "a:6650"
    # The broker leading the transactions' coordinator shard.
    shard_leader: str = "a:6650"
    ended: list[str] = field(default_factory=list)  # where transactions were ended
    # (producer name, sequence id) -> (ledger id, entry id): what the topic holds.
    log: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    brokers: dict[str, FakeBroker] = field(default_factory=dict)
    lookups: list[tuple[str, str]] = field(default_factory=list)  # (asked, named)
    # Lookups name the dead owner this many more times before the new one.
    stale_lookups: int = 0
    stale_owner: str = ""

    def named_owner(self) -> str:
        if self.stale_lookups > 0:
            self.stale_lookups -= 1
            return self.stale_owner
        return self.owner

    def fail_over(self, dead: str, to: str, stale_lookups: int = 0) -> None:
        """`dead` dies and `to` takes its topics over; lookups may name `dead` a while."""
        self.brokers[dead].kill()
        self.owner = to
        self.stale_owner = dead
        self.stale_lookups = stale_lookups


class FakeBroker:
    """A channel answering in process: Lookup, GetLastMessageId, Produce, Subscribe."""

    def __init__(self, address: str, cluster: Cluster, ledger_id: int):
        self.address = address
        self.cluster = cluster
        self.ledger_id = ledger_id
        self.alive = True
        # Whether receipts are sent: a dying owner may hold sends it never answers.
        self.answers_sends = True
        self.refuse_opens: list[str] = []  # error codes the next opens are refused with
        self.streams: list[FakeStream] = []
        self.sends: list[tuple[str, int]] = []  # (producer name, sequence id) received
        self.subscribes: list[pb.SubscribeOpen] = []
        self.deliver: list[pb.EntryDelivery] = []  # given to each new subscription
        self.acks: list[pb.Ack] = []
        self.closed = False

    def kill(self) -> None:
        self.alive = False
        for stream in self.streams:
            stream.fail(unavailable())

    def unary_unary(self, path, request_serializer=None, response_deserializer=None, **_):
        name = path.rsplit("/", 1)[-1]

        async def call(request, timeout=None, metadata=None, **_kwargs):
            if not self.alive:
                raise unavailable()
            request = type(request).FromString(request_serializer(request))
            response = self.unary(name, request)
            return response_deserializer(response.SerializeToString())

        return call

    def stream_stream(self, path, request_serializer=None, response_deserializer=None, **_):
        name = path.rsplit("/", 1)[-1]

        def call(metadata=None, **_kwargs) -> FakeStream:
            stream = FakeStream(self, name, request_serializer, response_deserializer)
            self.streams.append(stream)
            return stream

        return call

    def _no_calls(self, path, *args, **kwargs):
        raise AssertionError(f"the fake broker has no such call ({path})")

    unary_stream = stream_unary = _no_calls

    async def close(self, grace=None) -> None:
        self.closed = True

    def _owns(self) -> bool:
        return self.cluster.owner == self.address

    def unary(self, name: str, request):
        if name == "Lookup":
            named = self.cluster.named_owner()
            self.cluster.lookups.append((self.address, named))
            return pb.LookupResponse(
                topic=request.topic, action=pb.LOOKUP_ACTION_CONNECT, grpc_address=named
            )
        if name == "NewTransaction":
            return pb.NewTransactionResponse(
                txn_id=pb.TxnId(most_bits=0, least_bits=1),
                coordinator_address=self.cluster.shard_leader,
            )
        if name == "EndTransaction":
            if self.address != self.cluster.shard_leader:
                raise refusal(
                    "NotOwner",
                    f"the transaction's shard is led by {self.cluster.shard_leader}",
                    leader=self.cluster.shard_leader,
                )
            self.cluster.ended.append(self.address)
            return pb.EndTransactionResponse(txn_id=request.txn_id, state="COMMITTED")
        if name == "GetPartitionedTopicMetadata":
            return admin_pb.PartitionedTopicMetadata(partitions=0)
        if name == "GetLastMessageId":
            if not self._owns():
                raise refusal("NotOwner", f"{request.topic} is not owned by {self.address}")
            entries = [e for (_l, e) in self.cluster.log.values()]
            return pb.GetLastMessageIdResponse(
                last_confirmed_entry=pb.Position(
                    ledger_id=self.ledger_id, entry_id=max(entries, default=-1)
                )
            )
        raise AssertionError(f"unexpected unary call {name}")

    def _refused(self, stream: FakeStream) -> bool:
        if self.refuse_opens:
            stream.fail(refusal(self.refuse_opens.pop(0), "the topic is moving"))
            return True
        if not self._owns():
            stream.fail(refusal("NotOwner", f"not owned by {self.address}"))
            return True
        return False

    def on_stream(self, stream: FakeStream, request) -> None:
        kind = request.WhichOneof("request")
        if kind == "open":
            if self._refused(stream):
                return
            name = request.open.producer_name or "p-1"
            held = [s for (n, s) in self.cluster.log if n == name]
            stream.push(
                pb.ProduceResponse(
                    opened=pb.ProducerOpened(
                        topic=request.open.topic,
                        producer_name=name,
                        max_message_size=5 * 1024 * 1024,
                        last_sequence_id=max(held, default=-1),
                    )
                )
            )
        elif kind in ("send", "sends"):
            sends = [request.send] if kind == "send" else list(request.sends.sends)
            receipts = [self._append(stream, send) for send in sends]
            if self.answers_sends:
                stream.push(pb.ProduceResponse(receipts=pb.SendReceipts(receipts=receipts)))
        elif kind == "subscribe":
            if self._refused(stream):
                return
            self.subscribes.append(request.subscribe)
            stream.push(
                pb.SubscribeResponse(
                    subscribed=pb.Subscribed(
                        topic=request.subscribe.topic, subscription=request.subscribe.subscription
                    )
                )
            )
        elif kind == "ack":
            self.acks.append(request.ack)
            stream.push(
                pb.SubscribeResponse(done=pb.RequestDone(request_id=request.ack.request_id))
            )
        elif kind == "flow" and self.deliver:
            stream.push(pb.SubscribeResponse(deliveries=pb.Deliveries(entries=self.deliver)))

    def _append(self, stream: FakeStream, send: pb.ProducerSend) -> pb.SendReceipt:
        """The send into the shared log, once: a sequence id held already is a duplicate."""
        name = send.metadata.producer_name
        self.sends.append((name, send.sequence_id))
        key = (name, send.sequence_id)
        held = self.cluster.log.get(key)
        if held is not None:
            return pb.SendReceipt(
                sequence_id=send.sequence_id, ledger_id=held[0], entry_id=held[1], duplicate=True
            )
        position = self.cluster.log[key] = (self.ledger_id, len(self.cluster.log))
        return pb.SendReceipt(
            sequence_id=send.sequence_id, ledger_id=position[0], entry_id=position[1]
        )


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def client_of(cluster: Cluster, service_url: str = "a:6650,b:6650") -> aio.Client:
    def channel_factory(address: str, tls: bool, options: aio.ClientOptions) -> FakeBroker:
        if address not in cluster.brokers:
            ledger_id = 10 * (len(cluster.brokers) + 1)
            cluster.brokers[address] = FakeBroker(address, cluster, ledger_id)
        return cluster.brokers[address]

    options = aio.ClientOptions(TIMEOUT_S, connection_backoff=BACKOFF)
    return aio.Client.with_options(service_url, options, channel_factory)


async def wait_for(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


def entry(entry_id: int, payload: bytes, redelivery_count: int = 0) -> pb.EntryDelivery:
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=payload)])
    return pb.EntryDelivery(
        ledger_id=10,
        entry_id=entry_id,
        metadata=pb.EntryMetadata(type=pb.ENTRY_TYPE_DATA, num_messages=1),
        payload=batch.SerializeToString(),
        redelivery_count=redelivery_count,
    )


async def test_a_producer_whose_owner_dies_resends_its_pending_sends_to_the_new_owner(cluster):
    client = client_of(cluster)
    try:
        producer = await client.create_producer("t", producer_name="p", batching_max_messages=1)
        assert await producer.send(b"first") == aio.MessageId(10, 0, 0)
        a = cluster.brokers["a:6650"]
        # The owner writes (and replicates) three more, then dies before answering.
        a.answers_sends = False
        receipts = [producer.send_nowait(f"m{i}".encode()) for i in range(3)]
        await wait_for(lambda: len(a.sends) == 4)
        cluster.fail_over("a:6650", to="b:6650")

        later = producer.send_nowait(b"after")
        ids = [await receipt for receipt in receipts]
        # The new owner answered the resends as duplicates, with where they were written.
        assert ids == [aio.MessageId(10, i, 0) for i in (1, 2, 3)]
        assert await later == aio.MessageId(20, 4, 0)
        b = cluster.brokers["b:6650"]
        assert b.sends == [("p", 1), ("p", 2), ("p", 3), ("p", 4)]  # the same name and ids
        assert sorted(cluster.log) == [("p", i) for i in range(5)]  # each held once
        assert producer.producer_name == "p"
    finally:
        await client.close()


async def test_a_reopen_refused_while_the_topic_moves_is_retried_until_it_is_served(cluster):
    client = client_of(cluster)
    try:
        producer = await client.create_producer("t", producer_name="p", batching_max_messages=1)
        await producer.send(b"first")
        # Lookups name the dead owner twice more (its session has not lapsed), and the
        # new owner refuses the first open while it recovers the topic.
        client_b = cluster.brokers.setdefault("b:6650", FakeBroker("b:6650", cluster, 20))
        client_b.refuse_opens = ["TopicUnavailable"]
        cluster.fail_over("a:6650", to="b:6650", stale_lookups=2)
        started = time.monotonic()
        assert await producer.send(b"after") == aio.MessageId(20, 1, 0)
        assert time.monotonic() - started < TIMEOUT_S
        assert [named for _asked, named in cluster.lookups] == [
            "a:6650",
            "a:6650",
            "b:6650",
            "b:6650",
        ]
    finally:
        await client.close()


async def test_a_consumer_whose_owner_dies_resubscribes_on_the_new_owner(cluster):
    client = client_of(cluster)
    try:
        a = cluster.brokers.setdefault("a:6650", FakeBroker("a:6650", cluster, 10))
        b = cluster.brokers.setdefault("b:6650", FakeBroker("b:6650", cluster, 20))
        a.deliver = [entry(0, b"m0")]
        consumer = await client.subscribe("t", "sub", consumer_name="c")
        first = await asyncio.wait_for(consumer.receive(), TIMEOUT_S)
        assert first.data() == b"m0"
        # Not acknowledged when the owner dies: the new owner delivers it again.
        b.deliver = [entry(0, b"m0", redelivery_count=1)]
        cluster.fail_over("a:6650", to="b:6650")
        again = await asyncio.wait_for(consumer.receive(), TIMEOUT_S)
        assert (again.data(), again.redelivery_count()) == (b"m0", 1)
        assert [(s.subscription, s.consumer_name) for s in b.subscribes] == [("sub", "c")]
        await consumer.acknowledge(again)
        await wait_for(lambda: len(b.acks) == 1)  # to the new owner
    finally:
        await client.close()


async def test_a_lookup_naming_the_dead_owner_is_retried_until_the_operation_timeout(cluster):
    client = client_of(cluster)
    try:
        producer = await client.create_producer("t", producer_name="p", batching_max_messages=1)
        await producer.send(b"first")
        cluster.brokers.setdefault("b:6650", FakeBroker("b:6650", cluster, 20))
        cluster.fail_over("a:6650", to="a:6650", stale_lookups=0)  # no one takes it over
        started = time.monotonic()
        with pytest.raises(aio.BrokerUnavailable, match="operation_timeout_seconds"):
            await producer.send(b"lost")
        elapsed = time.monotonic() - started
        assert TIMEOUT_S * 0.9 <= elapsed < TIMEOUT_S + 0.5  # the whole budget, no more
        assert len(cluster.lookups) > 2  # looked up again each round of the backoff
        assert {named for _asked, named in cluster.lookups} == {"a:6650"}
    finally:
        await client.close()


async def test_a_call_on_a_dead_known_owner_looks_the_topic_up_again(cluster):
    client = client_of(cluster, "c:6650,b:6650")
    try:
        cluster.brokers.setdefault("a:6650", FakeBroker("a:6650", cluster, 10))
        cluster.brokers.setdefault("c:6650", FakeBroker("c:6650", cluster, 30))
        cluster.brokers.setdefault("b:6650", FakeBroker("b:6650", cluster, 20))
        assert await client.get_last_message_id("t") == aio.MessageId(10, -1, -1)  # on a
        cluster.fail_over("a:6650", to="b:6650", stale_lookups=1)
        started = time.monotonic()
        assert await client.get_last_message_id("t") == aio.MessageId(20, -1, -1)
        assert time.monotonic() - started < TIMEOUT_S
        assert client._owners["persistent://public/default/t"].address == "b:6650"
    finally:
        await client.close()


async def test_an_end_refused_by_a_broker_naming_the_shards_new_leader_goes_there_at_once(
    cluster,
):
    """No backoff between the refusal and the call on the leader it names: the commit
    is answered long before the first backoff would have ended."""

    def channel_factory(address: str, tls: bool, options: aio.ClientOptions) -> FakeBroker:
        if address not in cluster.brokers:
            cluster.brokers[address] = FakeBroker(address, cluster, 10)
        return cluster.brokers[address]

    slow = aio.Backoff(initial_s=60.0, max_s=60.0)
    options = aio.ClientOptions(60.0, connection_backoff=slow)
    client = aio.Client.with_options("a:6650,b:6650", options, channel_factory)
    try:
        txn = await client.new_transaction()
        cluster.shard_leader = "b:6650"  # the shard moved; a still answers, naming b
        await asyncio.wait_for(txn.commit(), TIMEOUT_S)
        assert cluster.ended == ["b:6650"]
    finally:
        await client.close()
