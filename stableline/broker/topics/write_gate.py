"""The write gate: whether this broker may write to the topics it serves, now.

In a cluster a broker owns its topics through its metadata session (an etcd lease):
once the session is LOST (declared a sixth of the lease before etcd could expire
it), another broker may act on its expiry, so this broker must have stopped writing
by then. The gate is that rule, in one place:

- Every write to a topic is admitted by the gate (`admit`): appends (produce,
  transaction markers, zombie aborts), acknowledgements and seeks, producers and
  consumers attaching, subscriptions created or deleted, topics deleted. Reads
  (Fetch, last message id, stats, peeks) are not gated.
- A closed gate refuses with BrokerFencedError (gRPC UNAVAILABLE, code
  BrokerFenced; the client's NotReady, which producers and consumers wait out). So
  does an open gate once the session no longer holds (`session_holds`, which
  declares LOST on the spot when the lease's safe time has passed): no write is
  admitted after that time, however late the event loop runs the session's timer.
- A write is acknowledged only if the gate stayed open from its admission until it
  was durable (`confirm(ticket)`, a ticket naming the open period it was admitted
  in): no answer leaves after the session was lost. A write refused at confirm is
  durable; its retry is answered as a duplicate (producers) or a no-op (acks, ends).
- It is closed and opened by Membership alone: closed while the broker is not yet
  registered in its cluster, when its session is LOST and when it stops; opened
  once it is registered (again, after a new session). Closing ends every producer
  and consumer stream of the loaded topics (`on_close` listeners), so their clients
  reconnect and retry until writes resume.
- The broker's own writes (wait_open) wait for the gate rather than fail.
- Standalone (the embedded store) the gate is open for ever.

Replicated topics can move: closing the gate also unloads them (registry), so each
is taken again at a new epoch, its ensemble fenced, before this broker serves it
again. Reopening does not check records itself: an unload still under way (held up
by a call to a member it cannot reach) leaves a topic that can write only to members
that never saw the newer epoch, and the members that did refuse it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stableline.broker.errors import BrokerError

log = logging.getLogger(__name__)


class BrokerFencedError(BrokerError):
    """This broker takes no writes now; retry (they resume once it is back in its
    cluster)."""

    code = "BrokerFenced"


_RESUME = "writes resume by themselves once the broker is back in its cluster: retry"


def _always() -> bool:
    return True


class WriteGate:
    """Open or closed; see the module docstring."""

    def __init__(
        self,
        session_holds: Callable[[], bool] = _always,
        closed_because: str | None = None,
    ):
        """`session_holds()`: whether the metadata session can still be relied on
        (checked on every admission); `closed_because`: start closed, for that reason."""
        self._session_holds = session_holds
        self._closed_because = closed_because
        # Open periods so far: a ticket is the period its write was admitted in.
        self._period = 0 if closed_because is not None else 1
        self._opened = asyncio.Event()
        if closed_because is None:
            self._opened.set()
        self._close_listeners: list[Callable[[BrokerFencedError], None]] = []

    @property
    def is_open(self) -> bool:
        return self._closed_because is None

    @property
    def closed_because(self) -> str | None:
        """Why the gate is closed (None while open)."""
        return self._closed_because

    def on_close(self, listener: Callable[[BrokerFencedError], None]) -> None:
        """`listener(error)` each time the gate closes, on the loop; it must not block."""
        self._close_listeners.append(listener)

    # ------------------------------------------------------------ writes

    def admit(self, target: object) -> int:
        """A ticket for one write to `target` (a topic); BrokerFencedError if closed."""
        if self._closed_because is None and self._session_holds():
            return self._period
        raise self.refusal(target)

    def confirm(self, ticket: int, target: object) -> None:
        """Before a write admitted with `ticket` is acknowledged: BrokerFencedError
        unless the gate stayed open since (the write is durable all the same)."""
        assert 0 <= ticket <= self._period, (ticket, self._period)
        if ticket == self._period and self._closed_because is None and self._session_holds():
            return
        raise self.refusal(target)

    async def wait_open(self) -> None:
        """Until the gate is open (at once if it is); for the broker's own writes,
        which wait rather than fail."""
        await self._opened.wait()

    def refusal(self, target: object) -> BrokerFencedError:
        because = self._closed_because or (
            "broker fenced: its cluster metadata session is past the time it can be relied on"
        )
        return BrokerFencedError(f"writes to {target} refused: {because}; {_RESUME}")

    # ------------------------------------------------------------ state (Membership)

    def close(self, because: str) -> None:
        """Stop admitting writes; end the streams of the loaded topics. `because` says
        who and why ("broker H:P is fenced: ..."). A second close keeps the first."""
        assert because
        if self._closed_because is not None:
            return
        self._closed_because = because
        self._opened.clear()
        log.warning("writes fenced: %s", because)
        error = BrokerFencedError(f"{because}; {_RESUME}")
        for listener in list(self._close_listeners):
            try:
                listener(error)
            except Exception:
                log.exception("write gate close listener %r failed", listener)

    def open(self) -> bool:
        """Admit writes again (a new open period), if the session holds (else it
        stays closed: False). Whether the gate is open."""
        if not self._session_holds():
            return False
        if self._closed_because is not None:
            log.info("writes resume (were fenced: %s)", self._closed_because)
            self._closed_because = None
            self._period += 1
            self._opened.set()
        assert self._opened.is_set()
        return True
