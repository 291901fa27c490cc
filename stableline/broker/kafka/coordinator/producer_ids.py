"""Kafka producer ids: handed to idempotent and transactional producers, derived for
stableline transactions.

Three disjoint ranges of positive int64, so no two producers a Kafka client can
meet share an id:
- below 2**61, InitProducerId without a transactional id hands out
  (51 random bits, from `secrets`) << 10 | (the broker's Kafka node id, 10 bits):
  never the same on two brokers of a cluster, whose node ids differ, and not
  guessable, so no one can send batches under an id before its producer does (a
  guessed id's sequence numbers could otherwise be taken ahead of it). The id is
  also bound to the role it was handed to: this broker remembers (the latest
  MAX_ISSUED) which role got each id, and a Produce of another role under it is
  refused (api_produce.py); wherever it is not remembered (another broker, after a
  restart), the producer's de-duplication state is kept per role anyway
  (producer_name), so another role's batches under that id never touch it;
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

import secrets
from collections import OrderedDict

from managed_ledger import TxnId

_TRANSACTIONAL_BASE = 1 << 61
_SDK_BASE = 1 << 62
_SEQUENCE_BITS = 40
_COORDINATOR_BITS = 22
SDK_TXN_EPOCH = 0
_NODE_BITS = 10
_NODE_MASK = (1 << _NODE_BITS) - 1
_RANDOM_LIMIT = _TRANSACTIONAL_BASE >> _NODE_BITS
# Ids whose role this broker remembers (about 100 bytes each).
MAX_ISSUED = 100_000


def sdk_txn_producer_id(txn_id: TxnId) -> int:
    """The producer id under which a stableline transaction appears to Kafka clients."""
    coordinator = txn_id.most_bits & ((1 << _COORDINATOR_BITS) - 1)
    sequence = txn_id.least_bits & ((1 << _SEQUENCE_BITS) - 1)
    return _SDK_BASE | coordinator << _SEQUENCE_BITS | sequence


def transactional_producer_id(revision: int) -> int:
    """The producer id of a transactional id, from a metadata store revision."""
    assert 0 < revision < _SDK_BASE - _TRANSACTIONAL_BASE, revision
    return _TRANSACTIONAL_BASE + revision


def producer_name(producer_id: int, epoch: int = 0, role: str = "") -> str:
    """The stableline producer name of an idempotent or transactional Kafka producer
    (de-duplication of its batches is stableline's per-name sequence check). A new
    epoch starts its sequences at 0 again, so it is a producer of its own. With
    authentication on, the sending role is part of the name: each role's batches
    under an id are its own producer, and the "/" keeps the name out of reach of
    gRPC producers, whose names may not hold one (stableline/names.py)."""
    name = f"kafka-{producer_id}" if epoch <= 0 else f"kafka-{producer_id}.{epoch}"
    return f"{name}/{role}" if role else name


class ProducerIdAllocator:
    """Hands out random producer ids below 2**61, unique across the brokers of a
    cluster (by their node ids), and remembers which role got each."""

    def __init__(self, node_id: int = 0, max_issued: int = MAX_ISSUED) -> None:
        assert node_id >= 0, node_id
        self._node = node_id & _NODE_MASK
        self._max_issued = max_issued
        self._issued: OrderedDict[int, str] = OrderedDict()

    def allocate(self, role: str = "") -> int:
        """A new id for `role` ("" with authentication off)."""
        while True:
            producer_id = (secrets.randbelow(_RANDOM_LIMIT - 1) + 1) << _NODE_BITS | self._node
            if producer_id not in self._issued:
                break
        assert 0 < producer_id < _TRANSACTIONAL_BASE, producer_id
        self._issued[producer_id] = role
        while len(self._issued) > self._max_issued:
            self._issued.popitem(last=False)
        return producer_id

    def issued_to(self, producer_id: int) -> str | None:
        """The role this broker gave `producer_id` to; None when it does not know."""
        return self._issued.get(producer_id)
