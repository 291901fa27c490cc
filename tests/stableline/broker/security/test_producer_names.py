"""A producer name is held by its connected producer, on a real `serve --secure` broker.

While a producer of a name is connected to a topic, another role opening that name is
refused with ProducerBusy (it could otherwise claim a sequence id far ahead and make
the owner's next sends count as duplicates, never stored). The same role may reopen
it: that is the owner reconnecting before the broker saw its old stream end, and the
old stream is ended. Once the producer is gone, the name is free.
"""

from __future__ import annotations

import queue
import uuid

import grpc
import pytest

from stableline import MessageId, ProducerBusy
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from tests.conftest import wait_until

from .conftest import SecureBroker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def roles(secure_broker: SecureBroker) -> None:
    for role in ("alice", "mallory"):
        secure_broker.grant(role, ["produce", "consume"])


def publishers(broker: SecureBroker, topic: str) -> list[str]:
    status, stats = broker.http("GET", f"/admin/v2/persistent/public/default/{topic}/stats")
    assert status == 200, stats
    return [p["producerName"] for p in stats["publishers"]]


class RawProducer:
    """A Produce stream over its own connection, kept open until closed: what a client
    whose connection broke looks like to a broker that has not noticed yet."""

    def __init__(self, broker: SecureBroker, role: str, topic: str, name: str):
        self.channel = broker.channel()
        self.requests: queue.Queue = queue.Queue()
        stub = broker_pb2_grpc.BrokerStub(self.channel)
        self.responses = stub.Produce(
            iter(self.requests.get, None), timeout=30, metadata=broker.metadata(role)
        )
        self.requests.put(pb.ProduceRequest(open=pb.ProducerOpen(topic=topic, producer_name=name)))

    def send(self, sequence_id: int, payload: bytes) -> None:
        batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=payload)])
        self.requests.put(
            pb.ProduceRequest(
                send=pb.ProducerSend(
                    sequence_id=sequence_id,
                    metadata=pb.EntryMetadata(num_messages=1),
                    payload=batch.SerializeToString(),
                )
            )
        )

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()


def test_another_role_cannot_take_a_connected_producers_name(secure_broker, roles):
    topic, name = unique("billing"), unique("billing-producer")
    with secure_broker.client("alice") as alice, secure_broker.client("mallory") as mallory:
        producer = alice.create_producer(topic, producer_name=name)
        first = producer.send(b"one")
        with pytest.raises(ProducerBusy, match="already connected"):
            mallory.create_producer(topic, producer_name=name)
        # Refused at the open, before any send: a sequence id far ahead is never stored.
        taker = RawProducer(secure_broker, "mallory", topic, name)
        taker.send(10**15, b"takeover")
        with pytest.raises(grpc.RpcError) as refused:
            next(taker.responses)
        taker.close()
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert ("stableline-error", "ProducerBusy") in tuple(refused.value.trailing_metadata())

        # The owner's next sends are stored, none taken for a duplicate.
        second = producer.send(b"two")
        assert (second.ledger_id, second.entry_id) > (first.ledger_id, first.entry_id)
        reader = alice.create_reader(topic, start_message_id=first)
        assert reader.read_next(5000).data() == b"two"
        assert publishers(secure_broker, topic) == [name]


def test_a_producer_name_is_free_once_its_producer_is_gone(secure_broker, roles):
    topic, name = unique("handover"), unique("handover-producer")
    with secure_broker.client("alice") as alice, secure_broker.client("mallory") as mallory:
        alice.create_producer(topic, producer_name=name).close()
        wait_until(lambda: publishers(secure_broker, topic) == [], message="the close to land")
        mallory.create_producer(topic, producer_name=name).send(b"mine now")


def test_the_same_role_reopening_a_connected_name_replaces_the_old_stream(secure_broker, roles):
    topic, name = unique("reconnect"), unique("reconnect-producer")
    stale = RawProducer(secure_broker, "alice", topic, name)
    opened = next(stale.responses)
    assert opened.opened.last_sequence_id == -1
    stale.send(0, b"before the break")
    assert next(stale.responses).receipt.sequence_id == 0
    try:
        with secure_broker.client("alice") as alice:
            # The broker still has the old stream; the same role reopening is let in.
            producer = alice.create_producer(topic, producer_name=name)
            producer.send(b"after the reconnect")
            with pytest.raises(grpc.RpcError) as replaced:
                next(stale.responses)
            assert ("stableline-error", "ProducerBusy") in tuple(replaced.value.trailing_metadata())
            assert "replaced by a newer producer" in replaced.value.details()
            assert publishers(secure_broker, topic) == [name]
            reader = alice.create_reader(topic, start_message_id=MessageId.earliest)
            assert [reader.read_next(5000).data() for _ in range(2)] == [
                b"before the break",
                b"after the reconnect",
            ]
    finally:
        stale.close()


def test_a_named_producer_keeps_sending_across_a_broker_restart(secure_broker, roles):
    topic, name = unique("restart"), unique("restart-producer")
    with secure_broker.client("alice") as alice:
        producer = alice.create_producer(topic, producer_name=name)
        producer.send(b"before")
        secure_broker.process.restart()
        producer.send(b"after")  # the SDK reopens under its name
        assert publishers(secure_broker, topic) == [name]
