"""What one Kafka request learns once, and what it tells the log once.

A request naming many partitions must cost the broker per topic, not per
partition, in reads of the metadata store and in log lines:

- `partitions_once` keeps the first naming of each (topic, partition) and merges
  the blocks of a topic named twice, so a partition named twice is served once
  (Kafka's fetch keys partitions by topic-partition the same way).
- A RequestScope, current while the handler answers the request (CURRENT_REQUEST),
  keeps each topic's partition count as the metadata store told it, so the store is
  read at most once per topic a request; and it counts the partitions refused and
  why, so that the request leaves one log line (`summary`), whatever it named.

Outside a request (unit tests calling an API directly) there is no scope: counts
are read every time and a refusal is logged at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from stableline.topic_name import TopicName

P = TypeVar("P")

# The reasons kept word for word in one summary line; past them only counted.
_REASONS_SHOWN = 3


@dataclass(slots=True)
class RequestScope:
    """One request's look-ups and refusals (see the module docstring)."""

    api: str
    client_id: str | None
    # Topic -> its partition count as the metadata store said, read this request.
    read_counts: dict[TopicName, int] = field(default_factory=dict)
    # Error name -> partitions (or topics) refused with it.
    refused: dict[str, int] = field(default_factory=dict)
    # The first few distinct reasons, for the operator.
    reasons: list[str] = field(default_factory=list)

    def note_refusal(self, error: str, why: str) -> None:
        self.refused[error] = self.refused.get(error, 0) + 1
        if len(self.reasons) < _REASONS_SHOWN and why not in self.reasons:
            self.reasons.append(why)

    def summary(self) -> str | None:
        """The one log line of what this request was refused; None if nothing was."""
        if not self.refused:
            return None
        total = sum(self.refused.values())
        counts = ", ".join(f"{error} x{count}" for error, count in sorted(self.refused.items()))
        reasons = "; ".join(self.reasons)
        # "refused" counts partitions (topics in CreateTopics, DeleteTopics, Metadata).
        return f"kafka: {self.api} from client {self.client_id!r}: {total} refused ({counts}): {reasons}"


CURRENT_REQUEST: ContextVar[RequestScope | None] = ContextVar(
    "stableline_kafka_request", default=None
)


def partitions_once(
    topics: Iterable[tuple[str, Iterable[P]]], index: Callable[[P], int]
) -> list[tuple[str, list[P]]]:
    """Each (topic, partition index) once, in the order first named, a topic named
    in two blocks merged into its first: later namings of a partition are dropped."""
    merged: dict[str, list[P]] = {}
    seen: set[tuple[str, int]] = set()
    for name, partitions in topics:
        kept = merged.setdefault(name, [])
        for partition in partitions:
            key = (name, index(partition))
            if key not in seen:
                seen.add(key)
                kept.append(partition)
    return list(merged.items())
