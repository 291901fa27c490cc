"""Kafka producer ids: the three ranges stay apart, idempotent producer ids are
random (not guessable) and never meet across the brokers of a cluster, and each is
bound to the role that got it."""

from __future__ import annotations

import itertools

import pytest

from managed_ledger import TxnId
from stableline.broker.kafka.coordinator.producer_ids import (
    ProducerIdAllocator,
    producer_name,
    sdk_txn_producer_id,
    transactional_producer_id,
)
from stableline.names import InvalidNameError, check_name


def test_ids_are_random_and_two_brokers_never_hand_out_the_same() -> None:
    first, second = ProducerIdAllocator(0), ProducerIdAllocator(1)
    ids_first = [first.allocate() for _ in range(1000)]
    ids_second = [second.allocate() for _ in range(1000)]
    assert not set(ids_first) & set(ids_second)
    assert len(set(ids_first)) == 1000
    # Not counted from a clock: consecutive ids are far apart, in no order.
    assert ids_first != sorted(ids_first)
    assert min(abs(a - b) for a, b in itertools.pairwise(ids_first)) > 1 << 20


def test_an_id_is_bound_to_the_role_that_got_it_while_remembered() -> None:
    allocator = ProducerIdAllocator(2, max_issued=3)
    alice = allocator.allocate("alice")
    assert allocator.issued_to(alice) == "alice"
    assert allocator.issued_to(alice + 1) is None
    for _ in range(3):
        allocator.allocate("bob")
    assert allocator.issued_to(alice) is None  # forgotten: bounded memory


def test_the_three_ranges_do_not_meet() -> None:
    allocator = ProducerIdAllocator(1023)
    for _ in range(1000):
        assert 0 < allocator.allocate() < transactional_producer_id(1)
    transactional = transactional_producer_id(1)
    sdk = sdk_txn_producer_id(TxnId(0, 1))
    assert transactional < sdk < 2**63


def test_each_role_and_epoch_is_a_producer_of_its_own_no_grpc_name_can_take() -> None:
    names = {
        producer_name(7),
        producer_name(7, 1),
        producer_name(7, 0, "alice"),
        producer_name(7, 0, "bob"),
        producer_name(7, 1, "alice"),
    }
    assert len(names) == 5
    assert producer_name(7) == "kafka-7"  # authentication off: as before
    with pytest.raises(InvalidNameError):  # what a gRPC producer's name must pass
        check_name("producer", producer_name(7, 0, "alice"))
