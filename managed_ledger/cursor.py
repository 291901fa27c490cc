"""A durable cursor: how far a subscription has consumed a topic.

State: the mark-delete position (everything at or before it is acknowledged), the
positions acknowledged individually above it, the batch indexes acknowledged in
entries acknowledged in part, and the subscription's properties
(type, isolation level), which are fixed when the cursor is created. The read
position is where the dispatcher reads next; it is not persisted (after a restart
reading resumes after mark-delete, skipping what was individually acknowledged).
Changes are written in the background; persist() writes at once and waits for
the fsync, for an acknowledgement that is confirmed only once it is durable.

Each written state carries a version, (epoch, sequence), which its ledger stamps and
which only grows, though the state itself may go back (a seek). Where copies of a
replicated topic disagree, the newest version is the cursor (newest_states); a
deleted cursor leaves a versioned tombstone on the other copies for that reason, so an
older copy of it cannot bring it back.

A cursor knows its ledger only as a `CursorLedger`: the few reads and writes it
makes of it, so this module does not import the ledger's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Protocol

from sortedcontainers import SortedList

from managed_ledger.position import Position

# (the writer's epoch, a sequence the ledger counts up): compared as a tuple.
CursorVersion = tuple[int, int]
NO_VERSION: CursorVersion = (0, 0)


class CursorLedger(Protocol):
    """What a cursor asks of the ledger it belongs to (ManagedLedger is one)."""

    @property
    def last_confirmed(self) -> Position: ...

    def first_position_after(self, position: Position) -> Position | None:
        """The first existing entry after `position`, or None."""
        ...

    def count_entries(self, after: Position, upto: Position) -> int:
        """How many entries lie in (after, upto]."""
        ...

    def cursor_changed(self, name: str) -> None:
        """The cursor `name` changed: write it in the background."""
        ...

    async def write_cursor(self, name: str) -> None:
        """Write the cursor `name` now; return once it is durable."""
        ...


class ManagedCursor:
    def __init__(
        self,
        ledger: CursorLedger,
        name: str,
        mark_delete: Position,
        properties: dict[str, str],
        individually_acked: list[Position] | None = None,
        partial_acks: dict[Position, set[int]] | None = None,
        version: CursorVersion = NO_VERSION,
    ):
        self.ledger = ledger
        self.name = name
        self.mark_delete = mark_delete
        self.properties = properties
        self.individually_acked: SortedList = SortedList(individually_acked or ())
        # Entry -> acknowledged batch indexes, for entries acknowledged in part; kept
        # by the subscription, persisted here so a confirmed ack survives a crash.
        self.partial_acks: dict[Position, set[int]] = partial_acks or {}
        self.read_position = mark_delete.next_in_ledger()
        # The version of the state last written (the ledger stamps each write).
        self.version = version
        self._persisting: asyncio.Task | None = None
        self._advance_mark_delete()

    # ------------------------------------------------------------ acks

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete or position in self.individually_acked

    def ack(self, positions: list[Position]) -> int:
        """Acknowledge positions individually; returns how many were newly acked."""
        newly = 0
        acked = self.individually_acked
        for position in positions:
            if position <= self.mark_delete:
                continue
            if not acked and position == self.ledger.first_position_after(self.mark_delete):
                # In-order acks (the usual case) move the mark-delete position at once.
                self.mark_delete = position
                newly += 1
            elif position not in acked:
                acked.add(position)
                newly += 1
        if newly:
            self._advance_mark_delete()
            self.ledger.cursor_changed(self.name)
        return newly

    def ack_cumulative(self, position: Position) -> None:
        """Acknowledge everything at or before position."""
        if position <= self.mark_delete:
            return
        self.mark_delete = position
        index = self.individually_acked.bisect_right(position)
        del self.individually_acked[:index]
        self._advance_mark_delete()
        self.ledger.cursor_changed(self.name)

    def _advance_mark_delete(self) -> None:
        acked = self.individually_acked
        while acked:
            following = self.ledger.first_position_after(self.mark_delete)
            if following is None or acked[0] != following:
                break
            self.mark_delete = acked.pop(0)
        if self.read_position <= self.mark_delete:
            self.read_position = self.mark_delete.next_in_ledger()

    # ------------------------------------------------------------ positions

    def reset(self, mark_delete: Position) -> None:
        """Seek: everything after mark_delete becomes unacknowledged again."""
        self.mark_delete = mark_delete
        self.individually_acked.clear()
        self.read_position = mark_delete.next_in_ledger()
        self.ledger.cursor_changed(self.name)

    @property
    def backlog(self) -> int:
        """Entries after mark-delete up to the LAC that are not acknowledged."""
        lac = self.ledger.last_confirmed
        total = self.ledger.count_entries(self.mark_delete, lac)
        acked_within = self.individually_acked.bisect_right(lac)
        return max(total - acked_within, 0)

    # ------------------------------------------------------------ persistence

    async def persist(self) -> None:
        """Write this cursor now and return once it is durable. Callers in the same
        loop iteration share one write, and concurrent writes share fsyncs."""
        if self._persisting is None:
            self._persisting = asyncio.get_running_loop().create_task(self._persist_round())
        await asyncio.shield(self._persisting)

    async def _persist_round(self) -> None:
        await asyncio.sleep(0)  # acks applied meanwhile ride on this write
        self._persisting = None
        await self.ledger.write_cursor(self.name)

    def to_json(self, limit: int) -> bytes:
        """The persisted form, keeping at most `limit` individually acked positions
        and `limit` partly acked entries."""
        acked = [[p.ledger_id, p.entry_id] for p in self.individually_acked[:limit]]
        partial = [
            [p.ledger_id, p.entry_id, sorted(indexes)]
            for p, indexes in list(self.partial_acks.items())[:limit]
            if p > self.mark_delete and indexes
        ]
        return json.dumps(
            {
                "mark_delete": [self.mark_delete.ledger_id, self.mark_delete.entry_id],
                "acked": acked,
                "partial": partial,
                "properties": self.properties,
                "version": list(self.version),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, ledger: CursorLedger, name: str, raw: bytes) -> ManagedCursor:
        data = json.loads(raw)
        return cls(
            ledger,
            name,
            Position(*data["mark_delete"]),
            data["properties"],
            [Position(*p) for p in data["acked"]],
            {
                Position(ledger, entry): set(indexes)
                for ledger, entry, indexes in data.get("partial", ())
            },
            _version_in(data),
        )


def _version_in(data: dict) -> CursorVersion:
    epoch, sequence = data.get("version", NO_VERSION)
    return epoch, sequence


def state_version(raw: bytes) -> CursorVersion:
    """The version of a persisted state (NO_VERSION: written before versions were)."""
    return _version_in(json.loads(raw))


def tombstone(version: CursorVersion) -> bytes:
    """The state a deleted cursor leaves on the other copies of its topic."""
    return json.dumps({"deleted": True, "version": list(version)}).encode()


def is_tombstone(raw: bytes) -> bool:
    return bool(json.loads(raw).get("deleted"))


def newest_states(*copies: dict[str, bytes]) -> dict[str, bytes]:
    """Per cursor name, the state with the newest version among `copies` (each a
    name -> persisted state map, as one copy of a topic holds them); on a tie, the
    first copy's."""
    newest: dict[str, tuple[CursorVersion, bytes]] = {}
    for copy in copies:
        for name, raw in copy.items():
            version = state_version(raw)
            held = newest.get(name)
            if held is None or version > held[0]:
                newest[name] = (version, raw)
    return {name: raw for name, (_version, raw) in newest.items()}
