"""De-duplication of named producers' batches through a real broker."""

from __future__ import annotations

import grpc

import stableline
from stableline import MessageId
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc

RU = stableline.IsolationLevel.READ_UNCOMMITTED


def _send(sequence_id: int, value: bytes) -> pb.ProduceRequest:
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=value)])
    metadata = pb.EntryMetadata(num_messages=1, sequence_id=sequence_id)
    return pb.ProduceRequest(
        send=pb.ProducerSend(
            sequence_id=sequence_id, metadata=metadata, payload=batch.SerializeToString()
        )
    )


def _produce_raw(broker, topic: str, name: str, sends: list[tuple[int, bytes]]):
    """One Produce stream: (the opened response, the receipts in order)."""
    requests = [pb.ProduceRequest(open=pb.ProducerOpen(topic=topic, producer_name=name))]
    requests += [_send(sequence_id, value) for sequence_id, value in sends]
    with grpc.insecure_channel(broker.service_url) as channel:
        responses = list(broker_pb2_grpc.BrokerStub(channel).Produce(iter(requests)))
    return responses[0].opened, [r.receipt for r in responses[1:]]


def _values(service_url: str, topic: str) -> list[bytes]:
    with stableline.Client(service_url) as client:
        reader = client.create_reader(topic, MessageId.earliest, RU)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(5000).data())
        return values


def test_a_resent_batch_is_acknowledged_as_a_duplicate_and_not_written_again(broker):
    opened, receipts = _produce_raw(broker, "dedup", "writer", [(0, b"a"), (1, b"b"), (1, b"b")])
    assert opened.last_sequence_id == -1
    # A duplicate of a batch still being appended waits for it and shares its position.
    answered = sorted((r.sequence_id, r.duplicate, r.entry_id) for r in receipts)
    assert answered == [(0, False, 0), (1, False, 1), (1, True, 1)]

    opened, receipts = _produce_raw(broker, "dedup", "writer", [(0, b"a"), (2, b"c")])
    assert opened.last_sequence_id == 1
    # A duplicate of a durable batch is answered with where its first copy lies.
    answered = sorted((r.sequence_id, r.duplicate, r.entry_id) for r in receipts)
    assert answered == [(0, True, 0), (2, False, 2)]
    assert _values(broker.service_url, "dedup") == [b"a", b"b", b"c"]


def test_a_named_producer_continues_its_sequence_across_reconnects_and_a_kill(broker):
    def send_three(start: int) -> None:
        with stableline.Client(broker.service_url) as client:
            producer = client.create_producer("continued", producer_name="steady")
            for i in range(start, start + 3):
                producer.send(f"m{i}".encode())
            producer.close()

    send_three(0)
    send_three(3)  # a new stream of the same name: continues, nothing dropped
    broker.kill()
    broker.start()  # no snapshot: the sequences come back from the log
    opened, _ = _produce_raw(broker, "continued", "steady", [])
    assert opened.last_sequence_id == 5
    send_three(6)
    assert _values(broker.service_url, "continued") == [f"m{i}".encode() for i in range(9)]


def test_a_duplicate_after_a_kill_is_answered_with_its_first_copys_position(broker):
    others = [(i, f"o{i}".encode()) for i in range(300)]  # more than one scan step between
    _, first = _produce_raw(broker, "resent", "writer", [(0, b"a"), (1, b"b")])
    _produce_raw(broker, "resent", "other", others)
    broker.kill()
    broker.start()
    opened, receipts = _produce_raw(broker, "resent", "writer", [(0, b"a"), (1, b"b"), (2, b"c")])
    assert opened.last_sequence_id == 1
    answered = [(r.sequence_id, r.duplicate, r.ledger_id, r.entry_id) for r in receipts]
    assert sorted(answered)[:2] == [
        (r.sequence_id, True, r.ledger_id, r.entry_id)
        for r in sorted(first, key=lambda r: r.sequence_id)
    ]
    assert _values(broker.service_url, "resent").count(b"a") == 1


def test_a_producer_without_a_name_gets_a_unique_one_and_is_deduplicated_under_it(broker):
    opened, receipts = _produce_raw(broker, "anonymous", "", [(0, b"a"), (0, b"b")])
    assert opened.producer_name.startswith("anonymous-")
    assert [r.duplicate for r in receipts] == [False, True]
    other, _ = _produce_raw(broker, "anonymous", "", [])
    assert other.producer_name != opened.producer_name and other.last_sequence_id == -1
    # Reopening under the generated name continues it, as the client does on a reconnect.
    again, receipts = _produce_raw(
        broker, "anonymous", opened.producer_name, [(0, b"a"), (1, b"c")]
    )
    assert again.last_sequence_id == 0
    assert [(r.duplicate, r.entry_id) for r in receipts] == [(True, 0), (False, 1)]
    assert _values(broker.service_url, "anonymous") == [b"a", b"c"]
