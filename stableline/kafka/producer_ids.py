"""Kafka producer ids: handed to idempotent producers, derived for SDK transactions.

Two disjoint ranges of positive int64, so no Kafka producer can collide with a
transaction written through the stableline SDK:
- below 2**62, InitProducerId hands out (milliseconds since the epoch << 12) +
  a counter, strictly increasing within a run and across restarts as long as the
  clock does not go back (nothing is stored);
- at and above 2**62, a transaction's own id: 2**62 | (coordinator id, 22 bits)
  << 40 | (the transaction's sequence, 40 bits). A read_committed client ends an
  aborted range only at the abort marker of the same producer id, so every SDK
  transaction is its own producer (epoch 0), and its markers carry that id.
"""

from __future__ import annotations

import time

from managed_ledger import TxnId

_SDK_BASE = 1 << 62
_SEQUENCE_BITS = 40
_COORDINATOR_BITS = 22
SDK_TXN_EPOCH = 0


def sdk_txn_producer_id(txn_id: TxnId) -> int:
    """The producer id under which a stableline transaction appears to Kafka clients."""
    coordinator = txn_id.most_bits & ((1 << _COORDINATOR_BITS) - 1)
    sequence = txn_id.least_bits & ((1 << _SEQUENCE_BITS) - 1)
    return _SDK_BASE | coordinator << _SEQUENCE_BITS | sequence


def producer_name(producer_id: int) -> str:
    """The stableline producer name of an idempotent Kafka producer (de-duplication
    of its batches is stableline's per-name sequence check)."""
    return f"kafka-{producer_id}"


class ProducerIdAllocator:
    """Hands out producer ids below 2**62, increasing, unique across restarts."""

    def __init__(self) -> None:
        self._last = 0

    def allocate(self) -> int:
        candidate = int(time.time() * 1000) << 12
        self._last = max(candidate, self._last + 1)
        assert self._last < _SDK_BASE
        return self._last
