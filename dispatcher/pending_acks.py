"""Batch indexes acknowledged in open transactions, per entry (a subscription's pending acks).

A transactional ack takes effect only when its transaction commits; until then the
messages it names are held here, one set of batch indexes per transaction per entry
(as Pulsar's pending-ack handle keeps an ack set per position). Promises:
- Two open transactions may hold disjoint indexes of one entry; an index is held by
  at most one transaction (`check` refuses an overlap before anything changes).
- Ending a transaction gives back exactly the indexes it held, nothing else.
- `returned`: indexes an abort gave back while the entry was outstanding to a
  consumer whose delivery no longer included them; they go out again once that
  delivery ends, never alongside it.
- Memory is O(entries with a held or returned index); an entry with neither is
  forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.errors import TransactionConflictError
from managed_ledger import Position, TxnId


@dataclass(slots=True)
class EntryPendingAcks:
    """What of one entry is held by open transactions, or was given back by an abort
    while the entry was outstanding."""

    by_txn: dict[TxnId, set[int]] = field(default_factory=dict)
    returned: set[int] = field(default_factory=set)

    def held(self) -> set[int]:
        """Every index held by an open transaction (not a copy: read it, never change it)."""
        if len(self.by_txn) == 1:
            return next(iter(self.by_txn.values()))
        return set().union(*self.by_txn.values())


class PendingAcks:
    def __init__(self) -> None:
        # Read directly on the dispatch path (`position in entries`): one dict look-up.
        self.entries: dict[Position, EntryPendingAcks] = {}

    def __bool__(self) -> bool:
        return any(record.by_txn for record in self.entries.values())

    def held(self, position: Position) -> set[int]:
        record = self.entries.get(position)
        return record.held() if record is not None else set()

    def held_by(self, txn_id: TxnId, position: Position) -> set[int]:
        record = self.entries.get(position)
        return record.by_txn.get(txn_id, set()) if record is not None else set()

    def returned(self, position: Position) -> set[int]:
        record = self.entries.get(position)
        return record.returned if record is not None else set()

    def check(self, txn_id: TxnId, position: Position, batch_index: int, indexes: set[int]) -> None:
        """Refuse (TransactionConflictError) indexes another transaction holds, or this
        one holds already: committing them could commit a second copy's output."""
        record = self.entries.get(position)
        if record is None:
            return
        for holder, taken in record.by_txn.items():
            if taken & indexes:
                if holder != txn_id:
                    raise TransactionConflictError(
                        f"message {position}:{batch_index} is acknowledged in open "
                        f"transaction {holder}"
                    )
                raise already_in_transaction(txn_id, position, batch_index)

    def hold(self, txn_id: TxnId, position: Position, indexes: set[int]) -> None:
        assert indexes, position
        record = self.entries.get(position)
        if record is None:
            record = self.entries[position] = EntryPendingAcks()
        for holder, taken in record.by_txn.items():
            assert holder == txn_id or not taken & indexes, (position, holder, txn_id)
        record.by_txn.setdefault(txn_id, set()).update(indexes)
        record.returned -= indexes

    def release(self, txn_id: TxnId, position: Position, indexes: set[int]) -> None:
        """txn_id no longer holds these indexes (its ack of them was not recorded)."""
        record = self.entries[position]
        taken = record.by_txn[txn_id]
        taken -= indexes
        if not taken:
            del record.by_txn[txn_id]
        if not record.by_txn and not record.returned:
            del self.entries[position]

    def end(self, txn_id: TxnId, position: Position) -> set[int] | None:
        """The indexes txn_id held in the entry, no longer held (None: it held none)."""
        record = self.entries.get(position)
        if record is None:
            return None
        indexes = record.by_txn.pop(txn_id, None)
        if not record.by_txn and not record.returned:
            del self.entries[position]
        return indexes

    def give_back(self, position: Position, indexes: set[int]) -> None:
        """An abort gave these back while the entry is outstanding (see `returned`)."""
        record = self.entries.get(position)
        if record is None:
            record = self.entries[position] = EntryPendingAcks()
        record.returned |= indexes

    def take_returned(self, position: Position) -> None:
        """The entry goes out again (or is acknowledged): what was given back goes with it."""
        record = self.entries.get(position)
        if record is not None and record.returned:
            record.returned = set()
            if not record.by_txn:
                del self.entries[position]

    def forget(self, position: Position) -> None:
        """The entry is acknowledged whole: nothing of it is pending any more."""
        self.entries.pop(position, None)

    def forget_returned_upto(self, upto: Position) -> None:
        """A cumulative ack passed these entries: what aborts gave back of them is acked."""
        for position in [p for p, record in self.entries.items() if p <= upto and record.returned]:
            self.take_returned(position)

    def forget_returned(self) -> None:
        """No entry is outstanding any more (a seek): nothing waits for a delivery's end."""
        for position in [p for p, record in self.entries.items() if record.returned]:
            self.take_returned(position)


def already_in_transaction(
    txn_id: TxnId, position: Position, batch_index: int
) -> TransactionConflictError:
    return TransactionConflictError(
        f"message {position}:{batch_index} is already acknowledged in transaction {txn_id}; "
        "a second copy of it may have been processed: abort the transaction"
    )
