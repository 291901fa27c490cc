"""The one interface of the metadata store, and what every implementation shares.

A metadata store keeps small values under paths (`/a/b`) with a version each, for
the brokers of one cluster to agree on: who is alive, who owns what. Its promises,
whatever the backend:

- `put` with `expected_version` is a compare-and-set: of two writers naming the
  same version exactly one wins, the other gets `BadVersion` (`AlreadyExists` when
  it asked for creation, `expected_version=-1`) and nothing of its write is kept.
- A write has returned only once it is durable; a later `get` anywhere sees it.
- An ephemeral key lives as long as the session of the store that wrote it: it is
  deleted when that store closes or its session lapses (etcd lease), never while the
  session is CONNECTED or SUSPENDED.
- `watch(prefix)` delivers a `Notification` for every change under the prefix made
  after `watch` returned, in the order of the changes, with the change's revision
  and the value written, until the watch is closed; a reader that falls
  `MAX_PENDING_NOTIFICATIONS` behind gets `WatchOverflow` instead.
- `scan(prefix)` reads every key under a prefix at one moment; a watch opened
  before it, then the scan, then the watch's changes, misses nothing.
- The session state (`session_state`, `add_session_listener`) says whether the
  store's ephemeral keys can be relied on; LOST is declared before the backend
  expires the session, so a holder of ephemeral ownership can stop in time.
  `session_holds()` answers the same question at the instant it is asked: a holder
  checks it before each act, and when the time to declare LOST has passed it
  declares LOST on the spot (its listeners run) rather than waiting for a timer.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from stableline.metadata.errors import MetadataStoreUnavailable, WatchOverflow
from stableline.metadata.paths import check_prefix, under
from stableline.metadata.values import (
    GetResult,
    Notification,
    SessionEvent,
    SessionState,
    Stat,
)

log = logging.getLogger(__name__)

# Keys one write_guarded may change: etcd refuses a transaction of more than 128
# operations by default (--max-txn-ops).
MAX_GUARDED_OPS = 100

# Notifications one watch holds for its reader before it ends with WatchOverflow.
MAX_PENDING_NOTIFICATIONS = 10_000

_STATE_AFTER = {
    SessionEvent.CONNECTION_LOST: SessionState.SUSPENDED,
    SessionEvent.RECONNECTED: SessionState.CONNECTED,
    SessionEvent.SESSION_LOST: SessionState.LOST,
    SessionEvent.SESSION_REESTABLISHED: SessionState.CONNECTED,
}


class Watch:
    """Notifications under one prefix, as an async iterator; `close()` ends it."""

    def __init__(self, prefix: str, on_close: Callable[[Watch], None]):
        self.prefix = prefix
        self._queue: deque[Notification] = deque()
        self._wakeup = asyncio.Event()
        self._ended: BaseException | None = None
        self._on_close = on_close

    def _deliver(self, notification: Notification) -> None:
        if self._ended is not None:
            return
        if len(self._queue) >= MAX_PENDING_NOTIFICATIONS:
            self._end(
                WatchOverflow(
                    f"watch on {self.prefix} fell {MAX_PENDING_NOTIFICATIONS} notifications "
                    f"behind and ended; re-read what it covers and watch again"
                )
            )
            return
        self._queue.append(notification)
        self._wakeup.set()

    def _end(self, reason: BaseException) -> None:
        if self._ended is None:
            self._ended = reason
            self._on_close(self)
        self._wakeup.set()

    @property
    def pending(self) -> int:
        """Notifications delivered and not yet read."""
        return len(self._queue)

    @property
    def ended(self) -> bool:
        """Whether the watch ended (closed, overflowed or its store closed); what it
        holds can still be read."""
        return self._ended is not None

    def close(self) -> None:
        """End the watch; its iterator stops after what it already holds."""
        self._end(StopAsyncIteration())

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Notification:
        while not self._queue:
            if self._ended is not None:
                raise self._ended
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class ClusterMetadataStore(abc.ABC):
    """Versioned keys under paths, ephemeral keys tied to a session, watches on prefixes:
    the metadata a cluster's brokers share (a broker's own ledgers and cursors are in
    its managed_ledger LocalStore)."""

    def __init__(self, description: str):
        # What the store is, for messages: a URL (password left out) or a directory.
        self.description = description
        self._watches: list[Watch] = []
        self._session_state = SessionState.CONNECTED
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._session_changed = asyncio.Event()

    # --- key-value ------------------------------------------------------------------

    @abc.abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """The value and stat at `path`, None if there is no such key."""

    @abc.abstractmethod
    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
    ) -> Stat:
        """Write `value` at `path`; the new stat.

        `expected_version` None: unconditionally; -1: only if there is no such key
        (else `AlreadyExists`); N >= 0: only if the key is at version N (else
        `BadVersion`). `ephemeral`: the key goes with this store's session.
        """

    @abc.abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> int:
        """Delete the key (`NotFound` if absent; `BadVersion` if not at the version);
        the store's revision of the deletion (what its DELETED notification carries)."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names one level below `path` (sorted; empty when nothing is below it)."""

    @abc.abstractmethod
    async def scan(self, prefix: str) -> list[tuple[str, GetResult]]:
        """Every key at or below `prefix` ("/" for all) with its value and stat, sorted
        by path; one read, so it shows the store at one moment."""

    @abc.abstractmethod
    async def write_guarded(
        self, guard: str, guard_version: int, puts: dict[str, bytes], deletes: list[str]
    ) -> None:
        """Write `puts` and delete `deletes` (absent keys are skipped) together, only if
        the key `guard` is at `guard_version` (else `BadVersion`, nothing written): a
        log whose writer holds `guard` at that version, and whose every write stops
        once another writer has changed it (fencing). At most MAX_GUARDED_OPS keys;
        no key may be ephemeral."""

    async def exists(self, path: str) -> bool:
        return await self.get(path) is not None

    # --- watches --------------------------------------------------------------------

    async def open_to_anyone(self) -> bool:
        """Whether a client with no credentials may read this store: a shared store
        anyone on the network can write grants into. The embedded store is this
        broker's own files: no."""
        return False

    async def watch(self, prefix: str) -> Watch:
        """Notifications for `prefix` and every path below it ("/" for all).

        Changes made after this returns are delivered; see the module docstring.
        """
        self._check_open()
        watch = Watch(check_prefix(prefix), self._watches.remove)
        await self._start_watching()
        self._watches.append(watch)
        return watch

    async def _start_watching(self) -> None:
        """Backends that must subscribe to change events do it here (idempotent)."""
        return None

    def _notify(self, notification: Notification) -> None:
        for watch in list(self._watches):
            if under(watch.prefix, notification.path):
                watch._deliver(notification)

    def _end_watches(self, reason: BaseException) -> None:
        for watch in list(self._watches):
            watch._end(reason)

    # --- session ----------------------------------------------------------------------

    @property
    def session_state(self) -> SessionState:
        return self._session_state

    def session_holds(self) -> bool:
        """Whether this session's ephemeral keys can be relied on now (CONNECTED or
        SUSPENDED, and not past the time LOST is due; see the module docstring)."""
        return self._session_state in (SessionState.CONNECTED, SessionState.SUSPENDED)

    def add_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """`listener(event)` on every session change, on the event loop; it must not block."""
        self._session_listeners.append(listener)

    async def wait_for_session(self, *states: SessionState, timeout_s: float) -> SessionState:
        """Wait until the session is in one of `states`; TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self._session_state not in states:
            self._session_changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"session of {self.description} is {self._session_state.value}, "
                    f"not {'/'.join(s.value for s in states)} after {timeout_s} s"
                )
            try:
                await asyncio.wait_for(self._session_changed.wait(), remaining)
            except TimeoutError:
                continue
        return self._session_state

    def _session_event(self, event: SessionEvent) -> None:
        if self._session_state is SessionState.CLOSED:
            return
        state = _STATE_AFTER[event]
        log.log(
            logging.INFO if state is SessionState.CONNECTED else logging.WARNING,
            "metadata store %s: %s (session %s)",
            self.description,
            event.value,
            state.value,
        )
        self._session_state = state
        self._session_changed.set()
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener %r failed on %s", listener, event.value)

    def _mark_closed(self) -> None:
        self._session_state = SessionState.CLOSED
        self._session_changed.set()
        self._end_watches(StopAsyncIteration())

    def _check_open(self) -> None:
        if self._session_state is SessionState.CLOSED:
            raise MetadataStoreUnavailable(f"metadata store {self.description} is closed")

    # --- life ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def close(self) -> None:
        """Delete this session's ephemeral keys (or let them lapse), end watches, release."""

    async def __aenter__(self) -> ClusterMetadataStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
