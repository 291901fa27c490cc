"""A topic's log offsets: consecutive numbers per message, found from entry headers.

Kafka clients address a partition by offset: every message takes the next
integer, and so does every transaction marker (as Kafka's control batches do).
The ledger stamps each entry it writes with the offset of its first message
(EntryHeader.base_offset), so the headers in the segment files are the persisted
index: offset -> position is a binary search over ledgers (by their first entry's
base offset, remembered once read) and then over the entries of one ledger, each
probe one header read. Offsets survive restart and kill -9 exactly as the
entries do, and MessageIds (positions) are untouched. Beside them only the log
end is stored, with the ledger list (`floor`, written in the same LMDB write that
shortens the list): once retention deleted the entries that showed it, the next
offset still goes on from there, so an offset once told is never given to
another message, and a consumer at the old end keeps its place.

Entries written before offsets existed have no base offset. Theirs are derived
once, when first needed, by counting messages in log order: backwards from the
first stamped entry when there is one (so they never change again, whatever
retention deletes), backwards from the stored log end when it is past their count
(a log this version trimmed but never wrote to), from 0 at the first retained
entry otherwise (the first stamped entry then continues that count). That
derivation reads every unstamped entry once; it costs nothing for logs written
by this version.

The writer stamps offsets before its write reaches the disk; readers see only
the end offset, which moves when the ledger's last confirmed position does
(after the fsync). A write that fails, or a kill before its fsync, gives its
offsets to the next entries: no reader ever saw them.

A damaged entry (managed_ledger/ledger.py) is skipped by reads, so its offsets
are a gap: a fetch at an offset in it continues at the next readable entry.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import TYPE_CHECKING

from managed_ledger.entry import Entry
from managed_ledger.position import Position

if TYPE_CHECKING:
    from managed_ledger.ledger import ManagedLedger

# Reads made while deriving the offsets of unstamped entries, in entries per read.
_SCAN_CHUNK = 1000
# Where recent fetches ended (next offset -> position): a consumer reading on finds
# its next entry without a search.
_MAX_HINTS = 1024


class LogOffsets:
    """The offsets of one ManagedLedger; every method runs on the ledger's loop."""

    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger
        # The offset after the last durable entry (the log end readers see), and
        # the offset the writer stamps next: ahead of it while a write is in flight,
        # equal to it otherwise. Both None until first needed.
        self._end: int | None = None
        self._next: int | None = None
        # A log end reached before (stored with the ledger list): the end is never
        # below it, whatever retention deleted since.
        self.floor = 0
        # ledger id -> base offset of its first readable entry (read once).
        self._first_bases: dict[int, int] = {}
        # position -> derived base offset of an unstamped entry; None until derived.
        self._derived: dict[Position, int] | None = None
        self._hints: OrderedDict[int, Position] = OrderedDict()

    # ------------------------------------------------------------ numbering

    @property
    def end_offset(self) -> int:
        """The log end offset (Kafka's high watermark): the offset after the last
        durable entry. Never counts an entry whose write is still in flight, so an
        offset once told is never given to another message, kill -9 included."""
        if self._end is None:
            self._load()
        assert self._end is not None
        return self._end

    def stamp(self, offset_count: int) -> int:
        """The writer reserves the offsets of one entry it is about to write: its
        base offset. Readers see them only once confirmed."""
        if self._next is None:
            self._load()
        assert self._next is not None
        base = self._next
        self._next = base + offset_count
        return base

    def unstamp(self) -> None:
        """What was stamped since the last confirm was not written (a failed write):
        the next entry takes the durable end offset again."""
        assert self._next is not None and self._end is not None
        self._next = self._end

    def confirm(self, end: int) -> None:
        """The entries stamped up to `end` are durable: the log end moves there.
        Called as the ledger's last confirmed position moves past them."""
        assert self._end is not None and self._next is not None
        assert self._end <= end <= self._next, (self._end, end, self._next)
        self._end = end

    def _load(self) -> None:
        # Only the last confirmed entry bounds reads, so this is the durable end;
        # nothing is stamped yet, so the writer starts from the same offset.
        assert self._end is None and self._next is None, (self._end, self._next)
        self._end = self._next = self._load_next()

    def known_end(self) -> int:
        """The log end as far as it is known without reading the log: what the
        ledger list stores."""
        return self.floor if self._end is None else max(self.floor, self._end)

    def _load_next(self) -> int:
        last = self._last_readable()
        if last is None:
            return self.floor
        return max(self.floor, self.base_of(last) + last.header.offset_count)

    def _last_readable(self) -> Entry | None:
        ledger = self._ledger
        for ledger_id in reversed(ledger.ledger_ids()):
            count = ledger._entry_count(ledger_id)
            for entry_id in range(count - 1, -1, -1):
                found = ledger.read(Position(ledger_id, entry_id), 1, Position(ledger_id, entry_id))
                if found:
                    return found[0]
        return None

    # ------------------------------------------------------------ lookups

    def base_of(self, entry: Entry) -> int:
        """The offset of the entry's first message (a marker's own offset)."""
        base = entry.header.base_offset
        if base is not None:
            return base
        if self._derived is None:
            self._derived = self._derive_unstamped()
        return self._derived[entry.position]

    def start_offset(self) -> int:
        """The first retained offset (Kafka's log start offset)."""
        ledger = self._ledger
        for ledger_id in ledger.ledger_ids():
            base = self._first_base(ledger_id)
            if base is not None:
                return base
        return self.end_offset

    def offset_after(self, position: Position) -> int:
        """The offset of the first entry after `position` (the end offset when none)."""
        following = self._ledger.first_position_after(position)
        if following is None or following > self._ledger.last_confirmed:
            return self.end_offset
        found = self._ledger.read(following, 1)
        return self.base_of(found[0]) if found else self.end_offset

    def position_of(self, offset: int) -> Position | None:
        """The entry holding `offset`, or the first entry after it (the offset was
        trimmed or lies in a damaged entry); None when no entry is at or after it."""
        if offset >= self.end_offset:
            return None
        hinted = self._hints.get(offset)
        if hinted is not None:
            return hinted
        ledger = self._ledger
        ledger_ids = [i for i in ledger.ledger_ids() if self._first_base(i) is not None]
        if not ledger_ids:
            return None
        firsts = [self._first_bases[i] for i in ledger_ids]
        at = bisect.bisect_right(firsts, offset) - 1
        if at < 0:
            return ledger.first_position_after(ledger.first_position())
        ledger_id = ledger_ids[at]
        low, high = 0, ledger._entry_count(ledger_id) - 1
        best: Entry | None = None
        while low <= high:  # the last readable entry whose base offset <= offset
            middle = (low + high) // 2
            found = ledger.read(Position(ledger_id, middle), 1, Position(ledger_id, high))
            if not found:  # damaged up to high
                high = middle - 1
                continue
            entry = found[0]
            if self.base_of(entry) <= offset:
                best = entry
                low = entry.position.entry_id + 1
            else:
                high = middle - 1
        assert best is not None, (offset, ledger_id)
        if self.base_of(best) + best.header.offset_count > offset:
            return best.position
        return ledger.first_position_after(best.position)

    def remember(self, offset: int, position: Position) -> None:
        """A fetch ended before `position`, whose base offset is `offset`."""
        self._hints[offset] = position
        while len(self._hints) > _MAX_HINTS:
            self._hints.popitem(last=False)

    def forget_ledger(self, ledger_id: int) -> None:
        """Retention deleted the ledger."""
        self._first_bases.pop(ledger_id, None)
        self._hints = OrderedDict(
            (offset, position)
            for offset, position in self._hints.items()
            if position.ledger_id != ledger_id
        )

    def _first_base(self, ledger_id: int) -> int | None:
        base = self._first_bases.get(ledger_id)
        if base is None:
            found = self._ledger.read(Position(ledger_id, 0), 1)
            if not found or found[0].position.ledger_id != ledger_id:
                return None
            base = self._first_bases[ledger_id] = self.base_of(found[0])
        return base

    def _derive_unstamped(self) -> dict[Position, int]:
        """Base offsets of the entries written before offsets existed (see above)."""
        ledger = self._ledger
        unstamped: list[Entry] = []
        stamped_base: int | None = None
        start = ledger.first_position_after(ledger.first_position())
        while start is not None and stamped_base is None:
            chunk = ledger.read(start, _SCAN_CHUNK)
            if not chunk:
                break
            for entry in chunk:
                if entry.header.base_offset is not None:
                    stamped_base = entry.header.base_offset
                    break
                unstamped.append(entry)
            start = ledger.first_position_after(chunk[-1].position)
        derived: dict[Position, int] = {}
        if stamped_base is not None:
            offset = stamped_base
            for entry in reversed(unstamped):
                offset -= entry.header.offset_count
                derived[entry.position] = offset
        elif self.floor >= sum(entry.header.offset_count for entry in unstamped):
            offset = self.floor
            for entry in reversed(unstamped):
                offset -= entry.header.offset_count
                derived[entry.position] = offset
        else:
            offset = 0
            for entry in unstamped:
                derived[entry.position] = offset
                offset += entry.header.offset_count
        return derived
