"""A bounded cache of recently appended entries, so tailing readers skip the disk."""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.entry import Entry

# What an entry costs beyond its payload (key, Entry, header objects), so that a
# stream of empty-payload entries such as transaction markers is bounded too.
ENTRY_OVERHEAD_BYTES = 200


def _cost(entry: Entry) -> int:
    return entry.size + ENTRY_OVERHEAD_BYTES


class EntryCache:
    """Insertion-ordered (so oldest-first eviction) and bounded by bytes: each entry
    is charged its payload plus ENTRY_OVERHEAD_BYTES."""

    def __init__(self, max_bytes: int):
        assert max_bytes >= 0
        self.max_bytes = max_bytes
        # OrderedDict, not dict: evicting from the front of a plain dict leaves
        # dummies that every later next(iter()) walks over, quadratic in a stream.
        self._entries: OrderedDict[tuple[int, int], Entry] = OrderedDict()
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: Entry) -> None:
        cost = _cost(entry)
        if cost > self.max_bytes:
            return
        key = (entry.position.ledger_id, entry.position.entry_id)
        replaced = self._entries.pop(key, None)
        if replaced is not None:
            self.size_bytes -= _cost(replaced)
        self._entries[key] = entry
        self.size_bytes += cost
        while self.size_bytes > self.max_bytes:
            _, oldest = self._entries.popitem(last=False)
            self.size_bytes -= _cost(oldest)
        assert 0 <= self.size_bytes <= self.max_bytes, (self.size_bytes, self.max_bytes)

    def get(self, ledger_id: int, entry_id: int) -> Entry | None:
        entry = self._entries.get((ledger_id, entry_id))
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [key for key in self._entries if key[0] == ledger_id]:
            self.size_bytes -= _cost(self._entries.pop(key))

    def clear(self) -> None:
        self._entries.clear()
        self.size_bytes = 0
