"""Kafka's rule for an idempotent producer's batches, over stableline's sequences.

The topic de-duplicates a named producer's entries by sequence id (txnbuffer's
ProducerSequences: an entry at or below the last sequence id is not written
again). A Kafka batch of records with sequences base..last is stored as entries
whose sequence ids are those of their last records, so that check alone would
take any batch below the producer's last sequence for a retry and drop it.
Kafka is stricter, and so is this module, before anything is written:

- a batch identical to one of the producer's last RECENT_BATCHES on the
  partition (same base and last sequence) is a retry: answered with the offset its
  first copy got, nothing written;
- the next batch (base = last stored + 1) is written; so is the first batch of
  a producer the partition knows nothing of (base 0: a producer's sequences start
  at 0 on each partition), and a batch of which only the first records were
  stored (an append that failed between its entries): the topic writes the rest;
- a batch of a producer the partition knows nothing of that does not start at 0
  is a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) when this broker gave the id to the
  sender, else UNKNOWN_PRODUCER_ID (Kafka 2.x's answer for a producer whose state
  is gone; clients reset their sequences): no one can claim a high sequence number
  under an id before its producer uses it;
- anything else, a gap or an older batch, is OUT_OF_ORDER_SEQUENCE_NUMBER.

The last batches are kept in memory (`RecentBatches`, bounded). After a restart,
once a producer's were forgotten, or when the last of them is not the last stored
(the topic moved to another broker and back: that broker took the batches since), a
batch wholly below the last stored sequence is looked for in the log: its last
sequence on an entry of the producer, the entry before it ending at base - 1 (or
none, for base 0); found, it is a retry.
"""

from __future__ import annotations

import enum
from collections import OrderedDict, deque
from dataclasses import dataclass

from stableline.broker.topics.sent_positions import find_sent_positions
from stableline.broker.topics.topic import Topic

# Kafka's max.in.flight.requests.per.connection bound for idempotence, and the
# batches its brokers keep per producer (ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
RECENT_BATCHES = 5
# (topic, producer) pairs whose last batches are kept; the least recent is dropped.
MAX_TRACKED_PRODUCERS = 20_000


@dataclass(frozen=True, slots=True)
class SentBatch:
    base_sequence: int
    last_sequence: int
    base_offset: int


class Verdict(enum.Enum):
    WRITE = "write"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out of order"
    UNKNOWN_PRODUCER = "unknown producer"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    base_offset: int = -1  # a duplicate's first copy
    expected: int = -1  # the sequence an out-of-order batch should have had


class RecentBatches:
    """Each idempotent producer's last batches on each partition, broker-wide."""

    def __init__(self, max_producers: int = MAX_TRACKED_PRODUCERS) -> None:
        self._max = max_producers
        self._batches: OrderedDict[tuple[str, str], deque[SentBatch]] = OrderedDict()

    def of(self, topic: str, producer: str) -> deque[SentBatch] | None:
        found = self._batches.get((topic, producer))
        if found is not None:
            self._batches.move_to_end((topic, producer))
        return found

    def add(self, topic: str, producer: str, batch: SentBatch) -> None:
        key = (topic, producer)
        found = self._batches.get(key)
        if found is None:
            found = self._batches[key] = deque(maxlen=RECENT_BATCHES)
        found.append(batch)
        self._batches.move_to_end(key)
        while len(self._batches) > self._max:
            self._batches.popitem(last=False)


async def decide(
    recent: RecentBatches, topic: Topic, producer: str, base: int, last: int, issued: bool
) -> Decision:
    """What to do with a batch of `producer` numbered base..last (see the module).
    `issued`: this broker handed the producer's id to the sender."""
    await topic.buffer.wait_ready()  # recovery rebuilds the stored sequences
    stored = topic.buffer.producers.last(producer)
    batches = recent.of(str(topic.name), producer)
    if batches is not None and last <= stored:
        for sent in batches:
            if (sent.base_sequence, sent.last_sequence) == (base, last):
                return Decision(Verdict.DUPLICATE, sent.base_offset)
    if stored < 0:
        if base == 0:
            return Decision(Verdict.WRITE)
        return Decision(Verdict.OUT_OF_ORDER if issued else Verdict.UNKNOWN_PRODUCER, expected=0)
    if base == stored + 1 or base <= stored < last:
        return Decision(Verdict.WRITE)
    # The batches kept here are the producer's last only if the last of them is the
    # last stored: the topic may have been served by another broker since they were
    # sent here (moved away and back), which took the batches after them.
    kept_all = batches is not None and bool(batches) and batches[-1].last_sequence == stored
    if not kept_all and base <= last <= stored:
        offset = await _logged_batch(topic, producer, base, last)
        if offset is not None:
            return Decision(Verdict.DUPLICATE, offset)
    return Decision(Verdict.OUT_OF_ORDER, expected=stored + 1)


async def _logged_batch(topic: Topic, producer: str, base: int, last: int) -> int | None:
    """The base offset of the producer's batch base..last if the log holds it whole
    and it starts an entry (the producer's previous entry ends at base - 1)."""
    ledger = topic.ledger
    found = await find_sent_positions(ledger, producer, max(base - 1, 0), last)
    if last not in found or (base > 0 and base - 1 not in found):
        return None
    first = min(sequence for sequence in found if sequence >= base)
    entries = ledger.read(found[first], 1, found[first])
    return ledger.offsets.base_of(entries[0]) if entries else None
