"""Requests whose bytes do not parse as their message: INVALID_ARGUMENT with a message,
no traceback in the broker's log, and the broker goes on serving (found by fuzzing)."""

from __future__ import annotations

import grpc
import pytest

import stableline
from stableline import MessageId
from stableline._proto import broker_pb2 as pb

CORRUPT = [
    pytest.param(b"\xff\xff\xff", id="corrupt-wire-format"),
    pytest.param(b"\x0a\x05ab", id="length-past-the-end"),
    pytest.param(b"\x08" + b"\xff" * 11, id="varint-too-long"),
    pytest.param(b"\x0a\x02\xc3\x28", id="bad-utf8-in-a-string"),
]


KEPT = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"kept")]).SerializeToString()


def _raw(channel: grpc.Channel, path: str, streaming: bool):
    make = channel.stream_stream if streaming else channel.unary_unary
    return make(path, request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw)


@pytest.mark.parametrize("raw", CORRUPT)
@pytest.mark.parametrize("path", ["/stableline.v1.Broker/Fetch", "/stableline.v1.Admin/GetStats"])
def test_unparsable_unary_request_is_invalid_argument(broker, client, raw, path):
    with (
        grpc.insecure_channel(broker.service_url) as channel,
        pytest.raises(grpc.RpcError) as raised,
    ):
        _raw(channel, path, streaming=False)(raw, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in raised.value.details()
    assert ("stableline-error", "InvalidArgument") in raised.value.trailing_metadata()
    assert "Traceback" not in broker.log()
    assert client.create_producer("after-bad-bytes").send(b"still serving").entry_id == 0


def test_unparsable_message_in_a_produce_stream_ends_it_after_what_came_before(broker, client):
    valid = [
        pb.ProduceRequest(open=pb.ProducerOpen(topic="malformed")).SerializeToString(),
        pb.ProduceRequest(
            send=pb.ProducerSend(
                sequence_id=1, metadata=pb.EntryMetadata(num_messages=1), payload=KEPT
            )
        ).SerializeToString(),
    ]
    responses = []
    with grpc.insecure_channel(broker.service_url) as channel:
        call = _raw(channel, "/stableline.v1.Broker/Produce", streaming=True)
        with pytest.raises(grpc.RpcError) as raised:
            for response in call(iter([*valid, b"\xff\xff\xff"]), timeout=10):
                responses.append(pb.ProduceResponse.FromString(response))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not parse" in raised.value.details()
    # The send before the bad message was written and acknowledged.
    assert [r.WhichOneof("response") for r in responses] == ["opened", "receipt"]
    reader = client.create_reader("malformed", MessageId.earliest)
    assert reader.read_next(5000).data() == b"kept"
    assert "Traceback" not in broker.log()
    with pytest.raises(stableline.InvalidTopicName):
        client.create_producer("")  # and ordinary refusals still work as before
