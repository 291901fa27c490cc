"""Transactional acks of some messages of a batched entry, through a real broker: an
abort gives back only the messages its transaction acknowledged, disjoint
transactions on one entry both commit, and both hold across a broker restart."""

from __future__ import annotations

from collections import Counter

import pytest

import stableline
from stableline import ConsumerType, InitialPosition, IsolationLevel

EARLIEST = InitialPosition.Earliest
N = 10
HALF = N // 2
# Long enough for a copy to arrive if the broker were to send one.
NO_COPY_WITHIN_MS = 1_000
RECEIVE_MS = 10_000
# Open across a restart: must not time out meanwhile.
LONG_TXN_MS = 120_000


def _one_batch(client, topic: str) -> None:
    producer = client.create_producer(
        topic, batching_max_messages=N, batching_max_publish_delay_ms=10_000
    )
    for number in range(N):
        producer.send_async(f"m{number}".encode(), lambda *_: None)
    producer.flush()
    producer.close()


def _consumer(client, topic: str, type_=ConsumerType.Shared, level=IsolationLevel.READ_COMMITTED):
    # Plain acks confirmed one by one: each is in effect when acknowledge returns.
    return client.subscribe(
        topic,
        "sub",
        consumer_type=type_,
        initial_position=EARLIEST,
        isolation_level=level,
        ack_grouping_time_ms=0,
    )


def _receive_batch(consumer) -> list:
    messages = [consumer.receive(RECEIVE_MS) for _ in range(N)]
    entries = {(m.message_id().ledger_id, m.message_id().entry_id) for m in messages}
    assert len(entries) == 1, f"the {N} messages share one entry: {entries}"
    assert [m.message_id().batch_index for m in messages] == list(range(N))
    return messages


def _backlog(broker, topic: str) -> int:
    stats = broker.admin(f"/admin/v2/persistent/public/default/{topic}/stats")
    return stats["subscriptions"]["sub"]["msgBacklog"]


def _assert_no_copy(consumer) -> None:
    with pytest.raises(stableline.Timeout):
        extra = consumer.receive(timeout_millis=NO_COPY_WITHIN_MS)
        pytest.fail(f"a second copy of {extra.message_id()} ({extra.data()!r}) arrived")


@pytest.mark.parametrize(
    "type_",
    [ConsumerType.Shared, ConsumerType.KeyShared, ConsumerType.Exclusive, ConsumerType.Failover],
)
@pytest.mark.parametrize("level", [IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED])
def test_an_abort_gives_back_only_the_messages_of_a_batch_its_transaction_acknowledged(
    client, type_, level
):
    topic = f"half-abort-{type_.name}-{level.name}"
    _one_batch(client, topic)
    consumer = _consumer(client, topic, type_, level)
    received = Counter()
    first = _receive_batch(consumer)
    received.update(m.data() for m in first)

    txn = client.new_transaction()
    consumer.acknowledge(first[:HALF], txn=txn)
    txn.abort()
    consumer.acknowledge(first[HALF:])

    again = [consumer.receive(RECEIVE_MS) for _ in range(HALF)]
    assert [m.message_id().batch_index for m in again] == list(range(HALF))
    received.update(m.data() for m in again)
    retry = client.new_transaction()
    consumer.acknowledge(again, txn=retry)
    retry.commit()
    _assert_no_copy(consumer)
    # The acknowledged half once; the aborted half once more, after its abort.
    assert received == Counter({f"m{i}".encode(): 2 if i < HALF else 1 for i in range(N)})


def test_an_abort_leaves_the_rest_of_the_batch_with_its_consumer_until_acknowledged(client):
    _one_batch(client, "abort-before-rest")
    consumer = _consumer(client, "abort-before-rest")
    first = _receive_batch(consumer)

    txn = client.new_transaction()
    consumer.acknowledge(first[:HALF], txn=txn)
    txn.abort()
    # The rest is still with this consumer: no copy of any of it comes meanwhile.
    _assert_no_copy(consumer)
    consumer.acknowledge(first[HALF:])
    again = [consumer.receive(RECEIVE_MS) for _ in range(HALF)]
    assert [m.data() for m in again] == [m.data() for m in first[:HALF]]
    consumer.acknowledge(again)
    _assert_no_copy(consumer)


def test_an_abort_keeps_the_rest_of_the_batch_the_client_still_buffers(client):
    """The blocking client drops on abort only the messages the transaction acknowledged:
    the rest of their batch is not sent again, so what of it is buffered must stay."""
    _one_batch(client, "abort-buffered")
    consumer = _consumer(client, "abort-buffered")
    first = [consumer.receive(RECEIVE_MS) for _ in range(HALF)]

    txn = client.new_transaction()
    consumer.acknowledge(first, txn=txn)
    txn.abort()
    rest = [consumer.receive(RECEIVE_MS) for _ in range(N - HALF)]
    assert [m.message_id().batch_index for m in rest] == list(range(HALF, N))
    consumer.acknowledge(rest)
    again = [consumer.receive(RECEIVE_MS) for _ in range(HALF)]
    assert [m.data() for m in again] == [m.data() for m in first]
    consumer.acknowledge(again)
    _assert_no_copy(consumer)


def test_two_transactions_acking_disjoint_messages_of_one_batch_both_commit(broker, client):
    _one_batch(client, "disjoint")
    consumer = _consumer(client, "disjoint")
    first = _receive_batch(consumer)

    one, other = client.new_transaction(), client.new_transaction()
    consumer.acknowledge(first[:HALF], txn=one)
    consumer.acknowledge(first[HALF:], txn=other)
    with pytest.raises(stableline.TransactionConflict, match="open transaction"):
        consumer.acknowledge(first[HALF], txn=one)  # overlapping: still a conflict
    one.commit()
    other.commit()
    _assert_no_copy(consumer)
    assert _backlog(broker, "disjoint") == 0


@pytest.mark.parametrize("end", ["abort", "commit"])
def test_a_transaction_holding_half_a_batch_across_a_restart_ends_exactly(broker, end):
    with stableline.Client(broker.service_url) as client:
        _one_batch(client, "restart")
        consumer = _consumer(client, "restart")
        first = _receive_batch(consumer)
        txn = client.new_transaction(timeout_ms=LONG_TXN_MS)
        consumer.acknowledge(first[:HALF], txn=txn)
        consumer.acknowledge(first[HALF:])
        consumer.close()

        broker.restart()

        consumer = _consumer(client, "restart")
        # Held by the open transaction and acknowledged: nothing to deliver.
        _assert_no_copy(consumer)
        if end == "commit":
            txn.commit()
        else:
            txn.abort()
            again = [consumer.receive(RECEIVE_MS) for _ in range(HALF)]
            assert [m.data() for m in again] == [m.data() for m in first[:HALF]]
            consumer.acknowledge(again)
        _assert_no_copy(consumer)
        assert _backlog(broker, "restart") == 0
