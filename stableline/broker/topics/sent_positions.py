"""Where a producer's earlier batches lie in the log: the answer to a resent duplicate.

A producer that reconnects resends the batches it has no receipt for; the ones
the topic already holds are not written again (producer_state), and their
receipts must still carry the positions the first copies got, so every send
learns its MessageId. Those positions are found by reading the log backwards
from the last entry: a resend follows its original closely, so the scan is
short, and one scan answers every duplicate of the same reconnect.
"""

from __future__ import annotations

import asyncio

from managed_ledger import ManagedLedger, Position

# Entries read per step, and at most in all, looking for a producer's batches.
SCAN_CHUNK_ENTRIES = 256
MAX_SCAN_ENTRIES = 200_000


async def find_sent_positions(
    ledger: ManagedLedger, producer_name: str, first_sequence_id: int, last_sequence_id: int
) -> dict[int, Position]:
    """Positions of `producer_name`'s batches numbered first..last that the log holds.

    Stops at the first of: all found, an earlier batch of the producer (a
    producer's batches lie in sequence order, so the rest are not there),
    the start of the retained log, or MAX_SCAN_ENTRIES read.
    """
    assert first_sequence_id <= last_sequence_id, (first_sequence_id, last_sequence_id)
    found: dict[int, Position] = {}
    wanted = last_sequence_id - first_sequence_id + 1
    lac = ledger.last_confirmed
    scanned = 0
    for info in reversed(ledger.ledger_infos()):
        if info.ledger_id > lac.ledger_id:
            continue
        end = lac.entry_id if info.ledger_id == lac.ledger_id else info.entries - 1
        while end >= 0:
            start = max(end - SCAN_CHUNK_ENTRIES + 1, 0)
            entries = ledger.read(
                Position(info.ledger_id, start), end - start + 1, Position(info.ledger_id, end)
            )
            scanned += len(entries)
            for entry in reversed(entries):
                header = entry.header
                if header.producer_name != producer_name:
                    continue
                if header.sequence_id < first_sequence_id:
                    return found
                if header.sequence_id <= last_sequence_id:
                    found.setdefault(header.sequence_id, entry.position)
                    if len(found) == wanted:
                        return found
            if scanned >= MAX_SCAN_ENTRIES:
                return found
            end = start - 1
            await asyncio.sleep(0)  # a long scan shares the loop with the data path
    return found
