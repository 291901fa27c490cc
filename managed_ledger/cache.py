"""A bounded cache of recently appended entries, so tailing readers skip the disk."""

from __future__ import annotations

from managed_ledger.entry import Entry


class EntryCache:
    """Insertion-ordered (so oldest-first eviction) and bounded by payload bytes."""

    def __init__(self, max_bytes: int):
        assert max_bytes >= 0
        self.max_bytes = max_bytes
        self._entries: dict[tuple[int, int], Entry] = {}
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, entry: Entry) -> None:
        if entry.size > self.max_bytes:
            return
        key = (entry.position.ledger_id, entry.position.entry_id)
        self._entries[key] = entry
        self.size_bytes += entry.size
        while self.size_bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self.size_bytes -= self._entries.pop(oldest).size

    def get(self, ledger_id: int, entry_id: int) -> Entry | None:
        entry = self._entries.get((ledger_id, entry_id))
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def drop_ledger(self, ledger_id: int) -> None:
        for key in [key for key in self._entries if key[0] == ledger_id]:
            self.size_bytes -= self._entries.pop(key).size

    def clear(self) -> None:
        self._entries.clear()
        self.size_bytes = 0
