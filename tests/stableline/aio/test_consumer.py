"""Consumer acks: whole entries go as one id, anything less goes message by message."""

from __future__ import annotations

from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId, Messages, messages_of
from stableline.aio._consumer import _ack_ids


def _delivered(ledger_id: int, entry_id: int, count: int, acked=()) -> list:
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"%d" % i) for i in range(count)])
    entry = pb.EntryDelivery(
        ledger_id=ledger_id,
        entry_id=entry_id,
        metadata=pb.EntryMetadata(num_messages=count),
        payload=batch.SerializeToString(),
        acked_batch_indexes=list(acked),
    )
    return messages_of("persistent://public/default/t", entry)


def test_every_message_of_an_entry_acks_the_whole_entry():
    assert _ack_ids(_delivered(1, 5, 3)) == [MessageId(1, 5, -1)]


def test_part_of_an_entry_acks_exactly_those_messages():
    first, _, third = _delivered(1, 5, 3)
    assert sorted(_ack_ids([third, first])) == [MessageId(1, 5, 0), MessageId(1, 5, 2)]


def test_the_same_message_twice_does_not_make_a_whole_entry():
    first, second = _delivered(1, 5, 2)
    assert _ack_ids([first, first]) == [MessageId(1, 5, 0)]
    assert second.message_id() == MessageId(1, 5, 1)


def test_a_redelivered_entry_with_acked_indexes_acks_only_what_was_delivered():
    delivered = _delivered(2, 0, 3, acked=[1])
    assert [m.message_id().batch_index for m in delivered] == [0, 2]
    assert sorted(_ack_ids(delivered)) == [MessageId(2, 0, 0), MessageId(2, 0, 2)]


def test_single_message_entries_and_bare_ids_pass_through():
    (only,) = _delivered(3, 1, 1)
    bare = MessageId(3, 2, 0)
    assert _ack_ids([only, bare]) == [MessageId(3, 1, 0), bare]


def _runs(*specs):
    """Messages of (entry, indexes) runs, built as batch_receive builds them."""
    runs = []
    for ledger_id, entry_id, count, indexes in specs:
        entry = _delivered(ledger_id, entry_id, count)[0]._entry
        runs.append((entry, indexes))
    return Messages(runs)


def test_whole_runs_from_batch_receive_ack_as_whole_entries():
    messages = _runs((1, 5, 3, range(3)), (1, 6, 2, range(2)))
    assert _ack_ids(messages) == [MessageId(1, 5, -1), MessageId(1, 6, -1)]


def test_a_run_cut_by_max_num_messages_acks_message_by_message():
    messages = _runs((1, 5, 4, range(1, 3)))
    assert sorted(_ack_ids(messages)) == [MessageId(1, 5, 1), MessageId(1, 5, 2)]
