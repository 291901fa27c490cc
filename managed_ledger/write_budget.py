"""Bytes queued for ledger writers, bounded across every ledger of a broker.

An append takes its bytes from the budget before it is queued for its ledger's
writer and gives them back once the writer has written (or failed) it. When the
budget is spent the append waits: the producer's back-pressure, as a ledger's own
`max_pending_bytes` gives. Waiters are served first come, first served, so a busy
topic cannot starve another: each topic queues at most its own bound here (the
ledger reserves its share before it asks), and every writer gives back what it
took without ever waiting on the budget itself, so no cycle can form.

An append is let in when its bytes fit, or when nothing is queued at all (one
entry larger than the whole budget still goes through, alone). A reader of
requests (a producer's stream) calls `wait_for_room()` before it reads the next
one, so that while the budget is spent the requests stay with the client (flow
control) instead of piling up in memory waiting for it [Pulsar stops reading
from connections while its publish buffer is full]. Runs on one event loop (no
locking).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class PendingWriteBudget:
    def __init__(self, max_bytes: int):
        assert max_bytes >= 1, max_bytes
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()
        # Readers waiting for the budget to have room again (wait_for_room).
        self._room_waiters: list[asyncio.Future] = []
        self.waits = 0  # appends that had to wait (a counter)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_take(self, size: int) -> bool:
        """Take `size` bytes at once if nobody waits ahead and they fit."""
        if self._waiters or not self._fits(size):
            return False
        self.used_bytes += size
        return True

    async def take(self, size: int) -> None:
        """Take `size` bytes, waiting in line for them if need be."""
        if self.try_take(size):
            return
        self.waits += 1
        waiter = (size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await waiter[1]
        except asyncio.CancelledError:
            if waiter[1].done() and not waiter[1].cancelled():
                self.give_back(size)  # granted as the caller was cancelled
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it
                    self._waiters.remove(waiter)
                self._grant()  # those behind it may fit now
            raise

    @property
    def has_room(self) -> bool:
        """Bytes left, and nobody in line for them."""
        return self.used_bytes < self.max_bytes and not self._waiters

    async def wait_for_room(self) -> None:
        """Until the budget has room (has_room): at once when it has."""
        while not self.has_room:
            room = asyncio.get_running_loop().create_future()
            self._room_waiters.append(room)
            try:
                await room
            finally:
                if not room.done():
                    room.cancel()

    def give_back(self, size: int) -> None:
        self.used_bytes -= size
        assert self.used_bytes >= 0, self.used_bytes
        self._grant()

    def _fits(self, size: int) -> bool:
        return self.used_bytes == 0 or self.used_bytes + size <= self.max_bytes

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters:
            size, future = waiters[0]
            if future.done():  # cancelled meanwhile
                waiters.popleft()
                continue
            if not self._fits(size):
                return
            waiters.popleft()
            self.used_bytes += size
            future.set_result(None)
        if self._room_waiters and self.has_room:
            rooms, self._room_waiters = self._room_waiters, []
            for room in rooms:
                if not room.done():
                    room.set_result(None)
