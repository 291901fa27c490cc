"""A mirror of every key under one prefix, kept current by a watch.

What a broker reads on every call without a round trip to the store (Pulsar's
metadata cache). Promises:

- After `start()` the mirror holds every key under the prefix, read in one scan
  made after its watch was opened, and from then on applies each change the watch
  delivers, in the store's order; a change is applied only over an older value of
  its key (by revision), so the mirror never goes back to an older state, and it
  converges to the store.
- `revision` is the revision of the last change applied. A writer that wants its
  next read on this broker to see its write (read your writes) waits with
  `caught_up(revision)` for the watch to bring the write back, at most
  `CATCH_UP_TIMEOUT_S` (the write is durable anyway; only this broker's view lags).
- `refresh(path)` reads one key through, for an answer that must not lag by the
  watch's delay (a key another broker has just created); what it reads is kept
  only if no later change was applied meanwhile.
- A watch that falls behind (WatchOverflow) is opened again and every key re-read.
- `listeners` are called with each path whose value changed (set, replaced or
  removed), on the event loop, after the change is applied; they must not block.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from stableline.metadata.errors import MetadataStoreUnavailable, WatchOverflow
from stableline.metadata.paths import check_path
from stableline.metadata.store import ClusterMetadataStore, Watch
from stableline.metadata.values import GetResult, Notification, NotificationType

log = logging.getLogger(__name__)

# How long a writer waits for the watch to bring its own write back.
CATCH_UP_TIMEOUT_S = 5.0
# Retries of a re-read after the store failed back off up to this.
_MAX_RETRY_DELAY_S = 2.0


class PrefixMirror:
    def __init__(self, store: ClusterMetadataStore, prefix: str):
        self.store = store
        self.prefix = check_path(prefix)
        self.listeners: list[Callable[[str], None]] = []
        self.revision = 0
        self._entries: dict[str, GetResult] = {}
        self._task: asyncio.Task | None = None
        self._advanced = asyncio.Event()

    # --- reading ----------------------------------------------------------------------

    def get(self, path: str) -> GetResult | None:
        return self._entries.get(path)

    def items(self) -> Iterator[tuple[str, GetResult]]:
        """Every (path, result), in no particular order."""
        return iter(list(self._entries.items()))

    def __len__(self) -> int:
        return len(self._entries)

    async def refresh(self, path: str) -> GetResult | None:
        """The key as the store has it now; kept in the mirror unless the watch
        applied a later change meanwhile (then the watch's view is at least as new)."""
        result = await self.store.get(path)
        if result is not None and result.stat.modified_revision > self.revision:
            # Not seen by the watch yet: every change applied so far is older.
            self._set(path, result)
        return result

    async def caught_up(self, revision: int) -> bool:
        """Wait until the changes up to `revision` are applied (True), or
        CATCH_UP_TIMEOUT_S passed (False, logged)."""
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while self.revision < revision:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._task is None or self._task.done():
                log.warning(
                    "metadata under %s: the watch has not brought revision %d back "
                    "(at %d); this broker reads the change once it does",
                    self.prefix,
                    revision,
                    self.revision,
                )
                return False
            self._advanced.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), remaining)
        return True

    # --- following ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the watch, read every key, then follow the watch (MetadataStoreError
        if the store cannot be read now)."""
        assert self._task is None
        watch = await self.store.watch(self.prefix)
        try:
            await self._load()
        except BaseException:
            watch.close()
            raise
        self._task = asyncio.create_task(self._follow(watch), name=f"mirror:{self.prefix}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _load(self) -> None:
        entries = dict(await self.store.scan(self.prefix))
        old, self._entries = self._entries, entries
        for path in old.keys() | entries.keys():
            if old.get(path) != entries.get(path):
                self._changed(path)

    async def _follow(self, watch: Watch) -> None:
        while True:
            try:
                async for notification in watch:
                    self._apply(notification)
                return  # the store closed
            except WatchOverflow:
                log.warning("watch on %s fell behind; re-reading every key", self.prefix)
                watch = await self._watch_again()

    async def _watch_again(self) -> Watch:
        delay = 0.1
        while True:
            try:
                watch = await self.store.watch(self.prefix)
                try:
                    await self._load()
                except BaseException:
                    watch.close()
                    raise
                return watch
            except MetadataStoreUnavailable as error:
                log.warning("cannot re-read %s yet: %s", self.prefix, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY_DELAY_S)

    def _apply(self, notification: Notification) -> None:
        path, current = notification.path, self._entries.get(notification.path)
        if notification.type is NotificationType.DELETED:
            if current is not None and current.stat.modified_revision < notification.revision:
                del self._entries[path]
                self._changed(path)
        else:
            result = notification.result
            assert result is not None, notification
            if current is None or current.stat.modified_revision < result.stat.modified_revision:
                self._set(path, result)
        self.revision = max(self.revision, notification.revision)
        self._advanced.set()

    def _set(self, path: str, result: GetResult) -> None:
        self._entries[path] = result
        self._changed(path)

    def _changed(self, path: str) -> None:
        for listener in list(self.listeners):
            try:
                listener(path)
            except Exception:
                log.exception("listener %r failed on %s", listener, path)
