"""Aborted transactional acks and nacks through a real broker: one copy of a message
outstanding at a time, each committed once, and TransactionConflict for an ack that
could commit a second copy."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest

import stableline
from stableline import ConsumerType, InitialPosition, MessageId

EARLIEST = InitialPosition.Earliest
MESSAGES = 500
BATCH = 10
NACK_DELAY_MS = 100
LOOP_DEADLINE_S = 180.0
# Long enough for a nack sent after NACK_DELAY_MS to come back as a copy, if it made one.
NO_COPY_WITHIN_MS = 1_000


def _key(message) -> tuple[int, int, int]:
    message_id = message.message_id()
    return message_id.ledger_id, message_id.entry_id, message_id.batch_index


def _consumer(client, topic: str, nack_delay_ms: int = NACK_DELAY_MS):
    return client.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        initial_position=EARLIEST,
        negative_ack_redelivery_delay_ms=nack_delay_ms,
    )


def _assert_no_copy(consumer) -> None:
    with pytest.raises(stableline.Timeout):
        extra = consumer.receive(timeout_millis=NO_COPY_WITHIN_MS)
        pytest.fail(f"a second copy of {extra.message_id()} arrived")


@pytest.fixture
def busy_cores(request) -> Iterator[None]:
    """`request.param` processes spinning for at most LOOP_DEADLINE_S, beside the test."""
    spin = f"import time\nend = time.monotonic() + {LOOP_DEADLINE_S}\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(request.param)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.parametrize("busy_cores", [0, 2], indirect=True, ids=["idle", "two-busy-loops"])
def test_an_abort_then_nack_loop_receives_and_commits_each_message_once(client, busy_cores):
    """Consume, transform, produce and ack in batches of 10; every other transaction is
    aborted and its messages nacked (the broker also redelivers the aborted acks)."""
    producer = client.create_producer("ctp-in", batching_max_messages=1)  # an entry each
    for number in range(MESSAGES):
        producer.send_async(f"m{number}".encode(), lambda *_: None)
    producer.flush()
    consumer = _consumer(client, "ctp-in")
    output = client.create_producer("ctp-out")
    committed: set[tuple[int, int, int]] = set()
    outstanding: set[tuple[int, int, int]] = set()
    transactions = conflicts = 0
    deadline = time.monotonic() + LOOP_DEADLINE_S
    while len(committed) < MESSAGES:
        assert time.monotonic() < deadline, f"{len(committed)} of {MESSAGES} committed in time"
        batch = consumer.batch_receive(max_num_messages=BATCH, timeout_millis=1_000)
        keys = [_key(message) for message in batch]
        twice = [k for k in keys if k in outstanding] + [
            k for k, n in Counter(keys).items() if n > 1
        ]
        assert not twice, f"received while a copy was outstanding: {twice}"
        assert not committed.intersection(keys), "a committed message came again"
        outstanding.update(keys)
        if not batch:
            continue
        txn = client.new_transaction()
        transactions += 1
        for message in batch:
            output.send(message.data(), txn=txn)
        abort = transactions % 2 == 0
        try:
            consumer.acknowledge(batch, txn=txn)
        except stableline.InvalidMessageId:  # TransactionConflict: abort, consume again
            conflicts += 1
            abort = True
        if abort:
            txn.abort()
            for message in batch:
                consumer.negative_acknowledge(message)
        else:
            txn.commit()
            committed.update(keys)
        outstanding.difference_update(keys)
    reader = client.create_reader("ctp-out", MessageId.earliest)
    copies = Counter()
    while reader.has_message_available():
        copies[reader.read_next(timeout_millis=5_000).data()] += 1
    assert (len(copies), sum(copies.values())) == (MESSAGES, MESSAGES)
    assert conflicts == 0
    _assert_no_copy(consumer)


def test_a_nack_after_an_aborted_ack_makes_no_second_copy(client):
    """The abort queues the entry for redelivery; the nack that follows names the
    delivery that was aborted, which is no longer outstanding."""
    client.create_producer("abort-nack").send(b"m")
    consumer = _consumer(client, "abort-nack")
    first = consumer.receive(5_000)
    txn = client.new_transaction()
    consumer.acknowledge(first, txn=txn)
    txn.abort()
    consumer.negative_acknowledge(first)
    again = consumer.receive(5_000)
    assert (again.message_id(), again.redelivery_count()) == (first.message_id(), 1)
    _assert_no_copy(consumer)
    committing = client.new_transaction()
    consumer.acknowledge(again, txn=committing)
    committing.commit()


def test_a_nack_of_a_stale_delivery_after_redelivery_makes_no_copy(client):
    """The entry came again after an abort and the application holds the new copy; a
    late nack of the first copy leaves the new one alone."""
    client.create_producer("stale-nack").send(b"m")
    consumer = _consumer(client, "stale-nack", nack_delay_ms=0)
    first = consumer.receive(5_000)
    txn = client.new_transaction()
    consumer.acknowledge(first, txn=txn)
    txn.abort()
    again = consumer.receive(5_000)
    assert again.redelivery_count() == 1
    consumer.negative_acknowledge(first)
    _assert_no_copy(consumer)
    committing = client.new_transaction()
    consumer.acknowledge(again, txn=committing)
    committing.commit()
    _assert_no_copy(consumer)


def test_a_nack_of_the_outstanding_delivery_still_redelivers_it(client):
    client.create_producer("fresh-nack").send(b"m")
    consumer = _consumer(client, "fresh-nack", nack_delay_ms=0)
    first = consumer.receive(5_000)
    consumer.negative_acknowledge(first)
    again = consumer.receive(5_000)
    assert (again.message_id(), again.redelivery_count()) == (first.message_id(), 1)
    consumer.negative_acknowledge(again)
    assert consumer.receive(5_000).redelivery_count() == 2


def test_a_transactional_ack_that_could_commit_a_second_copy_raises_transaction_conflict(
    client,
):
    producer = client.create_producer("conflict")
    for value in (b"a", b"b", b"c"):
        producer.send(value)
    consumer = _consumer(client, "conflict")
    a, b, c = (consumer.receive(5_000) for _ in range(3))
    consumer.acknowledge(a)
    txn = client.new_transaction()
    with pytest.raises(stableline.TransactionConflict, match="already acknowledged"):
        consumer.acknowledge(a, txn=txn)
    consumer.acknowledge(b, txn=txn)
    with pytest.raises(
        stableline.TransactionConflict, match=f"in transaction {txn.id[0]}:{txn.id[1]}"
    ):
        consumer.acknowledge(b, txn=txn)  # the same message twice in one transaction
    other = client.new_transaction()
    with pytest.raises(stableline.TransactionConflict, match="open transaction"):
        consumer.acknowledge(b, txn=other)
    with pytest.raises(stableline.TransactionConflict, match="in transaction"):
        consumer.acknowledge([c, c], txn=other)  # refused whole: c is not held
    consumer.acknowledge(c, txn=other)
    # Old `except InvalidMessageId` clauses still catch it.
    assert issubclass(stableline.TransactionConflict, stableline.InvalidMessageId)
    txn.commit()
    other.commit()
    _assert_no_copy(consumer)


def test_a_nack_of_one_message_of_a_batch_drops_what_is_queued_of_that_copy(client):
    """The nack hands back the whole entry; the rest of it, still queued, would be a
    second copy of messages the broker sends again."""
    producer = client.create_producer("batch-nack", batching_max_publish_delay_ms=1_000)
    for value in (b"a", b"b", b"c"):
        producer.send_async(value, lambda *_: None)
    producer.flush()
    consumer = _consumer(client, "batch-nack", nack_delay_ms=0)
    first = consumer.receive(5_000)
    assert first.message_id().batch_index == 0, "the three messages share an entry"
    consumer.negative_acknowledge(first)
    again = [consumer.receive(5_000) for _ in range(3)]
    assert [(m.data(), m.redelivery_count()) for m in again] == [(b"a", 1), (b"b", 1), (b"c", 1)]
    consumer.acknowledge(again)
    _assert_no_copy(consumer)
