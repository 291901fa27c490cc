"""ProduceSession: one Produce stream after its open. Every send is answered (a
receipt, or an error naming why) in the stream's order, a frame with one receipts
message, and a fenced write ends the stream unanswered."""

from __future__ import annotations

import asyncio

import pytest

from managed_ledger import LocalStore
from stableline._proto import broker_pb2 as pb
from stableline.broker.config import load_config
from stableline.broker.grpc.produce_session import ProduceSession
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Publisher
from stableline.broker.topics.write_gate import BrokerFencedError, WriteGate
from stableline.topic_name import TopicName
from stableline.wire import encode_message

NAME = TopicName.parse("persistent://public/default/session")
MAX_MESSAGE_SIZE = 4096


class NoTransactions:
    async def add_topic(self, txn_id, topic, caller) -> None:
        raise AssertionError("no send here is transactional")


@pytest.fixture
async def gate():
    return WriteGate()


@pytest.fixture
async def topic(tmp_path, gate):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    registry = TopicRegistry(config, store, write_gate=gate)
    made = await registry.get(NAME)
    await made.wait_recovered()
    yield registry, made
    await registry.close()
    store.close()


def _batch(*contents: bytes) -> bytes:
    return b"".join(encode_message(content, None, None, 0) for content in contents)


def _send(sequence_id: int, payload: bytes, num_messages: int) -> pb.ProducerSend:
    return pb.ProducerSend(
        sequence_id=sequence_id,
        metadata=pb.EntryMetadata(num_messages=num_messages),
        payload=payload,
    )


async def _requests(*requests: pb.ProduceRequest):
    for request in requests:
        yield request


async def _answers(topic, requests) -> list:
    registry, made = topic
    session = ProduceSession(
        made,
        Publisher("p", 10),
        False,
        registry,
        NoTransactions(),
        MAX_MESSAGE_SIZE,
        10,
        None,
        asyncio.Queue(),
    )
    session.start(_requests(*requests))
    answers = []
    try:
        while (answer := await asyncio.wait_for(session.answer(), 10)) is not None:
            answers.append(answer)
            if isinstance(answer, BaseException):
                break
    finally:
        session.close()
    return answers


async def test_each_send_is_answered_and_a_bad_one_does_not_end_the_stream(topic):
    answers = await _answers(
        topic,
        [
            pb.ProduceRequest(send=_send(1, _batch(b"a"), 1)),
            pb.ProduceRequest(send=_send(2, _batch(b"b", b"c"), 5)),  # claims 5 of 2
            pb.ProduceRequest(send=_send(3, b"x" * (MAX_MESSAGE_SIZE + 1), 1)),
            pb.ProduceRequest(send=_send(4, _batch(b"d"), 1)),
        ],
    )
    by_sequence = {
        (a.receipt.sequence_id if a.HasField("receipt") else a.error.sequence_id): a
        for a in answers
    }
    assert sorted(by_sequence) == [1, 2, 3, 4]
    assert by_sequence[1].HasField("receipt") and by_sequence[4].HasField("receipt")
    assert by_sequence[2].error.code == "InvalidArgument"
    assert "is a MessageBatch of 2 message(s)" in by_sequence[2].error.message
    assert "exceeds max_message_size" in by_sequence[3].error.message
    _registry, made = topic  # the refused sends wrote nothing
    written = made.ledger.read(made.ledger.first_position(), 10)
    assert [entry.payload for entry in written] == [_batch(b"a"), _batch(b"d")]


async def test_a_frame_of_sends_is_answered_with_one_receipts_message(topic):
    frame = pb.ProducerSends(sends=[_send(i, _batch(b"m"), 1) for i in range(1, 4)])
    answers = await _answers(topic, [pb.ProduceRequest(sends=frame)])
    assert len(answers) == 1
    assert [r.sequence_id for r in answers[0].receipts.receipts] == [1, 2, 3]


async def test_a_fenced_send_ends_the_stream_unanswered(topic, gate):
    gate.close("broker fenced for this test")
    answers = await _answers(topic, [pb.ProduceRequest(send=_send(1, _batch(b"a"), 1))])
    assert len(answers) == 1 and isinstance(answers[0], BrokerFencedError)


async def test_a_request_other_than_a_send_ends_the_stream_as_invalid(topic):
    answers = await _answers(topic, [pb.ProduceRequest(open=pb.ProducerOpen(topic=str(NAME)))])
    assert len(answers) == 1
    assert "only 'send' or 'sends' may follow 'open'" in str(answers[0])
