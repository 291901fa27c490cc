"""Bad input gets a clear error, loses nothing, and leaves the broker up."""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.request

import grpc
import pytest

import stableline
from stableline import ConsumerType, InitialPosition, MessageId
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc


def _still_serving(broker, client) -> None:
    with urllib.request.urlopen(
        broker.http_url + "/admin/v2/brokers/health", timeout=5
    ) as response:
        assert response.status == 200
    producer = client.create_producer("alive-check")
    message_id = producer.send(b"still here")
    reader = client.create_reader("alive-check", MessageId.earliest)
    found = [reader.read_next(5000) for _ in range(message_id.entry_id + 1)]
    assert found[-1].data() == b"still here"


def _stub(broker) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(broker.service_url)
    return channel, broker_pb2_grpc.BrokerStub(channel)


@pytest.mark.parametrize(
    "name", ["", "a/b", "persistent://t/n", "http://x/y/z", "bad name", "x" * 300]
)
def test_invalid_topic_name_is_refused_with_a_typed_error(client, broker, name):
    with pytest.raises(stableline.InvalidTopicName):
        client.create_producer(name)
    with pytest.raises(stableline.InvalidTopicName):
        client.subscribe(name, "sub")
    _still_serving(broker, client)


def test_message_over_the_max_size_is_refused_and_nothing_is_written(client, broker):
    producer = client.create_producer("big")
    producer.send(b"small")
    with pytest.raises(stableline.MessageTooBig, match="max message size"):
        producer.send(b"x" * (5 * 1024 * 1024 + 1))
    # The broker checks too, for clients that do not.
    channel, stub = _stub(broker)
    requests = iter(
        [
            pb.ProduceRequest(open=pb.ProducerOpen(topic="big")),
            pb.ProduceRequest(
                send=pb.ProducerSend(
                    sequence_id=7,
                    metadata=pb.EntryMetadata(num_messages=1),
                    payload=b"y" * (5 * 1024 * 1024 + 10),
                )
            ),
        ]
    )
    responses = list(stub.Produce(requests))
    assert responses[-1].error.code == "MessageTooBig"
    assert responses[-1].error.sequence_id == 7
    channel.close()
    assert client.get_last_message_id("big").entry_id == 0
    _still_serving(broker, client)


def test_ack_of_a_message_that_does_not_exist_raises_and_keeps_the_backlog(client, broker):
    producer = client.create_producer("bad-ack")
    producer.send(b"m0")
    # Without grouping, every acknowledge waits for the broker's answer and raises.
    consumer = client.subscribe(
        "bad-ack", "sub", initial_position=InitialPosition.Earliest, ack_grouping_time_ms=0
    )
    message = consumer.receive(5000)
    with pytest.raises(stableline.InvalidMessageId, match="does not exist"):
        consumer.acknowledge(MessageId(12345, 0, 0))
    with pytest.raises(stableline.InvalidMessageId, match="holds 1 message"):
        consumer.acknowledge(
            MessageId(message.message_id().ledger_id, message.message_id().entry_id, 5)
        )
    with pytest.raises(stableline.InvalidMessageId):
        consumer.acknowledge([message, MessageId(12345, 0, 0)])  # all or nothing
    stats = json.load(
        urllib.request.urlopen(
            broker.http_url + "/admin/v2/persistent/public/default/bad-ack/stats", timeout=5
        )
    )
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 1
    consumer.acknowledge(message)
    _still_serving(broker, client)


def test_cumulative_ack_on_shared_subscription_is_refused(client):
    producer = client.create_producer("shared-cumulative")
    producer.send(b"m0")
    consumer = client.subscribe(
        "shared-cumulative",
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=InitialPosition.Earliest,
    )
    message = consumer.receive(5000)
    with pytest.raises(stableline.InvalidMessageId, match="cumulative"):
        consumer.acknowledge_cumulative(message)


def test_second_consumer_on_an_exclusive_subscription_is_refused(client, broker):
    first = client.subscribe("exclusive", "sub")
    with pytest.raises(stableline.SubscriptionBusy, match="already has a consumer"):
        client.subscribe("exclusive", "sub")
    with pytest.raises(stableline.SubscriptionBusy):
        client.subscribe("exclusive", "sub", consumer_type=ConsumerType.Shared)
    first.close()
    client.subscribe("exclusive", "sub").close()
    _still_serving(broker, client)


def test_stream_that_does_not_start_with_subscribe_is_refused(broker, client):
    channel, stub = _stub(broker)
    requests = iter(
        [pb.SubscribeRequest(ack=pb.Ack(request_id=1, message_ids=[pb.MessageIdData()]))]
    )
    with pytest.raises(grpc.RpcError) as raised:
        list(stub.Subscribe(requests))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must be 'subscribe'" in raised.value.details()
    requests = iter([pb.ProduceRequest(send=pb.ProducerSend(sequence_id=1))])
    with pytest.raises(grpc.RpcError) as raised:
        list(stub.Produce(requests))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    channel.close()
    _still_serving(broker, client)


def test_unknown_enum_values_are_refused(broker, client):
    channel, stub = _stub(broker)
    requests = iter(
        [
            pb.SubscribeRequest(
                subscribe=pb.SubscribeOpen(topic="enums", subscription="s", isolation_level=7)
            )
        ]
    )
    with pytest.raises(grpc.RpcError) as raised:
        list(stub.Subscribe(requests))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "isolation level" in raised.value.details()
    with pytest.raises(grpc.RpcError) as raised:
        stub.Fetch(pb.FetchRequest(topic="never-created"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    channel.close()
    _still_serving(broker, client)


def test_client_that_disconnects_mid_stream_loses_nothing_acknowledged(broker, client):
    channel, stub = _stub(broker)
    call = stub.Produce(
        iter(
            [pb.ProduceRequest(open=pb.ProducerOpen(topic="disconnect"))]
            + [
                pb.ProduceRequest(
                    send=pb.ProducerSend(
                        sequence_id=i,
                        metadata=pb.EntryMetadata(num_messages=1),
                        payload=pb.MessageBatch(
                            messages=[pb.SingleMessage(payload=f"m{i}".encode())]
                        ).SerializeToString(),
                    )
                )
                for i in range(50)
            ]
        )
    )
    acknowledged = []
    for response in call:
        if response.HasField("receipt"):
            acknowledged.append(response.receipt.sequence_id)
            if len(acknowledged) == 20:
                call.cancel()
                break
    channel.close()
    consumer = client.subscribe(
        "disconnect",
        "sub",
        consumer_type=ConsumerType.Exclusive,
        initial_position=InitialPosition.Earliest,
    )
    consumer_gone = client.subscribe(
        "disconnect", "other", initial_position=InitialPosition.Earliest
    )
    consumer_gone.receive(5000)  # a consumer that leaves with a message unacknowledged
    consumer_gone.close()
    received = []
    while True:
        try:
            received.append(consumer.receive(timeout_millis=500).data())
        except stableline.Timeout:
            break
    assert [f"m{i}".encode() for i in acknowledged] == received[: len(acknowledged)]
    _still_serving(broker, client)


@pytest.mark.parametrize("port_kind", ["grpc", "http"])
def test_garbage_bytes_on_the_ports_leave_the_broker_up(broker, client, port_kind):
    port = broker.grpc_port if port_kind == "grpc" else broker.http_port
    for garbage in (
        b"\x00" * 64,
        b"GET / HTTP/9.9\r\n\r\n",
        bytes(range(256)) * 8,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(garbage)
            sock.settimeout(2)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                sock.recv(1024)
    _still_serving(broker, client)


def test_bad_http_requests_get_json_errors(broker):
    import urllib.error

    for path, status in (
        ("/admin/v2/persistent/public/default/missing/stats", 404),
        ("/admin/v2/persistent/public/default/bad%20name/stats", 400),
        ("/no/such/path", 404),
    ):
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(broker.http_url + path, timeout=5)
        assert raised.value.code == status


def _produce_raw(broker, topic: str, sends: list[tuple[int, bytes]]) -> list[pb.ProduceResponse]:
    """One Produce stream sending (num_messages, payload) pairs; its responses after
    `opened`, one per send."""
    channel, stub = _stub(broker)
    requests = [pb.ProduceRequest(open=pb.ProducerOpen(topic=topic))] + [
        pb.ProduceRequest(
            send=pb.ProducerSend(
                sequence_id=i + 1, metadata=pb.EntryMetadata(num_messages=count), payload=payload
            )
        )
        for i, (count, payload) in enumerate(sends)
    ]
    with channel:
        responses = list(stub.Produce(iter(requests), timeout=30))
    assert responses[0].HasField("opened")
    return responses[1:]


def _batch(*payloads: bytes) -> bytes:
    return pb.MessageBatch(
        messages=[pb.SingleMessage(payload=p) for p in payloads]
    ).SerializeToString()


@pytest.mark.parametrize(
    "claimed, payload",
    [
        (2**31 - 1, _batch(b"one")),
        (2, _batch(b"one")),
        (1, _batch(b"one", b"two")),
        (1, b""),
        (1, b"raw bytes, not a batch"),
    ],
    ids=["huge-claim", "more-claimed", "fewer-claimed", "empty-payload", "not-a-batch"],
)
def test_a_claimed_message_count_unlike_the_batch_is_invalid_and_writes_nothing(
    client, broker, claimed, payload
):
    topic = f"claimed-{claimed}-{len(payload)}"
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    (refused, kept) = _produce_raw(broker, topic, [(claimed, payload), (2, _batch(b"a", b"b"))])
    assert refused.HasField("error") and refused.error.code == "InvalidArgument"
    assert "num_messages" in refused.error.message
    assert kept.HasField("receipt") and kept.receipt.entry_id == 0  # nothing before it
    # The subscription's permits were not drained: the next messages arrive.
    assert [consumer.receive(timeout_millis=5000).data() for _ in range(2)] == [b"a", b"b"]
    _still_serving(broker, client)
