"""The broker-wide bound on catch-up traffic: old entries sent to members that lack them.

A member being re-made (a replacement in an ensemble, one back on a lost disk) or
back from away is sent what it lacks, read back from the writer's files. Without a
bound, re-making a big topic would take the disk and the network from clients'
writes. `CatchUpThrottle` is a token bucket shared by every FollowerLink of the
broker (rereplication_rate_bytes_per_s); new entries, sent as they are written,
never pass through it.

Promises:
- Over any span of T seconds, `acquire` lets through at most rate * T + burst bytes
  (burst: one second's worth) plus one call's excess over the burst, whatever the
  number of callers: each waits its turn (a lock), so none is starved.
- A single acquire larger than the burst is let through once the bucket has filled
  to the burst, the rest counted as debt the next callers wait off.
- `sent_bytes` counts what was let through (the metric of re-replication progress).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# The shortest wait for tokens.
MIN_WAIT_S = 0.001


class CatchUpThrottle:
    """A token bucket of `rate_bytes_per_s` (see the module docstring)."""

    def __init__(
        self,
        rate_bytes_per_s: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        assert rate_bytes_per_s >= 1, rate_bytes_per_s
        self.rate_bytes_per_s = rate_bytes_per_s
        self.burst_bytes = rate_bytes_per_s
        self._clock = clock
        self._sleep = sleep
        # May go below zero: a call larger than the burst leaves a debt.
        self._tokens = float(self.burst_bytes)
        self._at = clock()
        self._lock = asyncio.Lock()
        self.sent_bytes = 0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(
            float(self.burst_bytes), self._tokens + (now - self._at) * self.rate_bytes_per_s
        )
        self._at = now

    async def acquire(self, nbytes: int) -> None:
        """Return once `nbytes` may be sent."""
        assert nbytes >= 0, nbytes
        async with self._lock:
            want = min(nbytes, self.burst_bytes)
            while True:
                self._refill()
                if self._tokens >= want:
                    break
                # Never a wait too short to move the clock (a float's rounding would
                # otherwise leave the last fraction of a byte owed forever).
                await self._sleep(max((want - self._tokens) / self.rate_bytes_per_s, MIN_WAIT_S))
            self._tokens -= nbytes
            self.sent_bytes += nbytes
