"""The broker-wide budget of bytes queued for ledger writers: appends wait when it
is spent, in arrival order, and every byte comes back."""

from __future__ import annotations

import asyncio

import pytest

from managed_ledger import EntryHeader, ManagedLedger, ManagedLedgerConfig
from managed_ledger.cache import SharedEntryCache
from managed_ledger.write_budget import PendingWriteBudget


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_bytes_that_fit_are_taken_at_once_and_the_rest_wait_for_them():
    budget = PendingWriteBudget(100)
    await budget.take(60)
    waiting = asyncio.create_task(budget.take(60))
    await _settle()
    assert not waiting.done() and budget.waiting == 1 and budget.used_bytes == 60
    budget.give_back(60)
    await waiting
    assert budget.used_bytes == 60 and budget.waits == 1


async def test_an_append_larger_than_the_budget_goes_through_alone():
    budget = PendingWriteBudget(100)
    await budget.take(500)  # nothing queued: it passes
    assert budget.used_bytes == 500
    small = asyncio.create_task(budget.take(1))
    await _settle()
    assert not small.done()
    budget.give_back(500)
    await small


async def test_waiters_are_served_in_arrival_order_so_a_large_one_is_not_starved():
    budget = PendingWriteBudget(100)
    await budget.take(90)
    order: list[str] = []

    async def take(name: str, size: int) -> None:
        await budget.take(size)
        order.append(name)

    large = asyncio.create_task(take("large", 80))
    await _settle()
    smalls = [asyncio.create_task(take(f"small{i}", 5)) for i in range(3)]
    await _settle()
    # 5 bytes would fit beside the 90, but the large waiter came first.
    assert order == [] and budget.used_bytes == 90
    budget.give_back(90)
    await asyncio.gather(large, *smalls)
    assert order == ["large", "small0", "small1", "small2"]
    assert budget.used_bytes == 95


async def test_a_cancelled_waiter_lets_those_behind_it_in():
    budget = PendingWriteBudget(100)
    await budget.take(50)
    large = asyncio.create_task(budget.take(80))
    await _settle()
    small = asyncio.create_task(budget.take(40))
    await _settle()
    assert not small.done()
    large.cancel()
    await small  # 50 + 40 fit once the 80 left the line
    with pytest.raises(asyncio.CancelledError):
        await large
    assert budget.used_bytes == 90 and budget.waiting == 0


async def test_a_waiter_cancelled_as_it_was_let_in_gives_its_bytes_back():
    budget = PendingWriteBudget(100)
    await budget.take(100)
    waiting = asyncio.create_task(budget.take(30))
    await _settle()
    budget.give_back(100)  # grants the waiter...
    waiting.cancel()  # ...which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert budget.used_bytes == 0


async def test_a_reader_waits_for_room_while_the_budget_is_spent_or_has_a_line():
    budget = PendingWriteBudget(100)
    await budget.wait_for_room()  # room: at once
    await budget.take(100)
    reader = asyncio.create_task(budget.wait_for_room())
    behind = asyncio.create_task(budget.take(80))
    await _settle()
    assert not reader.done()
    budget.give_back(100)  # the 80 in line take it; 20 left, nobody waits
    await behind
    await asyncio.wait_for(reader, timeout=5)
    await budget.take(20)  # spent again: a reader cancelled while waiting leaves no trace
    cancelled = asyncio.create_task(budget.wait_for_room())
    await _settle()
    cancelled.cancel()
    budget.give_back(100)
    assert budget.has_room and budget.used_bytes == 0


# ---------------------------------------------------------------- ledgers sharing one


def _header(i: int) -> EntryHeader:
    return EntryHeader(sequence_id=i, producer_name="p")


async def _open(harness, name: str, shared: SharedEntryCache, budget: PendingWriteBudget):
    ledger = await ManagedLedger.open(
        name,
        harness.root / name,
        harness.open_store(),
        ManagedLedgerConfig(fsync=False),
        entry_cache=shared,
        write_budget=budget,
    )
    harness.opened.append(ledger)
    return ledger


async def test_ledgers_sharing_a_small_budget_all_finish_and_give_every_byte_back(harness):
    """Ten topics append at once through a budget smaller than one entry each: they
    wait for each other and none is left waiting (no deadlock, no starvation)."""
    payload = b"x" * 1000
    budget = PendingWriteBudget(len(payload))
    shared = SharedEntryCache(64 * 1024)
    ledgers = [await _open(harness, f"t{i}", shared, budget) for i in range(10)]
    results = await asyncio.wait_for(
        asyncio.gather(
            *(ledger.append(_header(i), payload) for ledger in ledgers for i in range(20))
        ),
        timeout=30,
    )
    assert len(results) == 200 and budget.waits > 0
    assert budget.used_bytes == 0 and budget.waiting == 0
    assert all(ledger.idle for ledger in ledgers)
    assert [len(ledger.read(ledger.first_position(), 100)) for ledger in ledgers] == [20] * 10
    assert shared.size_bytes <= shared.max_bytes
    for ledger in ledgers:
        await ledger.close()
    assert (shared.size_bytes, len(shared)) == (0, 0)


async def test_a_ledger_waits_while_another_holds_the_budget_and_is_not_idle(harness):
    budget = PendingWriteBudget(1)
    shared = SharedEntryCache(64 * 1024)
    first = await _open(harness, "first", shared, budget)
    second = await _open(harness, "second", shared, budget)
    # Taken as if the first topic's writer held it: the second topic's append waits.
    await budget.take(1)
    waiting = asyncio.create_task(second.append(_header(0), b"y"))
    await _settle()
    assert not waiting.done() and not second.idle  # an unload must not close it now
    budget.give_back(1)
    await asyncio.wait_for(waiting, timeout=10)
    await first.append(_header(1), b"z")
    assert budget.used_bytes == 0 and second.idle


async def test_a_ledger_closed_while_its_append_waits_refuses_it_and_returns_the_bytes(
    harness,
):
    from managed_ledger import LedgerClosedError

    budget = PendingWriteBudget(1)
    ledger = await _open(harness, "t", SharedEntryCache(1024), budget)
    await budget.take(1)
    waiting = asyncio.create_task(ledger.append(_header(0), b"y"))
    await _settle()
    await ledger.close()
    budget.give_back(1)
    with pytest.raises(LedgerClosedError):
        await waiting
    assert budget.used_bytes == 0 and ledger._pending_bytes == 0
