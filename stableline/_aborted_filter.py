"""Kafka's consumer-side filter for READ_COMMITTED pull reads.

A Fetch at READ_COMMITTED returns entries up to the stable position plus the
aborted transactions that overlap them, each with its first position. The
filter keeps those in a min-heap by first position and moves one into the
active set once reading passes its first entry; an entry is dropped when its
transaction is active. Feed it every response's list, and entries in log order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from stableline._proto import broker_pb2 as pb


class AbortedFilter:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, int]] = []
        self._active: set[tuple[int, int]] = set()
        self._seen: set[tuple[int, int]] = set()

    def add(self, aborted: Iterable[pb.AbortedTxn]) -> None:
        for txn in aborted:
            key = (txn.txn_id.most_bits, txn.txn_id.least_bits)
            if key not in self._seen:
                self._seen.add(key)
                first = txn.first_position
                heapq.heappush(self._heap, (first.ledger_id, first.entry_id, *key))

    def is_aborted(self, entry: pb.EntryDelivery) -> bool:
        heap = self._heap
        while heap and (heap[0][0], heap[0][1]) <= (entry.ledger_id, entry.entry_id):
            _ledger, _entry, most, least = heapq.heappop(heap)
            self._active.add((most, least))
        if not self._active or not entry.metadata.HasField("txn_id"):
            return False
        txn = entry.metadata.txn_id
        return (txn.most_bits, txn.least_bits) in self._active
