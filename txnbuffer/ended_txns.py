"""The ended transactions a coordinator still remembers, oldest end first.

An ended transaction is kept so that a late duplicate end, a `transactionMetadata`
look-up or a named writer asking again gets its real answer, but only for a
bounded time (`retention_ms` since its end) and a bounded count (`max_count` most
recent ends); Kafka expires transactional ids the same way
(transactional.id.expiration.ms). Ends arrive in time order, so the oldest is
always at the head: forgetting costs O(1) per transaction, never a scan.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator


class EndedTransactions:
    def __init__(self, retention_ms: int, max_count: int):
        assert retention_ms > 0 and max_count >= 1, (retention_ms, max_count)
        self.retention_ms = retention_ms
        self.max_count = max_count
        # (ended_ms, sequence), in the order the transactions ended.
        self._ended: collections.deque[tuple[int, int]] = collections.deque()

    def __len__(self) -> int:
        return len(self._ended)

    def add(self, sequence: int, ended_ms: int) -> None:
        """Record an end; ends are added in the order they happen."""
        # A wall clock stepping back may break the order by a little: the head then
        # holds back a few later ends until it expires, and the count still bounds them.
        self._ended.append((ended_ms, sequence))

    def expired(self, now_ms: int) -> Iterator[int]:
        """Remove and yield the sequences past either bound, oldest first."""
        ended = self._ended
        horizon = now_ms - self.retention_ms
        while ended and (len(ended) > self.max_count or ended[0][0] < horizon):
            yield ended.popleft()[1]
