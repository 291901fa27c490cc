"""Producer batches: one payload, one count, one future for all their messages."""

from __future__ import annotations

import asyncio

from stableline._proto import broker_pb2 as pb
from stableline._types import MessageId
from stableline.aio._batch import Batch, SendReceipt, frames
from stableline.wire import plain_prefix


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


async def test_a_receipt_calls_back_with_itself_once_its_batch_is_durable_or_failed():
    loop = asyncio.get_running_loop()
    durable, failing = loop.create_future(), loop.create_future()
    called: list[tuple[object, BaseException | None]] = []
    for receipt in (SendReceipt(durable, 1), SendReceipt(failing, 0)):
        receipt.add_done_callback(
            lambda done: called.append(
                (done.result() if done.exception() is None else None, done.exception())
            )
        )
    durable.set_result((4, 11))
    failure = OSError("disk full")
    failing.set_exception(failure)
    await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    assert called == [(MessageId(4, 11, 1), None), (None, failure)]
    assert not SendReceipt(durable, 0).cancelled()


def test_a_keyed_batch_sends_its_key_and_a_keyless_one_sends_none():
    loop = asyncio.new_event_loop()
    try:
        keyed = Batch(None, loop.create_future(), key="").to_send(1, "p").send
        keyless = Batch(None, loop.create_future()).to_send(2, "p").send
    finally:
        loop.close()
    assert (keyed.has_partition_key, keyed.partition_key) == (True, "")
    assert not keyless.has_partition_key


def test_batches_sent_together_fill_frames_up_to_a_byte_limit_in_sequence_order():
    loop = asyncio.new_event_loop()
    try:
        batches = []
        for sequence_id, key in enumerate("abcde", start=10):
            batch = Batch(None, loop.create_future(), key=key)
            batch.parts += [plain_prefix(40), b"x" * 40]
            batch.count, batch.size_bytes = 1, 42
            batches.append((sequence_id, batch))
        entry = batches[0][1].to_proto(10, "p").ByteSize() + 6  # as framed, with its tag
        cut = frames(batches, "p", max_bytes=2 * entry + 5)
        alone = frames(batches[:1], "p", max_bytes=entry)
    finally:
        loop.close()
    # Two entries to a frame by their encoded size, in sequence order.
    assert [ids for ids, _ in cut] == [(10, 11), (12, 13), (14,)]
    assert all(request.ByteSize() <= 2 * entry + 5 for _, request in cut)
    first = cut[0][1].sends.sends
    assert [(s.sequence_id, s.metadata.sequence_id, s.partition_key) for s in first] == [
        (10, 10, "a"),
        (11, 11, "b"),
    ]
    assert all(s.has_partition_key for s in first)
    # The last frame, and a batch on its own, go as a plain send.
    assert cut[2][1].WhichOneof("request") == "send" and cut[2][1].send.sequence_id == 14
    assert alone[0][1].WhichOneof("request") == "send"


def test_frames_of_many_small_keyed_entries_stay_under_the_byte_limit_as_encoded():
    """Keys, names and sequence ids outweigh 20-byte payloads: counting payload bytes
    alone made one 10 MB frame of 100,000 keyed entries, past the broker's limit."""
    loop = asyncio.new_event_loop()
    try:
        batches = []
        for sequence_id in range(20_000):
            batch = Batch(None, loop.create_future(), key=f"customer-{sequence_id:08d}")
            batch.parts += [plain_prefix(20), b"x" * 20]
            batch.count, batch.size_bytes = 1, 22
            batches.append((sequence_id, batch))
        limit = 256 * 1024
        cut = frames(batches, "a-producer-name", max_bytes=limit)
    finally:
        loop.close()
    assert all(request.ByteSize() <= limit for _, request in cut)
    assert [i for ids, _ in cut for i in ids] == list(range(20_000))
