"""Received messages: fields read lazily from the entry, and Messages as a sequence."""

from __future__ import annotations

import pytest

from stableline._proto import broker_pb2 as pb
from stableline._types import DeliveredEntry, Messages

TOPIC = "persistent://public/default/t"


def _entry(entry_id: int, messages: list[pb.SingleMessage]) -> DeliveredEntry:
    return DeliveredEntry.of(
        TOPIC,
        pb.EntryDelivery(
            ledger_id=4,
            entry_id=entry_id,
            metadata=pb.EntryMetadata(num_messages=len(messages), publish_time_ms=7),
            payload=pb.MessageBatch(messages=messages).SerializeToString(),
        ),
    )


@pytest.fixture
def messages() -> Messages:
    plain = _entry(1, [pb.SingleMessage(payload=b"p%d" % i) for i in range(4)])
    keyed = _entry(
        2,
        [
            pb.SingleMessage(payload=b"k0", partition_key="a", has_partition_key=True),
            pb.SingleMessage(payload=b"k1", properties={"x": "y"}, event_time_ms=9),
        ],
    )
    return Messages([(plain, range(1, 4)), (keyed, range(2))])


def test_messages_read_as_a_sequence_in_order(messages):
    assert len(messages) == 5 and bool(messages)
    ids = [str(m.message_id()) for m in messages]
    assert ids == ["4:1:1", "4:1:2", "4:1:3", "4:2:0", "4:2:1"]
    assert [m.value() for m in messages] == messages.values() == [b"p1", b"p2", b"p3", b"k0", b"k1"]
    assert messages[0].value() == b"p1" and messages[-1].value() == b"k1"
    assert [m.value() for m in messages[1:3]] == [b"p2", b"p3"]
    with pytest.raises(IndexError):
        messages[5]
    assert messages == list(messages) and Messages() == [] and not Messages()


def test_plain_messages_have_no_key_or_properties_and_others_keep_theirs(messages):
    plain, keyed, with_properties = messages[0], messages[3], messages[4]
    assert plain.partition_key() is None and plain.properties() == {}
    assert plain.event_timestamp() == 0 and plain.publish_timestamp() == 7
    assert keyed.partition_key() == "a" and with_properties.properties() == {"x": "y"}
    assert with_properties.event_timestamp() == 9 and with_properties.topic_name() == TOPIC


def test_a_transaction_state_is_its_name_as_a_str():
    import json

    from stableline._types import TransactionState

    committed = TransactionState("COMMITTED")
    assert committed is TransactionState.COMMITTED
    assert (
        committed == "COMMITTED" and str(committed) == "COMMITTED" and f"{committed}" == "COMMITTED"
    )
    assert {"COMMITTED": 1}[committed] == 1 and json.dumps(committed) == '"COMMITTED"'
    assert [state.value for state in TransactionState] == ["OPEN", "COMMITTED", "ABORTED"]


def test_a_message_id_serializes_to_bytes_and_back():
    from stableline import MessageId

    for message_id in (MessageId(3, 120, 7), MessageId(3, 120), MessageId.earliest):
        data = message_id.serialize()
        assert isinstance(data, bytes)
        assert MessageId.deserialize(data) == message_id
    assert MessageId(3, 120, 7).partition() == -1
    with pytest.raises(ValueError, match="not a serialized message id"):
        MessageId.deserialize(b"\xff\xff\xff")


def test_message_id_parts_read_as_attributes_and_as_pulsar_calls():
    import json
    import pickle

    from stableline import MessageId

    message_id = MessageId(3, 120, 7)
    # pulsar-client's spelling: each part is a call returning the plain int.
    assert message_id.ledger_id() == 3 and type(message_id.ledger_id()) is int
    assert message_id.entry_id() == 120 and type(message_id.entry_id()) is int
    assert message_id.batch_index() == 7 and type(message_id.batch_index()) is int
    assert MessageId(3, 120).batch_index() == -1
    assert message_id.partition() == -1
    # The attribute form keeps reading as the number it always was.
    part = message_id.ledger_id
    assert part == 3 and part + 1 == 4 and part < 4 and isinstance(part, int)
    assert repr(part) == str(part) == f"{part}" == "3" and hash(part) == hash(3)
    assert json.dumps({"ledger": part}) == '{"ledger": 3}'
    assert {3: "three"}[part] == "three" and list(range(part)) == [0, 1, 2]
    assert pb.MessageIdData(ledger_id=part).ledger_id == 3
    assert pickle.loads(pickle.dumps(part)) == 3
    # The id itself holds plain ints: it unpacks, equals and pickles as before.
    assert all(type(number) is int for number in message_id) and message_id == (3, 120, 7)
    assert pickle.loads(pickle.dumps(message_id)) == message_id
    assert str(message_id) == "3:120:7" and MessageId.parse(str(message_id)) == message_id
    assert repr(message_id) == "MessageId(ledger_id=3, entry_id=120, batch_index=7)"


def test_a_partitioned_message_id_keeps_its_partition_through_its_text_forms():
    from stableline import MessageId
    from stableline._types import PartitionedMessageId

    for message_id in (
        PartitionedMessageId(3, 120, 7, 2),
        PartitionedMessageId(3, 120, -1, 0),
        PartitionedMessageId(0, 0, 0, 11),
    ):
        for back in (
            MessageId.deserialize(message_id.serialize()),
            MessageId.parse(str(message_id)),
        ):
            assert type(back) is PartitionedMessageId
            assert back == message_id and back.partition == message_id.partition
    # Pulsar's order for a partition's id: ledger:entry:partition:batch.
    assert str(PartitionedMessageId(3, 120, 7, 2)) == "3:120:2:7"


def test_a_plain_message_id_keeps_its_text_forms_byte_for_byte():
    from stableline import MessageId

    # The forms written before partitions rode along: stored ids must still read.
    assert str(MessageId(3, 120, 7)) == "3:120:7"
    assert MessageId(3, 120, 7).serialize() == b"\x08\x03\x10x\x18\x07"
    assert (
        MessageId(3, 120).serialize()
        == b"\x08\x03\x10x\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
    )
    back = MessageId.deserialize(MessageId(3, 120, 7).serialize())
    assert type(back) is MessageId and back.partition == -1
    assert type(MessageId.parse("3:120:7")) is MessageId


def test_a_message_id_text_with_a_negative_partition_is_refused():
    from stableline import MessageId

    with pytest.raises(ValueError, match="ledger:entry:partition:batch"):
        MessageId.parse("3:120:-1:7")
