"""Durable cursors: acknowledgement rules and what survives a reopen."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import managed_ledger.cursor as cursor_module
from managed_ledger import (
    EntryHeader,
    ManagedCursor,
    ManagedLedger,
    ManagedLedgerConfig,
    Position,
)

# Cursor positions reach the store on close (or when a test lets the timer run).
CONFIG = ManagedLedgerConfig(fsync=False, cursor_flush_interval_s=3600.0)
PROPERTIES = {"type": "Shared", "isolation": "READ_COMMITTED"}


async def with_entries(harness, count: int, config=CONFIG) -> tuple[ManagedLedger, list[Position]]:
    ledger = await harness.open(config)
    positions = [
        await ledger.append(EntryHeader(sequence_id=i), f"entry-{i}".encode()) for i in range(count)
    ]
    return ledger, positions


def state(cursor) -> tuple[Position, list[Position], dict[str, str]]:
    return cursor.mark_delete, list(cursor.individually_acked), cursor.properties


# ---------------------------------------------------------------- opening


async def test_cursor_at_earliest_starts_before_the_first_entry(harness):
    ledger, positions = await with_entries(harness, 3)
    cursor, created = ledger.open_cursor("c", start_at_earliest=True)
    assert created
    assert cursor.mark_delete < positions[0]
    assert cursor.read_position == positions[0]
    assert cursor.backlog == 3


async def test_cursor_at_latest_starts_at_the_lac(harness):
    ledger, positions = await with_entries(harness, 3)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=False)
    assert cursor.mark_delete == positions[-1] == ledger.last_confirmed
    assert cursor.backlog == 0


async def test_opening_an_existing_cursor_returns_it_unchanged(harness):
    ledger, positions = await with_entries(harness, 3)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True, properties=PROPERTIES)
    cursor.ack([positions[0]])
    again, created = ledger.open_cursor("c", start_at_earliest=False, properties={"x": "y"})
    assert again is cursor and not created
    assert state(again) == (positions[0], [], PROPERTIES)


# ---------------------------------------------------------------- acknowledgements


async def test_acks_in_order_move_mark_delete(harness):
    ledger, positions = await with_entries(harness, 3)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    assert cursor.ack([positions[0], positions[1]]) == 2
    assert state(cursor)[:2] == (positions[1], [])
    assert cursor.backlog == 1


async def test_acks_above_a_gap_stay_individual_until_the_gap_is_filled(harness):
    ledger, positions = await with_entries(harness, 5)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[1], positions[3]])
    assert cursor.mark_delete < positions[0]
    assert list(cursor.individually_acked) == [positions[1], positions[3]]
    assert cursor.is_acked(positions[1]) and not cursor.is_acked(positions[2])
    assert cursor.backlog == 3
    cursor.ack([positions[0]])
    assert state(cursor)[:2] == (positions[1], [positions[3]])
    cursor.ack([positions[2]])
    assert state(cursor)[:2] == (positions[3], [])


async def test_acking_an_acknowledged_position_again_changes_nothing(harness):
    ledger, positions = await with_entries(harness, 3)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[0], positions[2]])
    assert cursor.ack([positions[0], positions[2]]) == 0
    assert state(cursor)[:2] == (positions[0], [positions[2]])


async def test_mark_delete_moves_across_a_ledger_boundary(harness):
    config = ManagedLedgerConfig(
        fsync=False, max_entries_per_ledger=2, cursor_flush_interval_s=3600.0
    )
    ledger, positions = await with_entries(harness, 4, config)
    assert positions[2].ledger_id == positions[1].ledger_id + 1
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[2], positions[1]])
    assert cursor.mark_delete < positions[0]
    assert list(cursor.individually_acked) == [positions[1], positions[2]]
    cursor.ack([positions[0]])
    assert state(cursor)[:2] == (positions[2], [])


async def test_in_order_acks_cross_ledgers_and_a_skipped_entry_still_holds_them_back(harness):
    config = ManagedLedgerConfig(
        fsync=False, max_entries_per_ledger=2, cursor_flush_interval_s=3600.0
    )
    ledger, positions = await with_entries(harness, 6, config)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    assert cursor.ack(positions[:3]) == 3  # 0, 1 | 2: the next entry is in the next ledger
    assert state(cursor)[:2] == (positions[2], [])
    assert cursor.ack([positions[4], positions[5]]) == 2  # entry 3 not acknowledged
    assert state(cursor)[:2] == (positions[2], [positions[4], positions[5]])
    cursor.ack([positions[3]])
    assert state(cursor)[:2] == (positions[5], [])


async def test_cumulative_ack_drops_individual_acks_at_or_below_it(harness):
    ledger, positions = await with_entries(harness, 6)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[2], positions[5]])
    cursor.ack_cumulative(positions[3])
    assert state(cursor)[:2] == (positions[3], [positions[5]])
    cursor.ack_cumulative(positions[1])  # behind mark-delete: ignored
    assert cursor.mark_delete == positions[3]
    cursor.ack([positions[4]])
    assert state(cursor)[:2] == (positions[5], [])


async def test_reset_makes_later_entries_unacknowledged_again(harness):
    ledger, positions = await with_entries(harness, 4)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[2])
    cursor.ack([positions[3]])
    cursor.reset(positions[0])
    assert state(cursor)[:2] == (positions[0], [])
    assert cursor.read_position == positions[1]
    assert cursor.backlog == 3


# ---------------------------------------------------------------- persistence


async def test_mark_delete_position_persists_across_reopen(harness):
    ledger, positions = await with_entries(harness, 5)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[2])
    reopened = await harness.reopen(ledger, CONFIG)
    restored = reopened.cursors["c"]
    assert restored.mark_delete == positions[2]
    assert restored.read_position == positions[3]
    assert restored.backlog == 2


async def test_individually_acked_positions_persist_across_reopen(harness):
    ledger, positions = await with_entries(harness, 8)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[0], positions[2], positions[3], positions[6]])
    expected = state(cursor)
    assert expected[:2] == (positions[0], [positions[2], positions[3], positions[6]])
    reopened = await harness.reopen(ledger, CONFIG)
    restored = reopened.cursors["c"]
    assert state(restored) == expected
    assert not restored.is_acked(positions[1]) and restored.is_acked(positions[3])
    assert restored.backlog == 4
    # Filling the gap after the reopen still collapses the acked run.
    restored.ack([positions[1]])
    assert state(restored)[:2] == (positions[3], [positions[6]])


async def test_properties_persist_across_reopen(harness):
    ledger, _ = await with_entries(harness, 1)
    ledger.open_cursor("c", start_at_earliest=True, properties=PROPERTIES)
    reopened = await harness.reopen(ledger, CONFIG)
    assert reopened.cursors["c"].properties == PROPERTIES


async def test_every_cursor_of_a_topic_is_restored_with_its_own_state(harness):
    ledger, positions = await with_entries(harness, 4)
    a, _ = ledger.open_cursor("a", start_at_earliest=True, properties={"type": "Exclusive"})
    b, _ = ledger.open_cursor("b", start_at_earliest=True, properties={"type": "Shared"})
    a.ack_cumulative(positions[3])
    b.ack([positions[1]])
    expected = {"a": state(a), "b": state(b)}
    reopened = await harness.reopen(ledger, CONFIG)
    assert {name: state(cursor) for name, cursor in reopened.cursors.items()} == expected


async def test_cursor_state_flushed_in_the_background_survives_a_crash(harness, monkeypatch):
    config = ManagedLedgerConfig(fsync=False, cursor_flush_interval_s=0.0)
    ledger, positions = await with_entries(harness, 4, config)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True, properties=PROPERTIES)
    store = harness.open_store()
    flushed = asyncio.Event()
    write_many = store.write_many

    def spy(*args, **kwargs):
        write_many(*args, **kwargs)
        flushed.set()

    monkeypatch.setattr(store, "write_many", spy)
    cursor.ack([positions[0], positions[2]])
    await asyncio.wait_for(flushed.wait(), 5)
    expected = state(cursor)
    reopened = await harness.crash_and_reopen(ledger, config)
    assert state(reopened.cursors["c"]) == expected


async def test_acked_positions_beyond_the_persisted_limit_are_redelivered_after_reopen(harness):
    config = ManagedLedgerConfig(
        fsync=False, cursor_flush_interval_s=3600.0, max_persisted_acked_positions=2
    )
    ledger, positions = await with_entries(harness, 6, config)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack([positions[1], positions[3], positions[5]])
    reopened = await harness.reopen(ledger, config)
    restored = reopened.cursors["c"]
    assert list(restored.individually_acked) == [positions[1], positions[3]]
    assert not restored.is_acked(positions[5])  # at-least-once: delivered again


async def test_reset_persists_across_reopen(harness):
    ledger, positions = await with_entries(harness, 4)
    cursor, _ = ledger.open_cursor("c", start_at_earliest=True)
    cursor.ack_cumulative(positions[3])
    await ledger.close()
    ledger = await harness.open(CONFIG)
    ledger.cursors["c"].reset(positions[0])
    reopened = await harness.reopen(ledger, CONFIG)
    assert state(reopened.cursors["c"])[:2] == (positions[0], [])


async def test_deleted_cursor_does_not_come_back_after_reopen(harness):
    ledger, _ = await with_entries(harness, 2)
    ledger.open_cursor("gone", start_at_earliest=True)
    ledger.open_cursor("kept", start_at_earliest=True)
    ledger.delete_cursor("gone")
    reopened = await harness.reopen(ledger, CONFIG)
    assert set(reopened.cursors) == {"kept"}


async def test_cursors_of_different_topics_in_one_store_are_separate(harness, tmp_path):
    ledger, positions = await with_entries(harness, 3)
    other = await ManagedLedger.open(
        "other-topic", tmp_path / "other", harness.open_store(), CONFIG
    )
    try:
        mine, _ = ledger.open_cursor("sub", start_at_earliest=True)
        theirs, _ = other.open_cursor("sub", start_at_earliest=True, properties={"t": "o"})
        mine.ack_cumulative(positions[2])
        await other.close()
        reopened_other = await ManagedLedger.open(
            "other-topic", tmp_path / "other", harness.open_store(), CONFIG
        )
        assert state(reopened_other.cursors["sub"]) == state(theirs)
        await reopened_other.close()
        reopened = await harness.reopen(ledger, CONFIG)
        assert state(reopened.cursors["sub"]) == (positions[2], [], {})
    finally:
        await other.close()


# ---------------------------------------------------------------- its collaborator


class ListLedger:
    """A CursorLedger over one ledger of `count` entries, recording what the cursor asks."""

    def __init__(self, count: int) -> None:
        self.positions = [Position(0, i) for i in range(count)]
        self.changed: list[str] = []
        self.written: list[str] = []

    @property
    def last_confirmed(self) -> Position:
        return self.positions[-1]

    def first_position_after(self, position: Position) -> Position | None:
        return next((p for p in self.positions if p > position), None)

    def count_entries(self, after: Position, upto: Position) -> int:
        return sum(after < p <= upto for p in self.positions)

    def cursor_changed(self, name: str) -> None:
        self.changed.append(name)

    async def write_cursor(self, name: str) -> None:
        self.written.append(name)


async def test_a_cursor_needs_of_its_ledger_only_the_cursor_ledger_calls():
    ledger = ListLedger(4)
    cursor = ManagedCursor(ledger, "c", Position(0, -1), {})
    cursor.ack([Position(0, 1)])
    cursor.ack([Position(0, 0)])
    assert cursor.mark_delete == Position(0, 1) and cursor.backlog == 2
    assert ledger.changed == ["c", "c"]
    await asyncio.gather(cursor.persist(), cursor.persist())
    assert ledger.written == ["c"]  # callers in one loop iteration share a write


def test_the_cursor_module_does_not_import_the_ledger_module():
    tree = ast.parse(Path(cursor_module.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "managed_ledger.ledger" not in imported
    assert "managed_ledger" not in imported  # the package root imports the ledger
