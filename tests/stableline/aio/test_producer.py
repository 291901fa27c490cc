"""The producer's batching against a real broker: batches keep to the broker's limits
and to one transaction, whichever path a send takes."""

from __future__ import annotations

import asyncio

import pytest

from stableline import aio
from stableline.testing import BrokerProcess


@pytest.fixture
def small_broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", env={"STABLELINE_MAX_MESSAGE_SIZE": "1000"})
    process.start()
    yield process
    process.stop()


async def test_batches_stay_within_the_broker_s_max_message_size(small_broker):
    async with aio.Client(small_broker.service_url) as client:
        producer = await client.create_producer(
            "small", batching_max_messages=1000, batching_max_publish_delay_ms=1000
        )
        receipts = [producer.send_nowait(b"%03d" % i + b"x" * 97) for i in range(50)]
        await producer.flush()
        ids = [await receipt for receipt in receipts]
        # 100-byte messages under a 1,000-byte limit: at most 10 to an entry.
        per_entry = {}
        for message_id in ids:
            key = (message_id.ledger_id, message_id.entry_id)
            per_entry[key] = per_entry.get(key, 0) + 1
        assert max(per_entry.values()) <= 10 and sum(per_entry.values()) == 50
        reader = await client.create_reader("small", aio.MessageId.earliest)
        values = [(await reader.read_next(5000)).value() for _ in range(50)]
        assert values == [b"%03d" % i + b"x" * 97 for i in range(50)]


async def test_a_transaction_starts_a_new_batch_and_plain_sends_after_it_too(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "switch", batching_max_messages=1000, batching_max_publish_delay_ms=1000
        )
        txn = await client.new_transaction()
        receipts = [
            producer.send_nowait(b"plain-1"),
            producer.send_nowait(b"txn-1", txn=txn),
            producer.send_nowait(b"plain-2"),
        ]
        await producer.flush()
        await txn.commit()
        ids = await asyncio.gather(*(_await(r) for r in receipts))
        entries = [(i.ledger_id, i.entry_id) for i in ids]
        assert len(set(entries)) == 3  # three batches: none mixes a transaction in


async def _await(receipt):
    return await receipt


async def _restart(broker: BrokerProcess) -> None:
    """Start the killed broker again (same data dir and ports), off the event loop so
    clients keep trying meanwhile."""
    await asyncio.to_thread(broker.start)


async def test_sends_continue_across_a_broker_kill_with_no_loss_and_no_duplicate(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("through-kill", batching_max_messages=10)
        name = producer.producer_name
        before = [producer.send_nowait(b"m%03d" % i) for i in range(100)]
        await asyncio.gather(*before[:50])  # some durable; others may be in flight
        broker.kill()
        during = [producer.send_nowait(b"m%03d" % i) for i in range(100, 150)]
        await _restart(broker)
        ids = [await receipt for receipt in before + during]
        assert producer.producer_name == name  # reopened under the broker's name
        reader = await client.create_reader(
            "through-kill", aio.MessageId.earliest, aio.IsolationLevel.READ_UNCOMMITTED
        )
        read = []
        while await reader.has_message_available():
            message = await reader.read_next(5000)
            read.append((message.data(), message.message_id()))
    assert [data for data, _ in read] == [b"m%03d" % i for i in range(150)]
    assert [message_id for _, message_id in read] == ids  # every receipt names its copy


async def test_pending_sends_fail_with_broker_unavailable_once_the_broker_stays_down(broker):
    async with aio.Client(broker.service_url, operation_timeout_seconds=1.0) as client:
        producer = await client.create_producer("stays-down")
        await producer.send(b"first")
        broker.kill()
        started = asyncio.get_running_loop().time()
        with pytest.raises(aio.BrokerUnavailable, match="operation_timeout_seconds"):
            await producer.send(b"second")
        assert 0.9 <= asyncio.get_running_loop().time() - started < 10
        with pytest.raises(aio.BrokerUnavailable):
            producer.send_nowait(b"third")


def _entries(ids) -> list[tuple[int, int]]:
    return [(message_id.ledger_id, message_id.entry_id) for message_id in ids]


async def test_default_batching_ends_a_batch_where_the_partition_key_changes(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("keys", batching_max_publish_delay_ms=1000)
        keys = ["a", "a", "b", "b", None, None, "a", "", ""]
        receipts = [producer.send_nowait(b"m", partition_key=k) for k in keys]
        await producer.flush()
        entries = _entries([await receipt for receipt in receipts])
        # One entry per run of equal keys, in send order ("" is a key; None is none).
        assert entries == sorted(entries)
        runs = [entries[0:2], entries[2:4], entries[4:6], entries[6:7], entries[7:9]]
        assert [len(set(run)) for run in runs] == [1] * 5
        assert len(set(entries)) == 5


async def test_key_based_batching_groups_a_window_s_messages_by_key(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "keys",
            batching_max_publish_delay_ms=1000,
            batching_type=aio.BatchingType.KeyBased,
        )
        keys = ["a", "b", "a", None, "b", "a"]
        receipts = [
            producer.send_nowait(f"{k}{i}".encode(), partition_key=k) for i, k in enumerate(keys)
        ]
        await producer.flush()
        ids = [await receipt for receipt in receipts]
        entry_of = dict(zip(range(len(keys)), _entries(ids), strict=True))
        by_key: dict[str | None, set] = {}
        for index, key in enumerate(keys):
            by_key.setdefault(key, set()).add(entry_of[index])
        assert all(len(entries) == 1 for entries in by_key.values())
        assert len({next(iter(e)) for e in by_key.values()}) == 3
        # Within a key, batch indexes keep send order.
        a_indexes = [ids[i].batch_index for i, k in enumerate(keys) if k == "a"]
        assert a_indexes == [0, 1, 2]
        reader = await client.create_reader("keys", aio.MessageId.earliest)
        got = [await reader.read_next(5000) for _ in keys]
        assert {(m.partition_key(), m.value()) for m in got} == {
            (k, f"{k}{i}".encode()) for i, k in enumerate(keys)
        }


def _count_frames(producer) -> list:
    """Spy on the producer's Produce stream: every request it writes, still written."""
    written = []
    call = producer._call
    write = call.write

    async def spy(request):
        written.append(request)
        await write(request)

    call.write = spy
    return written


async def test_key_based_batching_sends_a_window_s_key_batches_in_one_frame(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "many-keys",
            batching_max_publish_delay_ms=10_000,
            batching_type=aio.BatchingType.KeyBased,
        )
        written = _count_frames(producer)
        keys = [f"k{n}" for n in range(200)]
        sent = [(key, f"{key}-{i}".encode()) for i in range(3) for key in keys]
        receipts = [producer.send_nowait(value, partition_key=key) for key, value in sent]
        await producer.flush()
        ids = [await receipt for receipt in receipts]
        # One frame of 200 entries, one per key, each a sequence id of its own.
        assert [r.WhichOneof("request") for r in written] == ["sends"]
        entries = written[0].sends.sends
        assert [e.partition_key for e in entries] == keys
        assert [e.sequence_id for e in entries] == list(range(200))
        entry_of_key: dict[str, set] = {}
        for (key, _), message_id in zip(sent, ids, strict=True):
            entry_of_key.setdefault(key, set()).add((message_id.ledger_id, message_id.entry_id))
        assert all(len(entries) == 1 for entries in entry_of_key.values())
        assert len({next(iter(e)) for e in entry_of_key.values()}) == 200
        # Within a key, send order.
        assert [ids[i].batch_index for i, (key, _) in enumerate(sent) if key == "k7"] == [0, 1, 2]
        reader = await client.create_reader("many-keys", aio.MessageId.earliest)
        got = [await reader.read_next(5000) for _ in sent]
        by_entry: dict[tuple[int, int], set] = {}
        for message in got:
            message_id = message.message_id()
            by_entry.setdefault((message_id.ledger_id, message_id.entry_id), set()).add(
                message.partition_key()
            )
        assert all(len(keys_in) == 1 for keys_in in by_entry.values())  # an entry: one key
        assert sorted((m.partition_key(), m.value()) for m in got) == sorted(sent)


async def test_key_based_frames_resent_after_a_kill_are_written_once(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer(
            "keys-through-kill", batching_type=aio.BatchingType.KeyBased
        )
        keys = [f"k{n}" for n in range(50)]
        sent = [(keys[i % 50], b"m%04d" % i) for i in range(1000)]
        receipts = [producer.send_nowait(value, partition_key=key) for key, value in sent[:500]]
        await asyncio.gather(*(_await(r) for r in receipts[:50]))
        broker.kill()  # later frames may be written, in flight, or not yet sent
        receipts += [producer.send_nowait(value, partition_key=key) for key, value in sent[500:]]
        await _restart(broker)
        ids = [await receipt for receipt in receipts]
        reader = await client.create_reader(
            "keys-through-kill", aio.MessageId.earliest, aio.IsolationLevel.READ_UNCOMMITTED
        )
        read = []
        while await reader.has_message_available():
            message = await reader.read_next(5000)
            read.append((message.partition_key(), message.value(), message.message_id()))
    assert sorted((key, value) for key, value, _ in read) == sorted(sent)  # none lost, none twice
    assert sorted(message_id for _, _, message_id in read) == sorted(ids)
    for key in keys:  # per key, send order
        assert [v for k, v, _ in read if k == key] == [v for k, v in sent if k == key]
