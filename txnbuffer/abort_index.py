"""Kafka-style index of aborted transactions, one list per ledger.

Each aborted transaction is recorded in the ledger that holds its abort marker,
with the stable position (maxReadPosition) right after the abort. A range query
scans ledger indexes from the first ledger that can matter and stops early, as
Kafka's fetch does: once an abort's stable position reaches the end of the range,
every later abort belongs to a transaction that started after the range.
Ledgers are flagged when their index is empty (KIP-1058), so readers skip them.
A ledger's list loaded from a snapshot stays in its stored form until a query
or retention first needs it, so recovery does not build every abort up front.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from sortedcontainers import SortedDict

from managed_ledger import Position, TxnId


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    txn_id: TxnId
    first_position: Position
    marker_position: Position
    max_read_position_after: Position


class AbortIndex:
    def __init__(self) -> None:
        # ledger id -> aborts whose marker lies in that ledger, in marker order.
        self._by_ledger: SortedDict[int, list[AbortedTxn]] = SortedDict()
        # ledger id -> (stored records in marker order, their decoder): not built yet.
        self._stored: dict[int, tuple[list[bytes], Callable[[bytes], AbortedTxn]]] = {}
        self.index_lookups = 0
        self.empty_ledgers_skipped = 0

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_ledger.values()) + sum(
            len(records) for records, _ in self._stored.values()
        )

    def add(self, aborted: AbortedTxn) -> None:
        ledger_id = aborted.marker_position.ledger_id
        entries = self._entries(ledger_id)
        if entries is None:
            entries = self._by_ledger[ledger_id] = []  # created lazily
        assert not entries or entries[-1].marker_position < aborted.marker_position
        entries.append(aborted)

    def add_stored(
        self, ledger_id: int, records: list[bytes], decode: Callable[[bytes], AbortedTxn]
    ) -> None:
        """A ledger's aborts as stored (in marker order), decoded when first needed."""
        assert ledger_id not in self._by_ledger and ledger_id not in self._stored, ledger_id
        if records:
            self._by_ledger[ledger_id] = []
            self._stored[ledger_id] = (records, decode)

    def _entries(self, ledger_id: int) -> list[AbortedTxn] | None:
        stored = self._stored.pop(ledger_id, None)
        if stored is not None:
            records, decode = stored
            entries = self._by_ledger[ledger_id] = [decode(record) for record in records]
            assert all(a.marker_position.ledger_id == ledger_id for a in entries), ledger_id
            assert all(
                a.marker_position < b.marker_position for a, b in itertools.pairwise(entries)
            )
            return entries
        return self._by_ledger.get(ledger_id)

    def in_ledger(self, ledger_id: int) -> list[AbortedTxn]:
        """The aborts whose marker lies in this ledger, in marker order."""
        return list(self._entries(ledger_id) or ())

    def txn_index_empty(self, ledger_id: int) -> bool:
        """True when no abort marker lies in this ledger (KIP-1058's txnIdxEmpty)."""
        return not self._by_ledger.get(ledger_id) and ledger_id not in self._stored

    def drop_ledger(self, ledger_id: int) -> list[AbortedTxn]:
        """Retention deleted the ledger: forget the aborts whose markers it held."""
        entries = self._entries(ledger_id) or []
        self._by_ledger.pop(ledger_id, None)
        return entries

    def overlapping(
        self, start: Position, end: Position, ledger_ids: list[int]
    ) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end], ordered by first position.

        ledger_ids: the topic's ledgers from start's ledger on, in order; ledgers
        whose index is empty are skipped without a lookup.
        """
        found: list[AbortedTxn] = []
        for ledger_id in ledger_ids:
            if ledger_id < start.ledger_id:
                continue
            if self.txn_index_empty(ledger_id):
                self.empty_ledgers_skipped += 1
                continue
            self.index_lookups += 1
            complete = False
            entries = self._entries(ledger_id)
            # Aborts whose marker lies before the range cannot overlap it: bisect past them
            # and index from there (islice would step through every skipped one).
            first = bisect.bisect_left(entries, start, key=attrgetter("marker_position"))
            for index in range(first, len(entries)):
                aborted = entries[index]
                if aborted.first_position <= end:
                    found.append(aborted)
                if aborted.max_read_position_after >= end:
                    complete = True
                    break
            if complete:
                break
        found.sort(key=lambda a: a.first_position)
        return found

    def all(self) -> list[AbortedTxn]:
        return [
            aborted for ledger_id in list(self._by_ledger) for aborted in self._entries(ledger_id)
        ]
