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

Replicated topics can move: each writes through a `TopicWriteGate` pinned to the
gate's state when its load began (`WriteGate.pinned`), which refuses for good once
the gate has closed or opened since. A topic loaded before a close therefore never
writes again, whatever the gate does next, even while its unload is still under way
(the registry unloads it, and loads it again on its next use: taken at a new epoch,
its ensemble fenced, before this broker serves it again). Its own waits for the gate
(wait_open) end at once with the refusal instead of outliving the close.

A topic being moved or unloaded (cluster/topic_moves.py) sees its gate through a
`HandOverGate`: no new write is admitted (TopicMovingError, a BrokerFencedError, so
a producer's stream ends unanswered and the client sends again to wherever a fresh
lookup names), while every write admitted before is still confirmed as the gate it
came through says: what was accepted is answered.
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
        # Closes and opens so far (a pinned view is current while this stays put), and
        # an event set (then replaced) at each, for pinned views waiting on the gate.
        self._generation = 0
        self._changed = asyncio.Event()

    @property
    def is_open(self) -> bool:
        return self._closed_because is None

    @property
    def closed_because(self) -> str | None:
        """Why the gate is closed (None while open)."""
        return self._closed_because

    @property
    def generation(self) -> int:
        """How many times the gate closed or opened: a write admitted through a view
        pinned at another generation is refused."""
        return self._generation

    def pinned(self, generation: int, target: object) -> TopicWriteGate:
        """The gate as `target` (a replicated topic whose load began at `generation`)
        sees it: see TopicWriteGate."""
        return TopicWriteGate(self, generation, target)

    async def wait_changed(self) -> None:
        """Until the gate next closes or opens."""
        await self._changed.wait()

    def _change(self) -> None:
        self._generation += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

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
        self._change()
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
            self._change()
        assert self._opened.is_set()
        return True


class TopicMovingError(BrokerFencedError):
    """The topic is being handed over to another broker (or unloaded here): look it
    up again and retry; the broker a fresh lookup names serves it."""

    code = "TopicFenced"


class TopicWriteGate:
    """The broker's write gate as one replicated topic sees it: open only while the
    gate is open at the generation the topic's load began in (WriteGate.pinned). Once
    the gate has closed (or opened) since, the topic is `retired`: every write is
    refused for good, wait_open included, since another broker may have taken the
    topic at a newer epoch meanwhile. The same calls as WriteGate's for writes."""

    def __init__(self, gate: WriteGate, generation: int, target: object):
        self._gate = gate
        self._generation = generation
        self._target = target

    @property
    def retired(self) -> bool:
        """The gate closed or opened since the topic's load began: it writes no more."""
        return self._gate.generation != self._generation

    @property
    def is_open(self) -> bool:
        return self._gate.is_open and not self.retired

    @property
    def closed_because(self) -> str | None:
        if self.retired:
            return self._retired_because()
        return self._gate.closed_because

    def _retired_because(self) -> str:
        return (
            f"this broker's write gate closed after it took {self._target} (its cluster "
            f"session was lost, or it is stopping), so another broker may have taken it: "
            f"it is taken again, at a new epoch, before this broker writes to it again"
        )

    def admit(self, target: object) -> int:
        if self.retired:
            raise self.refusal(target)
        return self._gate.admit(target)

    def confirm(self, ticket: int, target: object) -> None:
        if self.retired:
            raise self.refusal(target)
        self._gate.confirm(ticket, target)

    async def wait_open(self) -> None:
        """Until the gate is open at the topic's generation; BrokerFencedError once it
        is retired (it would never open again for this topic)."""
        while True:
            if self.retired:
                raise self.refusal(self._target)
            if self._gate.is_open:
                return
            await self._gate.wait_changed()

    def refusal(self, target: object) -> BrokerFencedError:
        if self.retired:
            return BrokerFencedError(
                f"writes to {target} refused: {self._retired_because()}; retry"
            )
        return self._gate.refusal(target)


class HandOverGate:
    """A topic's gate while it is handed over (see the module docstring): admits
    nothing new, confirms what `inner` admitted before, as `inner` would."""

    def __init__(self, inner: WriteGate | TopicWriteGate, because: str):
        self.inner = inner
        self.because = because
        # Set once the hand-over is over: the topic closed here, or writes resumed.
        self._over = asyncio.Event()

    def end(self) -> None:
        """The hand-over is over (the topic closed, or takes writes here again)."""
        self._over.set()

    async def wait_over(self) -> None:
        await self._over.wait()

    @property
    def retired(self) -> bool:
        return isinstance(self.inner, TopicWriteGate) and self.inner.retired

    @property
    def is_open(self) -> bool:
        return False

    @property
    def closed_because(self) -> str:
        return self.because

    def admit(self, target: object) -> int:
        raise self.refusal(target)

    def confirm(self, ticket: int, target: object) -> None:
        self.inner.confirm(ticket, target)

    async def wait_open(self) -> None:
        """The broker's own writes to a topic leaving here are the next owner's to make."""
        raise TopicMovingError(f"{self.because}; look it up again")

    def refusal(self, target: object) -> TopicMovingError:
        return TopicMovingError(f"writes to {target} refused: {self.because}; look it up again")
