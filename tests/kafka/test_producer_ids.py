"""Kafka producer ids: the three ranges stay apart, and idempotent producer ids handed
out by two brokers of a cluster never meet."""

from __future__ import annotations

from managed_ledger import TxnId
from stableline.kafka.producer_ids import (
    ProducerIdAllocator,
    producer_name,
    sdk_txn_producer_id,
    transactional_producer_id,
)


class FrozenClock:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds


def test_two_brokers_in_the_same_millisecond_hand_out_different_ids() -> None:
    clock = FrozenClock(1_800_000_000.0)
    first, second = ProducerIdAllocator(0, clock), ProducerIdAllocator(1, clock)
    ids_first = [first.allocate() for _ in range(100)]
    ids_second = [second.allocate() for _ in range(100)]
    assert not set(ids_first) & set(ids_second)


def test_ids_increase_past_a_thousand_in_one_millisecond_and_a_clock_going_back() -> None:
    clock = FrozenClock(1_800_000_000.0)
    allocator = ProducerIdAllocator(3, clock)
    ids = [allocator.allocate() for _ in range(3_000)]
    clock.seconds -= 5.0
    ids += [allocator.allocate() for _ in range(10)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    other = ProducerIdAllocator(4, FrozenClock(1_800_000_000.0))
    # Borrowing later milliseconds shifts into the time bits, never into the node's.
    assert not set(ids) & {other.allocate() for _ in range(3_000)}


def test_a_restart_later_starts_above_what_was_handed_out() -> None:
    before = ProducerIdAllocator(2, FrozenClock(1_800_000_000.0))
    last = [before.allocate() for _ in range(500)][-1]
    after = ProducerIdAllocator(2, FrozenClock(1_800_000_000.002))
    assert after.allocate() > last


def test_the_three_ranges_do_not_meet() -> None:
    idempotent = ProducerIdAllocator(1023).allocate()
    transactional = transactional_producer_id(1)
    sdk = sdk_txn_producer_id(TxnId(0, 1))
    assert 0 < idempotent < transactional < sdk < 2**63
    assert producer_name(idempotent) != producer_name(idempotent, 1)
