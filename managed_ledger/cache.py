"""A bounded cache of entries, so tailing readers and readers catching up skip the disk.

Two regions share one byte bound:
- appended entries, put by the writer as they become durable (tailing readers);
- read-back entries, put by reads that had to go to the disk. A reader catching
  up reads a run of entries per disk read (one pread, one CRC pass) and may take
  only some of them now (its consumer's permits); the rest are served from here
  on its next pass instead of being read from the disk again. This region never
  holds more than `read_back_share` of the bound, so a reader far behind evicts
  at most that much of the tail.
"""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.entry import Entry

# What an entry costs beyond its payload (key, Entry, header objects), so that a
# stream of empty-payload entries such as transaction markers is bounded too.
ENTRY_OVERHEAD_BYTES = 200
# The part of the cache's bound that entries read back from disk may take.
READ_BACK_SHARE = 0.25


def _cost(entry: Entry) -> int:
    return entry.size + ENTRY_OVERHEAD_BYTES


class EntryCache:
    """Insertion-ordered (so oldest-first eviction) and bounded by bytes: each entry
    is charged its payload plus ENTRY_OVERHEAD_BYTES. An appended entry evicts the
    oldest appended ones (read-back ones only when no other appended entry is
    left); a read-back entry evicts the oldest read-back ones down to its region's
    share, then the oldest appended ones."""

    def __init__(self, max_bytes: int, read_back_share: float = READ_BACK_SHARE):
        assert max_bytes >= 0
        assert 0.0 <= read_back_share <= 1.0, read_back_share
        self.max_bytes = max_bytes
        self.read_back_max_bytes = int(max_bytes * read_back_share)
        # OrderedDict, not dict: evicting from the front of a plain dict leaves
        # dummies that every later next(iter()) walks over, quadratic in a stream.
        self._entries: OrderedDict[tuple[int, int], Entry] = OrderedDict()
        self._read_back: OrderedDict[tuple[int, int], Entry] = OrderedDict()
        self.size_bytes = 0  # both regions
        self.read_back_bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries) + len(self._read_back)

    def put(self, entry: Entry) -> None:
        """An appended entry (the writer's)."""
        cost = _cost(entry)
        if cost > self.max_bytes:
            return
        key = (entry.position.ledger_id, entry.position.entry_id)
        replaced = self._entries.pop(key, None)
        if replaced is not None:
            self.size_bytes -= _cost(replaced)
        replaced = self._read_back.pop(key, None)
        if replaced is not None:
            self.size_bytes -= _cost(replaced)
            self.read_back_bytes -= _cost(replaced)
        self._entries[key] = entry
        self.size_bytes += cost
        while self.size_bytes > self.max_bytes:
            if len(self._entries) > 1:
                self.size_bytes -= _cost(self._entries.popitem(last=False)[1])
            else:
                self._evict_read_back()
        self._check()

    def put_read(self, entry: Entry) -> None:
        """An entry a read brought back from the disk."""
        cost = _cost(entry)
        if cost > self.read_back_max_bytes:
            return
        key = (entry.position.ledger_id, entry.position.entry_id)
        if key in self._entries or key in self._read_back:
            return
        self._read_back[key] = entry
        self.size_bytes += cost
        self.read_back_bytes += cost
        while self.read_back_bytes > self.read_back_max_bytes:
            self._evict_read_back()
        while self.size_bytes > self.max_bytes:
            self.size_bytes -= _cost(self._entries.popitem(last=False)[1])
        self._check()

    def _evict_read_back(self) -> None:
        cost = _cost(self._read_back.popitem(last=False)[1])
        self.size_bytes -= cost
        self.read_back_bytes -= cost

    def _check(self) -> None:
        assert 0 <= self.size_bytes <= self.max_bytes, (self.size_bytes, self.max_bytes)
        assert 0 <= self.read_back_bytes <= self.read_back_max_bytes, (
            self.read_back_bytes,
            self.read_back_max_bytes,
        )

    def get(self, ledger_id: int, entry_id: int) -> Entry | None:
        key = (ledger_id, entry_id)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._read_back.get(key)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [key for key in self._entries if key[0] == ledger_id]:
            self.size_bytes -= _cost(self._entries.pop(key))
        for key in [key for key in self._read_back if key[0] == ledger_id]:
            cost = _cost(self._read_back.pop(key))
            self.size_bytes -= cost
            self.read_back_bytes -= cost

    def clear(self) -> None:
        self._entries.clear()
        self._read_back.clear()
        self.size_bytes = 0
        self.read_back_bytes = 0
