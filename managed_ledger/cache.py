"""Bounded caches of entries, so tailing readers and readers catching up skip the disk.

One SharedEntryCache holds the entries of every ledger of a broker under one byte
budget (Pulsar's managedLedgerCacheSizeMB): a broker's memory is bounded by the
broker, not multiplied by its topics. Each ledger reads and writes through its own
view of it, an EntryCache, with a bound of its own (the topic's share, at most the
budget). Past either bound the oldest entries go first: past the view's, that
ledger's own; past the budget, the oldest of the whole broker, whichever topic
holds them, so a busy topic takes the room idle ones no longer use.

Two regions share each bound:
- appended entries, put by the writer as they become durable (tailing readers);
- read-back entries, put by reads that had to go to the disk. A reader catching
  up reads a run of entries per disk read (one pread, one CRC pass) and may take
  only some of them now (its consumer's permits); the rest are served from here
  on its next pass instead of being read from the disk again. This region never
  holds more than `read_back_share` of a bound, so a reader far behind evicts at
  most that much of the tail.

An entry is charged its payload plus ENTRY_OVERHEAD_BYTES, what its Python objects
cost besides the payload's bytes (see the constant), so that many small entries
are bounded by what they really hold, empty transaction markers too.
"""

from __future__ import annotations

from collections import OrderedDict

from managed_ledger.entry import Entry

# What a cached entry costs beyond its payload's bytes, measured with tracemalloc
# (scripts/bench/measure_entry_cost.py, CPython 3.11): the Entry, its Position and
# EntryHeader, their ints, the payload's bytes object header, the keys and slots
# of the view's and the shared cache's ordered dicts. 620-670 B for a written
# entry (the writer's header), 690-730 B for one read back (a header decoded from
# disk, its producer name a string of its own), whatever the payload's size; the
# allocator's rounding, which tracemalloc does not see, adds a little more.
ENTRY_OVERHEAD_BYTES = 720
# The part of a bound that entries read back from disk may take.
READ_BACK_SHARE = 0.25


def _cost(entry: Entry) -> int:
    return len(entry.payload) + ENTRY_OVERHEAD_BYTES


class SharedEntryCache:
    """The budget and the broker-wide age order of every view's entries.

    `view(max_bytes)` makes a ledger's EntryCache; every entry a view holds is
    listed here too, keyed (view, ledger id, entry id), oldest first, so eviction
    across views is O(1) an entry. Runs on one event loop (no locking)."""

    def __init__(self, max_bytes: int, read_back_share: float = READ_BACK_SHARE):
        assert max_bytes >= 0
        assert 0.0 <= read_back_share <= 1.0, read_back_share
        self.max_bytes = max_bytes
        self.read_back_share = read_back_share
        self.read_back_max_bytes = int(max_bytes * read_back_share)
        self._appended: OrderedDict[tuple[EntryCache, int, int], Entry] = OrderedDict()
        self._read_back: OrderedDict[tuple[EntryCache, int, int], Entry] = OrderedDict()
        self.size_bytes = 0  # both regions, all views
        self.read_back_bytes = 0
        self.evictions = 0  # entries evicted for the budget (not a view's own bound)

    def __len__(self) -> int:
        return len(self._appended) + len(self._read_back)

    def view(self, max_bytes: int) -> EntryCache:
        """A ledger's cache, holding at most min(max_bytes, the budget)."""
        return EntryCache(max_bytes, self.read_back_share, shared=self)

    def _make_room(self, read_back: bool) -> None:
        """Evict the broker's oldest entries until the budget holds. After an
        appended entry: the oldest appended ones (read-back ones only once no other
        appended entry is left). After a read-back one: the oldest read-back ones
        down to their share, then the oldest appended ones."""
        if read_back:
            while self.read_back_bytes > self.read_back_max_bytes:
                self._evict(self._read_back)
        while self.size_bytes > self.max_bytes:
            if len(self._appended) > (0 if read_back else 1):
                self._evict(self._appended)
            else:
                self._evict(self._read_back)
        self._check()

    def _evict(self, region: OrderedDict[tuple[EntryCache, int, int], Entry]) -> None:
        (view, ledger_id, entry_id), _entry = region.popitem(last=False)
        view._forget((ledger_id, entry_id), region is self._read_back)
        self.evictions += 1

    def _check(self) -> None:
        assert 0 <= self.size_bytes <= self.max_bytes, (self.size_bytes, self.max_bytes)
        assert 0 <= self.read_back_bytes <= self.read_back_max_bytes, (
            self.read_back_bytes,
            self.read_back_max_bytes,
        )


class EntryCache:
    """One ledger's view of a SharedEntryCache (a private one when none is given).

    Insertion-ordered (so oldest-first eviction) and bounded by bytes. An appended
    entry evicts this view's oldest appended ones (read-back ones only when no other
    appended entry is left); a read-back entry evicts this view's oldest read-back
    ones down to its region's share, then its oldest appended ones; then the shared
    budget evicts the broker's oldest the same way. close() gives everything back."""

    def __init__(
        self,
        max_bytes: int,
        read_back_share: float = READ_BACK_SHARE,
        shared: SharedEntryCache | None = None,
    ):
        assert max_bytes >= 0
        if shared is None:
            shared = SharedEntryCache(max_bytes, read_back_share)
        self.shared = shared
        self.max_bytes = min(max_bytes, shared.max_bytes)
        self.read_back_max_bytes = int(self.max_bytes * read_back_share)
        # OrderedDict, not dict: evicting from the front of a plain dict leaves
        # dummies that every later next(iter()) walks over, quadratic in a stream.
        self._entries: OrderedDict[tuple[int, int], Entry] = OrderedDict()
        self._read_back: OrderedDict[tuple[int, int], Entry] = OrderedDict()
        self.size_bytes = 0  # both regions
        self.read_back_bytes = 0
        self.hits = 0
        self.misses = 0

    # Identity, not the entries: the shared cache keys entries by their view.
    __hash__ = object.__hash__

    def __len__(self) -> int:
        return len(self._entries) + len(self._read_back)

    def put(self, entry: Entry) -> None:
        """An appended entry (the writer's)."""
        cost = _cost(entry)
        if cost > self.max_bytes:
            return
        # A Position is a tuple: it is its own key, equal to (ledger_id, entry_id).
        key = entry.position
        if key in self._entries or key in self._read_back:
            self._remove(key)
        shared = self.shared
        self._entries[key] = entry
        shared._appended[(self, key[0], key[1])] = entry
        self.size_bytes += cost
        shared.size_bytes += cost
        while self.size_bytes > self.max_bytes:
            if len(self._entries) > 1:
                self._evict_own(read_back=False)
            else:
                self._evict_own(read_back=True)
        if shared.size_bytes > shared.max_bytes:
            shared._make_room(read_back=False)
        self._check()

    def put_read(self, entry: Entry) -> None:
        """An entry a read brought back from the disk."""
        cost = _cost(entry)
        if cost > self.read_back_max_bytes:
            return
        key = entry.position
        if key in self._entries or key in self._read_back:
            return
        shared = self.shared
        self._read_back[key] = entry
        shared._read_back[(self, key[0], key[1])] = entry
        self.size_bytes += cost
        self.read_back_bytes += cost
        shared.size_bytes += cost
        shared.read_back_bytes += cost
        while self.read_back_bytes > self.read_back_max_bytes:
            self._evict_own(read_back=True)
        while self.size_bytes > self.max_bytes:
            self._evict_own(read_back=False)
        if (
            shared.size_bytes > shared.max_bytes
            or shared.read_back_bytes > shared.read_back_max_bytes
        ):
            shared._make_room(read_back=True)
        self._check()

    def _evict_own(self, read_back: bool) -> None:
        """Drop this view's oldest entry of one region, here and in the shared order."""
        region = self._read_back if read_back else self._entries
        (ledger_id, entry_id), entry = region.popitem(last=False)
        shared = self.shared
        del (shared._read_back if read_back else shared._appended)[(self, ledger_id, entry_id)]
        self._charge(-_cost(entry), read_back)

    def _forget(self, key: tuple[int, int], read_back: bool) -> None:
        """The shared cache evicted this view's entry (already gone from its order)."""
        entry = (self._read_back if read_back else self._entries).pop(key)
        self._charge(-_cost(entry), read_back)

    def _remove(self, key: tuple[int, int]) -> None:
        """Drop the entry at `key` from whichever region holds it, here and shared."""
        shared = self.shared
        entry = self._entries.pop(key, None)
        if entry is not None:
            del shared._appended[(self, key[0], key[1])]
            self._charge(-_cost(entry), read_back=False)
        entry = self._read_back.pop(key, None)
        if entry is not None:
            del shared._read_back[(self, key[0], key[1])]
            self._charge(-_cost(entry), read_back=True)

    def _charge(self, delta: int, read_back: bool) -> None:
        shared = self.shared
        self.size_bytes += delta
        shared.size_bytes += delta
        if read_back:
            self.read_back_bytes += delta
            shared.read_back_bytes += delta

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
        keys = [key for key in self._entries if key[0] == ledger_id]
        keys += [key for key in self._read_back if key[0] == ledger_id]
        for key in keys:
            self._remove(key)

    def close(self) -> None:
        """The ledger closed: every entry goes back to the shared budget, and
        nothing is taken in again (a read finishing late caches nothing)."""
        self.clear()
        self.max_bytes = self.read_back_max_bytes = 0

    def clear(self) -> None:
        """Give every entry back to the shared budget."""
        for key in list(self._entries) + list(self._read_back):
            self._remove(key)
        assert self.size_bytes == 0 and self.read_back_bytes == 0, (
            self.size_bytes,
            self.read_back_bytes,
        )
