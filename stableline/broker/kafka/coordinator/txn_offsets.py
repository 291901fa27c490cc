"""Which messages a consumer group's offset committed in a transaction acknowledges.

A Kafka group's committed offset is its stableline subscription's acknowledgement
(group_offsets.py). Committed in a transaction (TxnOffsetCommit), offset O
acknowledges the messages from where the subscription's acknowledgement stands (or
from the offset this transaction held before on that partition) up to O: held by the
stableline transaction (txn/transactional_acks.py), applied if it commits, handed back
if it aborts.

`messages_between(topic, subscription, start, end)` lists them as message ids
(entry position, batch index): each data entry wholly inside [start, end) as
(position, -1), its messages not acknowledged yet, and the batch indexes of an
entry only partly inside, less those acknowledged. Markers and entries already
acknowledged are left out (a READ_COMMITTED subscription acknowledges aborted
entries by itself). An end past the log's end stops at it. More than `limit` ids
(the coordinator's max_acks_per_txn counts ids too) raise TooManyToAcknowledge
before the rest is read.
"""

from __future__ import annotations

from dispatcher import Subscription
from managed_ledger import Position
from stableline.broker.errors import BrokerError
from stableline.broker.topics.topic import Topic

# Entries read from the log at a time.
_READ_STEP = 1_000


class TooManyToAcknowledge(BrokerError, ValueError):
    """More messages than one transaction may acknowledge."""

    code = "TooManyTransactionAcks"


def messages_between(
    topic: Topic, subscription: Subscription, start: int, end: int, limit: int
) -> list[tuple[Position, int]]:
    ledger = topic.ledger
    offsets = ledger.offsets
    start = max(start, offsets.start_offset())
    end = min(end, offsets.end_offset)
    if start >= end:
        return []
    position = offsets.position_of(start)
    cursor = subscription.cursor
    ids: list[tuple[Position, int]] = []
    while position is not None:
        entries = ledger.read(position, _READ_STEP)
        if not entries:
            break
        for entry in entries:
            base = offsets.base_of(entry)
            if base >= end:
                return ids
            header = entry.header
            if header.is_marker or cursor.is_acked(entry.position):
                continue
            first, last = max(base, start), min(base + header.offset_count, end)
            if first >= last:
                continue
            if first == base and last == base + header.offset_count:
                ids.append((entry.position, -1))
            else:
                acked = cursor.partial_acks.get(entry.position, set())
                ids.extend(
                    (entry.position, index)
                    for index in range(first - base, last - base)
                    if index not in acked
                )
            if len(ids) > limit:
                raise TooManyToAcknowledge(
                    f"committing offset {end} in one transaction acknowledges more than "
                    f"{limit} message ids of {topic.name} (max_acks_per_transaction): "
                    "commit offsets more often"
                )
        position = ledger.first_position_after(entries[-1].position)
    return ids
