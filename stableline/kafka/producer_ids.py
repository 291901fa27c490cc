"""Kafka producer ids: handed to idempotent and transactional producers, derived for
stableline transactions.

Three disjoint ranges of positive int64, so no two producers a Kafka client can
meet share an id:
- below 2**61, InitProducerId without a transactional id hands out
  (milliseconds since 2024 << 20) | (the broker's Kafka node id, 10 bits) << 10 |
  (a counter, 10 bits): strictly increasing on each broker within a run and across
  restarts as long as the clock does not go back (nothing is stored), and never the
  same on two brokers of a cluster, whose node ids differ (two idempotent producers
  with one id would have each other's batches taken for retries);
- from 2**61, a transactional id's producer id: 2**61 + a revision of the cluster's
  metadata store (transactional_ids.py), unique in that store, kept with the id;
- at and above 2**62, a stableline transaction's own id: 2**62 | (coordinator id,
  22 bits) << 40 | (the transaction's sequence, 40 bits). This is the id every
  transactional entry and marker carries in a Fetch, whoever wrote it (a Kafka
  transactional producer or the stableline SDK): a read_committed client ends an
  aborted range only at the abort marker of the producer id the aborted-transactions
  list names, so data batches, markers and that list must agree, and one id per
  stableline transaction (epoch 0) is what they can all derive from the TxnId.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from managed_ledger import TxnId

_TRANSACTIONAL_BASE = 1 << 61
_SDK_BASE = 1 << 62
_SEQUENCE_BITS = 40
_COORDINATOR_BITS = 22
SDK_TXN_EPOCH = 0
_ALLOCATOR_EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
_COUNTER_BITS = 10
_COUNTER_MASK = (1 << _COUNTER_BITS) - 1
_NODE_MASK = (1 << 10) - 1
_ALLOCATOR_SHIFT = 20


def sdk_txn_producer_id(txn_id: TxnId) -> int:
    """The producer id under which a stableline transaction appears to Kafka clients."""
    coordinator = txn_id.most_bits & ((1 << _COORDINATOR_BITS) - 1)
    sequence = txn_id.least_bits & ((1 << _SEQUENCE_BITS) - 1)
    return _SDK_BASE | coordinator << _SEQUENCE_BITS | sequence


def transactional_producer_id(revision: int) -> int:
    """The producer id of a transactional id, from a metadata store revision."""
    assert 0 < revision < _SDK_BASE - _TRANSACTIONAL_BASE, revision
    return _TRANSACTIONAL_BASE + revision


def producer_name(producer_id: int, epoch: int = 0) -> str:
    """The stableline producer name of an idempotent or transactional Kafka producer
    (de-duplication of its batches is stableline's per-name sequence check). A new
    epoch starts its sequences at 0 again, so it is a producer of its own."""
    if epoch <= 0:
        return f"kafka-{producer_id}"
    return f"kafka-{producer_id}.{epoch}"


class ProducerIdAllocator:
    """Hands out producer ids below 2**61, increasing, unique across restarts and
    across the brokers of a cluster (by their node ids)."""

    def __init__(self, node_id: int = 0, clock: Callable[[], float] = time.time) -> None:
        assert node_id >= 0, node_id
        self._node = node_id & _NODE_MASK
        self._clock = clock
        self._millis = 0
        self._counter = 0

    def allocate(self) -> int:
        millis = max(int(self._clock() * 1000) - _ALLOCATOR_EPOCH_MS, self._millis)
        if millis == self._millis:
            self._counter += 1
            if self._counter > _COUNTER_MASK:
                # More than 1,024 in one millisecond: borrow the next one.
                millis, self._counter = millis + 1, 0
        else:
            self._counter = 0
        self._millis = millis
        producer_id = millis << _ALLOCATOR_SHIFT | self._node << _COUNTER_BITS | self._counter
        assert 0 < producer_id < _TRANSACTIONAL_BASE, producer_id
        return producer_id
