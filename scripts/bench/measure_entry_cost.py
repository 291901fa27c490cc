"""What a cached entry costs in Python objects beyond its payload's bytes.

Fills a SharedEntryCache view with entries made as the ledger makes them (the
writer's stamped header; a header decoded from disk for read-back entries) and
measures with tracemalloc what the cache holds, per entry, minus the payload
bytes: the figure behind managed_ledger.cache.ENTRY_OVERHEAD_BYTES.

    python scripts/bench/measure_entry_cost.py [--entries N]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from managed_ledger.cache import SharedEntryCache
from managed_ledger.entry import Entry, EntryHeader
from managed_ledger.position import Position


def _written_header(sequence_id: int, base_offset: int) -> EntryHeader:
    # As a producer's append reaches the writer: its name shared by its entries.
    return EntryHeader(
        num_messages=10,
        publish_time_ms=int(time.time() * 1000),
        producer_name=_PRODUCER,
        sequence_id=sequence_id,
    ).stamped(base_offset)


_PRODUCER = "standalone-0-17"


def measure(entries: int, payload_size: int, read_back: bool) -> float:
    """Bytes per entry held by the cache beyond the payload's length."""
    shared = SharedEntryCache(1 << 40)
    view = shared.view(1 << 40)
    # The payloads and headers exist before the cache sees them (made by the
    # client's request or the disk read); only what the cache keeps alive counts,
    # so everything is made inside the traced window and the rest dropped.
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for entry_id in range(entries):
        header = _written_header(1_000_000 + entry_id, 5_000_000 + entry_id * 10)
        if read_back:
            header = EntryHeader.decode(header.encode())
        entry = Entry(Position(1000, entry_id), header, bytes(payload_size))
        if read_back:
            view.put_read(entry)
        else:
            view.put(entry)
    del header, entry
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(view) == entries
    return (after - before) / entries - payload_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    args = parser.parse_args()
    for read_back in (False, True):
        for size in (0, 100, 1024, 16 * 1024, 64 * 1024):
            count = args.entries if size <= 1024 else args.entries // 20
            overhead = measure(count, size, read_back)
            kind = "read back" if read_back else "written"
            print(f"{kind:9} payload {size:6} B: {overhead:6.0f} B an entry besides the payload")


if __name__ == "__main__":
    main()
