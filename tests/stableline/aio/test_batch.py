"""Producer batches: the hand-written encoding is protobuf's, byte for byte."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId
from stableline.aio._batch import Batch, SendReceipt, encode_message, plain_layout, plain_prefix

payloads = st.binary(max_size=70_000)


@given(st.lists(payloads, max_size=5))
def test_plain_messages_encode_as_protobuf_does(contents):
    encoded = b"".join(plain_prefix(len(content)) + content for content in contents)
    expected = pb.MessageBatch(messages=[pb.SingleMessage(payload=c) for c in contents])
    assert encoded == expected.SerializeToString()
    assert [m.payload for m in pb.MessageBatch.FromString(encoded).messages] == contents


@given(
    payloads,
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.none() | st.text(max_size=8),
    st.integers(min_value=0, max_value=2**62),
)
def test_messages_with_metadata_decode_to_what_was_sent(content, properties, key, event_time):
    decoded = pb.MessageBatch.FromString(encode_message(content, properties, key, event_time))
    (message,) = decoded.messages
    assert message.payload == content
    assert dict(message.properties) == properties
    assert (message.partition_key if message.has_partition_key else None) == key
    assert message.event_time_ms == event_time


def test_a_batch_sends_its_parts_as_one_payload_with_its_count_and_txn():
    loop = asyncio.new_event_loop()
    try:
        batch = Batch((3, 7), loop.create_future())
        for content in (b"a", b"", b"ccc"):
            batch.parts += [plain_prefix(len(content)), content]
            batch.count += 1
        request = batch.to_send(sequence_id=9, producer_name="p").send
    finally:
        loop.close()
    assert len(batch) == 3
    assert request.sequence_id == 9
    assert request.metadata.num_messages == 3
    assert (request.metadata.txn_id.most_bits, request.metadata.txn_id.least_bits) == (3, 7)
    payloads_sent = [m.payload for m in pb.MessageBatch.FromString(request.payload).messages]
    assert payloads_sent == [b"a", b"", b"ccc"]


async def test_receipts_of_one_batch_resolve_to_their_own_batch_index():
    batch_future = asyncio.get_running_loop().create_future()
    receipts = [SendReceipt(batch_future, index) for index in range(3)]
    assert not receipts[0].done()
    batch_future.set_result((4, 11))
    assert [await receipt for receipt in receipts] == [MessageId(4, 11, i) for i in range(3)]
    assert receipts[2].result() == MessageId(4, 11, 2)


_single_messages = st.builds(
    pb.SingleMessage,
    payload=st.binary(max_size=300),
    partition_key=st.sampled_from(["", "k"]),
    event_time_ms=st.sampled_from([0, 5]),
    properties=st.sampled_from([{}, {"a": "b"}]),
)


@given(st.lists(_single_messages, min_size=1, max_size=40), st.integers(0, 300))
def test_plain_layout_accepts_exactly_the_batches_of_one_plain_length(messages, length):
    if length % 3 == 0:  # often: a batch that is plain throughout
        messages = [
            pb.SingleMessage(payload=bytes([i % 256]) * length) for i in range(len(messages))
        ]
    payload = pb.MessageBatch(messages=messages).SerializeToString()
    plain = (
        all(not m.partition_key and not m.event_time_ms and not m.properties for m in messages)
        and len({len(m.payload) for m in messages}) == 1
    )
    layout = plain_layout(payload)
    assert (layout is not None) == plain
    if layout is not None:
        prefix_length, stride = layout
        sliced = [payload[i + prefix_length : i + stride] for i in range(0, len(payload), stride)]
        assert sliced == [m.payload for m in messages]
