"""stableline/perf/consumer.py: transaction headers are counted exactly, per run where it can."""

from __future__ import annotations

from stableline._proto import broker_pb2 as pb
from stableline._types import DeliveredEntry, Messages
from stableline.perf.consumer import transaction_headers
from stableline.perf.producer import payload
from stableline.perf.workload import KIND_ABORT, KIND_COMMIT

FILLER = b"x" * 20


def _entry(entry_id: int, payloads: list[bytes]) -> DeliveredEntry:
    return DeliveredEntry.of(
        "persistent://public/default/t",
        pb.EntryDelivery(
            ledger_id=3,
            entry_id=entry_id,
            metadata=pb.EntryMetadata(num_messages=len(payloads)),
            payload=pb.MessageBatch(
                messages=[pb.SingleMessage(payload=p) for p in payloads]
            ).SerializeToString(),
        ),
    )


def _header(key: int, kind: int) -> bytes:
    return key.to_bytes(8, "little") + bytes([kind])


def test_a_run_of_one_transaction_counts_every_message_under_its_header():
    committed = _entry(1, [payload(stamp, 7, KIND_COMMIT, FILLER) for stamp in range(5)])
    aborted = _entry(2, [payload(stamp, 8, KIND_ABORT, FILLER) for stamp in range(3)])
    counts = transaction_headers(Messages([(committed, range(1, 5)), (aborted, range(3))]))
    assert counts == {_header(7, KIND_COMMIT): 4, _header(8, KIND_ABORT): 3}


def test_a_run_whose_ends_differ_is_read_message_by_message():
    # Not what a producer writes (an entry holds one transaction), but counted right.
    mixed = [payload(0, 7, KIND_COMMIT, FILLER)] * 3 + [payload(0, 9, KIND_ABORT, FILLER)]
    counts = transaction_headers(Messages([(_entry(1, mixed), range(4))]))
    assert counts == {_header(7, KIND_COMMIT): 3, _header(9, KIND_ABORT): 1}
