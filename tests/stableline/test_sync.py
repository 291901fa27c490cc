"""The blocking client is a shell over the asyncio one: the same methods with the
same parameters and defaults, the same options values, the same transaction states."""

from __future__ import annotations

import gc
import inspect
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import stableline
from stableline import aio

EARLIEST = stableline.InitialPosition.Earliest

FACES = [
    (stableline.Client, aio.Client),
    (stableline.Producer, aio.Producer),
    (stableline.Consumer, aio.Consumer),
    (stableline.Reader, aio.Reader),
    (stableline.Transaction, aio.Transaction),
]


def _public_methods(cls) -> dict:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name == "__init__"
    }


@pytest.mark.parametrize("blocking, asyncio_face", FACES, ids=[f[0].__name__ for f in FACES])
def test_every_blocking_method_takes_what_its_asyncio_twin_takes(blocking, asyncio_face):
    twins = _public_methods(asyncio_face)
    for name, method in _public_methods(blocking).items():
        if name == "__init__" and blocking is not stableline.Client:
            continue  # a wrapper is made around its asyncio object, not by users
        if name not in twins:
            continue  # an attribute or property there (producer.topic): no parameters
        ours = list(inspect.signature(method).parameters.values())
        theirs = list(inspect.signature(twins[name]).parameters.values())
        shape = [(p.name, p.kind, p.default) for p in ours]
        assert shape == [(p.name, p.kind, p.default) for p in theirs[: len(ours)]], name
        # What only the asyncio face takes (event_time_ms, ...) has a default.
        assert all(p.default is not inspect.Parameter.empty for p in theirs[len(ours) :]), name


def test_a_transaction_state_compares_and_prints_as_its_name(client):
    txn = client.new_transaction()
    assert txn.state == "OPEN" and txn.state is stableline.TransactionState.OPEN
    client.create_producer("states").send(b"x", txn=txn)
    txn.commit()
    assert txn.state == "COMMITTED" and str(txn.state) == "COMMITTED"
    assert f"{txn.state}" == "COMMITTED" and repr(txn).endswith(", COMMITTED)")
    with pytest.raises(stableline.TransactionEnded, match=r"transaction \d+:\d+ is COMMITTED"):
        txn.abort()
    aborted = client.new_transaction()
    aborted.abort()
    assert aborted.state == "ABORTED" and aborted.state is stableline.TransactionState.ABORTED


def test_the_blocking_face_opens_with_an_options_value(broker):
    options = stableline.ClientOptions(operation_timeout_seconds=5.0)
    with stableline.Client.with_options(broker.service_url, options) as client:
        producer = client.open_producer(
            "options", stableline.ProducerOptions(producer_name="named", batching_max_messages=1)
        )
        consumer = client.open_consumer(
            "options",
            "sub",
            stableline.ConsumerOptions(initial_position=stableline.InitialPosition.Earliest),
        )
        sent = producer.send(b"one")
        assert producer.producer_name() == "named"
        received = consumer.receive(5000)
        assert (received.value(), received.message_id()) == (b"one", sent)
        reader = client.open_reader("options", stableline.ReaderOptions())
        assert reader.read_next(5000).value() == b"one"


# ---------------------------------------------------------------- send_async


def test_send_async_callbacks_run_on_the_loop_thread_in_send_order(client):
    producer = client.create_producer("callbacks", batching_max_messages=100)
    calls = []
    for i in range(1000):
        producer.send_async(
            str(i).encode(),
            lambda error, message_id, i=i: calls.append(
                (i, error, message_id, threading.current_thread().name)
            ),
        )
    producer.flush()  # returns once every callback has run
    assert [call[0] for call in calls] == list(range(1000))
    assert all(error is None for _, error, _, _ in calls)
    assert {thread for *_, thread in calls} == {"stableline-client"}
    ids = [message_id for _, _, message_id, _ in calls]
    assert ids == sorted(ids) and len(set(ids)) == 1000


def test_send_async_with_none_sends_without_telling_and_logs_nothing(client, caplog):
    producer = client.create_producer("fire-and-forget")
    consumer = client.subscribe("fire-and-forget", "sub", initial_position=EARLIEST)
    for i in range(50):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    assert [consumer.receive(5000).value() for _ in range(50)] == [
        str(i).encode() for i in range(50)
    ]
    assert not caplog.records


def test_send_async_with_a_callback_that_is_not_callable_raises_type_error_at_once(client):
    producer = client.create_producer("not-callable")
    with pytest.raises(TypeError, match="callback must be callable or None"):
        producer.send_async(b"x", "not a function")


def test_a_blocking_call_inside_a_send_async_callback_raises(client):
    producer = client.create_producer("inside-callback")
    errors = []

    def callback(error, message_id) -> None:
        try:
            producer.send(b"nested")
        except stableline.StableLineError as raised:
            errors.append(raised)

    producer.send_async(b"x", callback)
    producer.flush()
    assert len(errors) == 1 and "inside a client callback" in str(errors[0])


def test_block_if_queue_full_makes_the_caller_wait_for_room(client):
    producer = client.create_producer(
        "blocking-room", max_pending_messages=10, batching_max_messages=5, block_if_queue_full=True
    )
    outstanding = []  # sends whose callback has not run, as seen by each send
    settled = [0]
    sent = [0]

    def callback(error, message_id) -> None:
        assert error is None
        settled[0] += 1

    for i in range(500):
        producer.send_async(str(i).encode(), callback)
        sent[0] += 1
        outstanding.append(sent[0] - settled[0])
    producer.flush()
    assert settled[0] == 500
    assert max(outstanding) <= 10


def test_without_block_if_queue_full_a_send_past_the_queue_gets_queue_full(client):
    producer = client.create_producer(
        "refusing-room", max_pending_messages=10, batching_max_messages=1000
    )
    errors = []
    for i in range(2000):
        producer.send_async(str(i).encode(), lambda error, _id: errors.append(error))
    producer.flush()
    refused = [error for error in errors if error is not None]
    assert len(errors) == 2000 and refused
    assert all(isinstance(error, stableline.ProducerQueueIsFull) for error in refused)


def test_a_fire_and_forget_send_past_the_queue_raises_and_every_accepted_one_is_stored(
    client,
):
    topic = "fire-and-forget-room"
    producer = client.create_producer(topic, max_pending_messages=10, batching_max_messages=1000)
    accepted, refused = 0, 0
    for i in range(2000):
        try:
            producer.send_async(str(i).encode(), None)
            accepted += 1
        except stableline.ProducerQueueIsFull as error:
            assert "no callback" in str(error)
            refused += 1
    producer.flush()
    assert refused and accepted + refused == 2000
    consumer = client.subscribe(topic, "all", initial_position=stableline.InitialPosition.Earliest)
    got, deadline = 0, time.monotonic() + 30
    while got < accepted and time.monotonic() < deadline:
        got += len(consumer.batch_receive(1000, 1000))
    assert got == accepted
    assert len(consumer.batch_receive(1000, 200)) == 0  # and nothing that was refused


def test_the_producer_s_room_hand_off_is_private():
    for face in (aio.Producer.send_nowait, aio.Producer.send_async, stableline.Producer.send_async):
        assert "room_reserved" not in inspect.signature(face).parameters


def test_twenty_client_exits_print_nothing_on_stderr(broker):
    """A task left pending on the client's loop when it closes would print "Task was
    destroyed but it is pending" as the process exits."""
    script = Path(__file__).with_name("client_exit.py")
    for round_ in range(5):
        runs = [
            subprocess.Popen(
                [sys.executable, str(script), broker.service_url, f"exits-{round_}-{n}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(4)
        ]
        for run in runs:
            _out, err = run.communicate(timeout=60)
            assert run.returncode == 0 and err == "", err


# ---------------------------------------------------------------- receive, acknowledge


def _fill(client, topic: str, count: int) -> None:
    # Entries of exactly 100 messages (the last one: the rest), whatever the load: the
    # tests count backlog in entries.
    producer = client.create_producer(
        topic, batching_max_messages=100, batching_max_publish_delay_ms=60_000
    )
    for i in range(count):
        producer.send_async(str(i).encode(), None)
    producer.flush()


def _backlog(broker, topic: str, subscription: str = "sub") -> int:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)["subscriptions"][subscription]["msgBacklog"]


def test_receive_gives_every_message_once_in_order_from_its_buffer(client):
    _fill(client, "buffered", 2500)
    consumer = client.subscribe("buffered", "sub", initial_position=EARLIEST)
    values = [consumer.receive(5000).value() for _ in range(2500)]
    assert values == [str(i).encode() for i in range(2500)]
    with pytest.raises(stableline.Timeout):
        consumer.receive(100)


def test_grouped_acks_are_confirmed_when_close_returns(client, broker):
    _fill(client, "grouped", 300)
    consumer = client.subscribe(
        "grouped", "sub", initial_position=EARLIEST, ack_grouping_time_ms=60_000
    )
    for _ in range(300):
        consumer.acknowledge(consumer.receive(5000))
    assert _backlog(broker, "grouped") == 3  # 3 entries of 100: the group waits its time
    consumer.close()
    assert _backlog(broker, "grouped") == 0


def test_grouped_acks_go_once_the_group_is_full(client, broker, wait):
    _fill(client, "full-group", 300)
    consumer = client.subscribe(
        "full-group",
        "sub",
        initial_position=EARLIEST,
        ack_grouping_time_ms=60_000,
        ack_grouping_max_size=100,
    )
    for _ in range(300):
        consumer.acknowledge(consumer.receive(5000))
    wait(lambda: _backlog(broker, "full-group") == 0, 10, "the full groups acknowledged")


def test_grouped_acks_go_after_the_grouping_time(client, broker, wait):
    _fill(client, "timed-group", 10)
    consumer = client.subscribe(
        "timed-group", "sub", initial_position=EARLIEST, ack_grouping_time_ms=50
    )
    for _ in range(10):
        consumer.acknowledge(consumer.receive(5000))
    wait(lambda: _backlog(broker, "timed-group") == 0, 10, "the timed group acknowledged")


def test_a_bad_id_in_a_group_refuses_only_itself(client, broker, caplog):
    _fill(client, "bad-in-group", 5)
    consumer = client.subscribe(
        "bad-in-group", "sub", initial_position=EARLIEST, ack_grouping_time_ms=60_000
    )
    for _ in range(5):
        consumer.acknowledge(consumer.receive(5000))
    consumer.acknowledge(stableline.MessageId(12345, 0, 0))
    consumer.close()
    assert _backlog(broker, "bad-in-group") == 0
    assert any("12345:0:0" in record.getMessage() for record in caplog.records)


def test_a_transactional_ack_confirms_the_grouped_acks_first(client, broker):
    _fill(client, "txn-after-group", 2)
    consumer = client.subscribe(
        "txn-after-group",
        "sub",
        consumer_type=stableline.ConsumerType.Shared,
        initial_position=EARLIEST,
        ack_grouping_time_ms=60_000,
    )
    first, second = consumer.receive(5000), consumer.receive(5000)
    consumer.acknowledge(first)
    txn = client.new_transaction()
    consumer.acknowledge(second, txn=txn)
    assert _backlog(broker, "txn-after-group") == 1  # the grouped ack went first
    txn.commit()
    assert _backlog(broker, "txn-after-group") == 0


def test_messages_buffered_and_not_acknowledged_come_again_after_close(client):
    _fill(client, "buffer-redelivered", 20)
    consumer = client.subscribe("buffer-redelivered", "sub", initial_position=EARLIEST)
    consumer.acknowledge(consumer.receive(5000))
    consumer.close()  # 19 were taken into its buffer
    again = client.subscribe("buffer-redelivered", "sub", initial_position=EARLIEST)
    assert [again.receive(5000).value() for _ in range(19)] == [
        str(i).encode() for i in range(1, 20)
    ]


def test_seek_drops_what_receive_had_buffered(client):
    _fill(client, "buffer-seek", 20)
    consumer = client.subscribe("buffer-seek", "sub", initial_position=EARLIEST)
    first = consumer.receive(5000)
    consumer.receive(5000)
    consumer.seek(first.message_id())
    assert consumer.receive(5000).value() == b"0"


# ---------------------------------------------------------------- Pulsar's names


def test_consumer_knows_its_name_its_connection_and_its_topic_s_last_id(client):
    named = client.subscribe("names", "named", consumer_name="worker-1")
    assert named.consumer_name() == "worker-1"
    unnamed = client.subscribe("names", "unnamed")
    assert unnamed.consumer_name().startswith("consumer-")
    assert unnamed.consumer_name() != client.subscribe("names", "other").consumer_name()
    last = client.create_producer("names").send(b"x")
    assert named.get_last_message_id() == stableline.MessageId(last.ledger_id, last.entry_id)
    assert named.is_connected()
    named.close()
    assert not named.is_connected()


async def test_the_asyncio_consumer_has_the_same_names(broker):
    async with aio.Client(broker.service_url) as client:
        consumer = await client.subscribe("aio-names", "sub", consumer_name="worker-2")
        producer = await client.create_producer("aio-names")
        last = await producer.send(b"x")
        assert consumer.consumer_name() == "worker-2" and consumer.is_connected()
        assert await consumer.get_last_message_id() == stableline.MessageId(
            last.ledger_id, last.entry_id
        )


def test_reader_seek_reads_that_message_next(client):
    producer = client.create_producer("reader-seek", batching_max_messages=1)
    ids = [producer.send(str(i).encode()) for i in range(5)]
    reader = client.create_reader("reader-seek", stableline.MessageId.earliest)
    assert [reader.read_next(5000).value() for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    reader.seek(ids[2])
    assert reader.read_next(5000).value() == b"2"
    reader.seek(stableline.MessageId.earliest)
    assert reader.read_next(5000).value() == b"0"
    reader.seek(stableline.MessageId.latest)
    assert not reader.has_message_available()
    with pytest.raises(TypeError, match="seeks to a MessageId"):
        reader.seek(12345)


def test_reader_seek_to_a_message_inside_a_batch_starts_at_that_message(client):
    producer = client.create_producer("reader-seek-batch", batching_max_messages=10)
    for i in range(10):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    reader = client.create_reader("reader-seek-batch", stableline.MessageId.earliest)
    third = [reader.read_next(5000) for _ in range(10)][3]
    reader.seek(third.message_id())
    assert [reader.read_next(5000).value() for _ in range(7)] == [
        str(i).encode() for i in range(3, 10)
    ]


def test_shutdown_closes_at_once_failing_what_is_not_durable(broker):
    client = stableline.Client(broker.service_url)
    producer = client.create_producer("shutdown", batching_max_publish_delay_ms=60_000)
    outcomes = []
    for i in range(10):
        producer.send_async(str(i).encode(), lambda error, message_id: outcomes.append(error))
    client.shutdown()
    assert len(outcomes) == 10 and all(error is not None for error in outcomes)
    client.close()  # already shut: nothing to do


# ---------------------------------------------------------------- several topics


def test_a_consumer_of_a_list_of_topics_receives_from_all_and_acks_each_topic(client, broker):
    for topic in ("multi-a", "multi-b"):
        _fill(client, topic, 50)
    consumer = client.subscribe(["multi-a", "multi-b"], "sub", initial_position=EARLIEST)
    got: dict[str, list[bytes]] = {}
    for _ in range(100):
        message = consumer.receive(5000)
        got.setdefault(message.topic_name(), []).append(message.value())
        consumer.acknowledge(message)
    assert got == {
        f"persistent://public/default/{topic}": [str(i).encode() for i in range(50)]
        for topic in ("multi-a", "multi-b")
    }
    with pytest.raises(TypeError, match="does not name its topic"):
        consumer.acknowledge(stableline.MessageId(0, 0))
    consumer.close()
    assert _backlog(broker, "multi-a") == 0 and _backlog(broker, "multi-b") == 0


def test_a_topics_pattern_subscribes_the_matching_topics_and_later_ones(client, monkeypatch):
    from stableline.aio import _multi_consumer

    monkeypatch.setattr(_multi_consumer, "PATTERN_DISCOVERY_PERIOD_S", 0.2)
    for topic in ("orders-eu", "orders-us", "payments"):
        client.create_producer(topic).send(topic.encode())
    consumer = client.subscribe(
        re.compile("persistent://public/default/orders-.*"), "sub", initial_position=EARLIEST
    )
    assert sorted(consumer.receive(5000).value() for _ in range(2)) == [b"orders-eu", b"orders-us"]
    client.create_producer("orders-asia").send(b"orders-asia")  # a topic made after
    assert consumer.receive(10_000).value() == b"orders-asia"
    with pytest.raises(stableline.Timeout):
        consumer.receive(300)


async def test_the_asyncio_face_subscribes_to_a_list_of_topics(broker):
    async with aio.Client(broker.service_url) as client:
        for topic in ("aio-multi-a", "aio-multi-b"):
            await (await client.create_producer(topic)).send(topic.encode())
        consumer = await client.subscribe(
            ["aio-multi-a", "aio-multi-b"], "sub", initial_position=EARLIEST
        )
        batch = await consumer.batch_receive(10, 5000)
        batch = list(batch) + list(await consumer.batch_receive(10, 5000))
        assert sorted(m.value() for m in batch) == [b"aio-multi-a", b"aio-multi-b"]
        await consumer.acknowledge(batch)
        with pytest.raises(TypeError, match="topic name, a non-empty list"):
            await client.subscribe([], "sub")


def test_a_nack_drops_the_rest_of_its_entry_from_the_buffer(client):
    producer = client.create_producer("nack-buffer", batching_max_messages=5)
    for i in range(5):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    consumer = client.subscribe(
        "nack-buffer",
        "sub",
        initial_position=EARLIEST,
        negative_ack_redelivery_delay_ms=0,
    )
    first = consumer.receive(5000)
    consumer.negative_acknowledge(first)
    # The entry comes again whole; none of its messages came from the old buffer.
    again = [consumer.receive(5000) for _ in range(5)]
    assert [m.value() for m in again] == [str(i).encode() for i in range(5)]
    assert all(m.redelivery_count() == 1 for m in again)


def test_a_nack_on_one_topic_keeps_another_topic_s_entry_of_the_same_id_buffered(client):
    """Ledger and entry ids count per topic: both topics' first entry is 0:0. A nack of
    one must not drop the other's buffered messages, which would then never come."""
    topics = ["nack-same-id-a", "nack-same-id-b"]
    for topic in topics:
        producer = client.create_producer(topic, batching_max_messages=5)
        for i in range(5):
            producer.send_async(f"{topic}-{i}".encode(), None)
        producer.flush()
    consumer = client.subscribe(
        topics, "sub", initial_position=EARLIEST, negative_ack_redelivery_delay_ms=0
    )
    got = [consumer.receive(5000)]
    while {m.topic_name() for m in got} != {f"persistent://public/default/{t}" for t in topics}:
        got.append(consumer.receive(5000))  # both entries are in the buffer now
    nacked = got[0]
    consumer.negative_acknowledge(nacked)
    nacked_topic = nacked.topic_name()
    other = [m.value() for m in got if m.topic_name() != nacked_topic]
    again: list[bytes] = []
    deadline = time.monotonic() + 15
    while (len(other) < 5 or len(again) < 5) and time.monotonic() < deadline:
        try:
            message = consumer.receive(500)
        except stableline.Timeout:
            continue
        (again if message.topic_name() == nacked_topic else other).append(message.value())
    other_topic = next(t for t in topics if not nacked_topic.endswith(t))
    assert sorted(other) == [f"{other_topic}-{i}".encode() for i in range(5)]
    assert sorted(again) == sorted(
        f"{nacked_topic.rsplit('/', 1)[1]}-{i}".encode() for i in range(5)
    )


def test_threads_sharing_a_consumer_each_receive_different_messages(client, broker):
    _fill(client, "shared-by-threads", 4000)
    consumer = client.subscribe("shared-by-threads", "sub", initial_position=EARLIEST)
    got: list[list[bytes]] = [[] for _ in range(4)]

    def work(mine: list[bytes]) -> None:
        while True:
            try:
                message = consumer.receive(500)
            except stableline.Timeout:
                return
            mine.append(message.value())
            consumer.acknowledge(message)

    threads = [threading.Thread(target=work, args=(mine,)) for mine in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [value for mine in got for value in mine]
    assert sorted(every) == sorted(str(i).encode() for i in range(4000))
    consumer.close()  # the acks of every thread, each whole, are confirmed
    assert _backlog(broker, "shared-by-threads") == 0


def test_acknowledge_keeps_no_reference_to_the_message(client):
    _fill(client, "ack-holds-nothing", 10)
    consumer = client.subscribe(
        "ack-holds-nothing", "sub", initial_position=EARLIEST, ack_grouping_time_ms=60_000
    )
    message = consumer.receive(5000)
    held = sys.getrefcount(message)
    consumer.acknowledge(message)
    # The group keeps its entry and index: a Message no one holds is freed at once.
    assert sys.getrefcount(message) == held


def test_receive_makes_each_buffered_message_when_it_is_taken(client):
    _fill(client, "made-when-taken", 100)  # one entry of 100
    consumer = client.subscribe("made-when-taken", "sub", initial_position=EARLIEST)

    def messages_alive() -> int:
        return sum(type(o) is stableline.Message for o in gc.get_objects())

    before = messages_alive()
    first = consumer.receive(5000)  # the other 99 wait in the buffer, not yet made
    assert messages_alive() <= before + 1
    rest = [consumer.receive(5000) for _ in range(99)]
    assert [m.value() for m in [first, *rest]] == [str(i).encode() for i in range(100)]


def test_acks_of_ids_and_messages_together_go_once_the_group_is_full(client, broker, wait):
    _fill(client, "mixed-group", 200)
    consumer = client.subscribe(
        "mixed-group",
        "sub",
        initial_position=EARLIEST,
        ack_grouping_time_ms=60_000,
        ack_grouping_max_size=100,
    )
    messages = [consumer.receive(5000) for _ in range(200)]
    for message in messages[:60]:
        consumer.acknowledge(message.message_id())
    for message in messages[60:100]:  # 60 ids and 40 messages: a full group
        consumer.acknowledge(message)
    wait(lambda: _backlog(broker, "mixed-group") == 1, 10, "the first full group acknowledged")
    consumer.acknowledge(messages[100:150])
    consumer.acknowledge(messages[150:])
    wait(lambda: _backlog(broker, "mixed-group") == 0, 10, "the second full group acknowledged")


def test_send_async_in_a_transaction_then_commit_without_flush_commits_every_message(client):
    producer = client.create_producer("txn-send-async")
    consumer = client.subscribe("txn-send-async", "sub", initial_position=EARLIEST)
    txn = client.new_transaction()
    errors = []
    for i in range(500):
        producer.send_async(str(i).encode(), lambda error, _id: errors.append(error), txn=txn)
    txn.commit()
    assert [consumer.receive(5000).value() for _ in range(500)] == [
        str(i).encode() for i in range(500)
    ]
    assert errors == [None] * 500


def test_an_ack_after_close_raises(client):
    _fill(client, "ack-after-close", 1)
    consumer = client.subscribe("ack-after-close", "sub", initial_position=EARLIEST)
    message = consumer.receive(5000)
    consumer.close()
    with pytest.raises(stableline.StableLineError, match="closed"):
        consumer.acknowledge(message)


def test_an_abort_drops_only_the_buffered_messages_acked_in_it(client):
    producer = client.create_producer("abort-buffer", batching_max_messages=5)
    for i in range(5):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    consumer = client.subscribe(
        "abort-buffer",
        "sub",
        consumer_type=stableline.ConsumerType.Shared,
        initial_position=EARLIEST,
    )
    first = consumer.receive(5000)  # the other 4 wait in receive's buffer
    txn = client.new_transaction()
    consumer.acknowledge(first, txn=txn)
    txn.abort()  # the broker gives back only the message acked in it
    rest = [consumer.receive(5000) for _ in range(4)]
    assert [(m.value(), m.redelivery_count()) for m in rest] == [
        (str(i).encode(), 0) for i in range(1, 5)
    ]
    consumer.acknowledge(rest)  # the entry's delivery ends: the aborted one comes again
    again = consumer.receive(5000)
    assert (again.value(), again.redelivery_count()) == (b"0", 1)
    consumer.acknowledge(again)
    with pytest.raises(stableline.Timeout):
        consumer.receive(300)
