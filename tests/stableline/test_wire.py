"""The MessageBatch wire format: the hand-written encoding is protobuf's, byte for
byte, and plain batches are recognised exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stableline._proto import broker_pb2 as pb
from stableline.wire import (
    BatchMessage,
    batch_messages,
    encode_message,
    key_fields,
    keyed_prefix,
    plain_layout,
    plain_prefix,
)

payloads = st.binary(max_size=70_000)


@given(st.lists(payloads, max_size=5))
def test_plain_messages_encode_as_protobuf_does(contents):
    encoded = b"".join(plain_prefix(len(content)) + content for content in contents)
    expected = pb.MessageBatch(messages=[pb.SingleMessage(payload=c) for c in contents])
    assert encoded == expected.SerializeToString()
    assert [m.payload for m in pb.MessageBatch.FromString(encoded).messages] == contents


@given(st.lists(st.tuples(payloads, st.text(max_size=300)), max_size=5))
def test_keyed_messages_encode_as_protobuf_does(messages):
    encoded = b"".join(
        keyed_prefix(len(content), len(key_fields(key))) + content + key_fields(key)
        for content, key in messages
    )
    expected = pb.MessageBatch(
        messages=[
            pb.SingleMessage(payload=content, partition_key=key, has_partition_key=True)
            for content, key in messages
        ]
    )
    assert encoded == expected.SerializeToString()
    assert encoded == b"".join(encode_message(c, None, k, 0) for c, k in messages)


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


def test_batch_messages_reads_back_what_was_written_up_to_the_limit():
    payload = b"".join(
        [
            encode_message(b"first", {"k": "v"}, "key-1", 7),
            plain_prefix(len(b"second")) + b"second",
            encode_message(b"third", {}, None, 0),
        ]
    )
    assert batch_messages(payload) == [
        BatchMessage(b"first", "key-1", {"k": "v"}, 7),
        BatchMessage(b"second", None, {}, 0),
        BatchMessage(b"third", None, {}, 0),
    ]
    assert batch_messages(payload, 1) == [BatchMessage(b"first", "key-1", {"k": "v"}, 7)]
    with pytest.raises(ValueError, match="not a message batch"):
        batch_messages(b"\x01not a batch")
    # A batch damaged further on ends where the damage starts.
    assert batch_messages(payload + b"\x0a\xff") == batch_messages(payload)
