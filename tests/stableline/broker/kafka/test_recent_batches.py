"""The idempotence rule's memory of a producer's last batches (idempotence.decide)
when the topic was served elsewhere meanwhile: a topic moved to another broker and
back has batches in its log this broker never saw, so its kept batches are not the
producer's last, and a resend of one written there is found in the log (a
duplicate), not refused OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to a Kafka producer).
The topic is a fake at the edge: its stored sequences and the log look-up."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from stableline.broker.kafka.coordinator import idempotence
from stableline.broker.kafka.coordinator.idempotence import (
    RecentBatches,
    SentBatch,
    Verdict,
    decide,
)

PRODUCER = "kafka-7"
TOPIC = "persistent://public/default/moving"


@dataclass
class _Sequences:
    stored: dict[str, int] = field(default_factory=dict)

    def last(self, producer: str) -> int:
        return self.stored.get(producer, -1)


@dataclass
class _Buffer:
    producers: _Sequences

    async def wait_ready(self) -> None:
        return None


@dataclass
class _Topic:
    name: str
    buffer: _Buffer


@pytest.fixture
def logged(monkeypatch) -> dict[tuple[int, int], int]:
    """The batches the (fake) log holds: (base, last) -> base offset."""
    batches: dict[tuple[int, int], int] = {}

    async def logged_batch(_topic, producer, base, last):
        assert producer == PRODUCER
        return batches.get((base, last))

    monkeypatch.setattr(idempotence, "_logged_batch", logged_batch)
    return batches


def _topic(last_stored: int) -> _Topic:
    return _Topic(TOPIC, _Buffer(_Sequences({PRODUCER: last_stored})))


async def test_a_resend_of_a_batch_written_while_the_topic_was_elsewhere_is_a_duplicate(logged):
    recent = RecentBatches()
    # Sent here before the topic moved away: sequences 0..9.
    recent.add(TOPIC, PRODUCER, SentBatch(0, 4, 100))
    recent.add(TOPIC, PRODUCER, SentBatch(5, 9, 105))
    # The other broker took 10..14 and 15..19; the topic is back here.
    logged[(10, 14)] = 110
    logged[(15, 19)] = 115
    topic = _topic(19)
    decision = await decide(recent, topic, PRODUCER, 15, 19, issued=True)
    assert (decision.verdict, decision.base_offset) == (Verdict.DUPLICATE, 115)
    # A batch kept here is still answered from memory; the next one is written.
    decision = await decide(recent, topic, PRODUCER, 5, 9, issued=True)
    assert (decision.verdict, decision.base_offset) == (Verdict.DUPLICATE, 105)
    assert (await decide(recent, topic, PRODUCER, 20, 24, issued=True)).verdict is Verdict.WRITE
    # What the log does not hold whole is out of order, as before.
    decision = await decide(recent, topic, PRODUCER, 12, 16, issued=True)
    assert (decision.verdict, decision.expected) == (Verdict.OUT_OF_ORDER, 20)


async def test_batches_kept_up_to_the_last_stored_are_not_looked_for_in_the_log(logged):
    recent = RecentBatches()
    for index in range(6):
        recent.add(TOPIC, PRODUCER, SentBatch(5 * index, 5 * index + 4, 100 + 5 * index))
    logged[(0, 4)] = 100  # in the log, but older than the last five batches
    decision = await decide(recent, _topic(29), PRODUCER, 0, 4, issued=True)
    assert decision.verdict is Verdict.OUT_OF_ORDER
