"""LogReadView: the READ_UNCOMMITTED view of a real ledger (bound = LAC, markers skipped)."""

from __future__ import annotations

import pytest

from dispatcher import LogReadView
from managed_ledger import Entry, EntryHeader, EntryType, Position, TxnId


async def test_log_read_view_bound_is_the_last_add_confirmed(ledger):
    view = LogReadView(ledger)
    assert view.bound() == ledger.last_confirmed
    assert view.bound() < Position(ledger.current_ledger_id, 0)

    first = await ledger.append(EntryHeader(), b"a")
    assert view.bound() == first
    second = await ledger.append(EntryHeader(), b"b")
    assert view.bound() == second


@pytest.mark.parametrize("marker", [EntryType.TXN_COMMIT, EntryType.TXN_ABORT])
def test_log_read_view_skips_markers(marker):
    view = LogReadView(ledger=None)
    entry = Entry(Position(0, 0), EntryHeader(type=marker, txn_id=TxnId(1, 7)), b"")
    assert view.should_skip(entry)


@pytest.mark.parametrize("txn", [None, TxnId(1, 7)])
def test_log_read_view_delivers_data_entries_transactional_or_not(txn):
    view = LogReadView(ledger=None)
    entry = Entry(Position(0, 0), EntryHeader(num_messages=3, txn_id=txn), b"x")
    assert not view.should_skip(entry)
