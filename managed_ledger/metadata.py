"""The metadata store: one LMDB environment for every topic of a broker.

It holds ledger lists, cursors and (for the other engines) transaction-buffer
snapshots and the coordinator log, each in its own named database. Writes are
not fsynced one by one: callers that need durability (a new ledger in the list)
ask for `sync()` / `sync_async()`; cursor positions are synced in the background,
so a crash may redeliver the last acknowledgements but never loses data. One
process at a time opens a store: it holds the directory's lock (data_dir_lock.py)
until close().

Group commit: inside a running event loop, writes are not committed on the loop
either. They are staged in memory (reads see them at once) and a writer task
commits everything staged in one LMDB transaction in a worker thread, followed
by the fsync when someone waits for one (sync_async). An LMDB commit on the loop
would stall it while another thread fsyncs the same file, and one transaction
per write costs more than one per round. Order is kept: staged layers commit
oldest first, all in one transaction, under one lock, whoever commits them.
`sync_async` returns once every write staged before the call is committed and
fsynced. A write staged and not yet committed when the process is killed is
lost, as an unsynced one may be: only what a sync returned for is promised.
Outside an event loop (tools, unit tests) every write commits at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from managed_ledger.data_dir_lock import DataDirLock

log = logging.getLogger(__name__)

DATABASES = (b"ledgers", b"cursors", b"snapshots", b"coordinator", b"broker")
# LMDB's default limit on a key's length (mdb_env_get_maxkeysize).
MAX_KEY_BYTES = 511
# A staged delete.
_DELETED = None


class _Layer:
    """Writes staged together: (db, key) -> value, or _DELETED. Committed in order."""

    __slots__ = ("committed", "writes")

    def __init__(self) -> None:
        self.writes: dict[tuple[bytes, bytes], bytes | None] = {}
        self.committed = False


def _checked_key(key: str) -> bytes:
    raw = key.encode()
    if not raw or len(raw) > MAX_KEY_BYTES:
        raise ValueError(f"metadata key must be 1..{MAX_KEY_BYTES} bytes, got {len(raw)}")
    return raw


class MetadataStore:
    def __init__(self, path: Path, map_size: int = 1 << 34):
        # Before LMDB opens anything: DataDirInUseError if another process has it.
        self._lock = DataDirLock.acquire(path)
        try:
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=len(DATABASES) + 4,
                sync=False,
                metasync=False,
                writemap=False,
                # The directory 0700, its files 0600: metadata is the broker's own.
                mode=0o700,
            )
        except BaseException:
            self._lock.release()
            raise
        self._dbs = {name: self._env.open_db(name) for name in DATABASES}
        # Staged writes: the open layer (loop only), then layers handed to a commit,
        # oldest first; a committed layer leaves the list once its round is over.
        self._open_layer = _Layer()
        self._layers: list[_Layer] = []
        # Guards the open layer and the list (a worker thread may commit: sync());
        # the commit lock keeps commits one at a time, in layer order.
        self._stage_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        # Group commit: callers waiting for durability share one commit and fsync.
        self._sync_waiters: asyncio.Future | None = None
        self._writer: asyncio.Task | None = None

    def _db(self, name: bytes) -> Any:
        return self._dbs[name]

    # ------------------------------------------------------------ reads

    def _staged(self, db: bytes, raw: bytes) -> tuple[bool, bytes | None]:
        """(True, value or None when deleted) for a staged key, newest first."""
        key = (db, raw)
        if key in self._open_layer.writes:
            return True, self._open_layer.writes[key]
        for layer in reversed(self._layers):
            if key in layer.writes:
                return True, layer.writes[key]
        return False, None

    def get(self, db: bytes, key: str) -> bytes | None:
        raw = key.encode()
        if self._open_layer.writes or self._layers:
            staged, value = self._staged(db, raw)
            if staged:
                return value
        with self._env.begin(db=self._db(db)) as txn:
            value = txn.get(raw)
            return bytes(value) if value is not None else None

    def get_json(self, db: bytes, key: str) -> Any:
        value = self.get(db, key)
        return json.loads(value) if value is not None else None

    def scan_prefix(self, db: bytes, prefix: str) -> Iterator[tuple[str, bytes]]:
        if not self._open_layer.writes and not self._layers:
            yield from self._scan_committed(db, prefix)
            return
        raw = prefix.encode()
        found = {key.encode(): value for key, value in self._scan_committed(db, prefix)}
        for layer in [*list(self._layers), self._open_layer]:
            for (layer_db, key), value in list(layer.writes.items()):
                if layer_db == db and key.startswith(raw):
                    if value is _DELETED:
                        found.pop(key, None)
                    else:
                        found[key] = value
        for key in sorted(found):
            yield key.decode(), found[key]

    def _scan_committed(self, db: bytes, prefix: str) -> Iterator[tuple[str, bytes]]:
        raw = prefix.encode()
        with self._env.begin(db=self._db(db)) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(raw):
                return
            for key, value in cursor:
                if not key.startswith(raw):
                    break
                yield key.decode(), bytes(value)

    # ------------------------------------------------------------ writes

    def put(self, db: bytes, key: str, value: bytes) -> None:
        self.write_many(db, {key: value})

    def put_json(self, db: bytes, key: str, value: Any) -> None:
        self.put(db, key, json.dumps(value, separators=(",", ":")).encode())

    def write_many(self, db: bytes, puts: dict[str, bytes], deletes: list[str] = ()) -> None:
        """Apply puts and deletes in one LMDB transaction: all of them or none."""
        assert db in self._dbs, db
        writes = {(db, _checked_key(key)): _DELETED for key in deletes}
        writes.update({(db, _checked_key(key)): bytes(value) for key, value in puts.items()})
        self._stage(writes)

    def delete(self, db: bytes, key: str) -> None:
        self.write_many(db, {}, [key])

    def delete_prefix(self, db: bytes, prefix: str) -> int:
        keys = [key for key, _ in self.scan_prefix(db, prefix)]
        if keys:
            self.write_many(db, {}, keys)
        return len(keys)

    def _stage(self, writes: dict[tuple[bytes, bytes], bytes | None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._stage_lock:
            self._open_layer.writes.update(writes)
        if loop is None:
            self._commit_staged()
        elif self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_rounds())

    def _seal_open_layer(self) -> None:
        with self._stage_lock:
            if self._open_layer.writes:
                self._layers.append(self._open_layer)
                self._open_layer = _Layer()

    def _commit_layers(self) -> None:
        """Commit every staged layer not committed yet, in order, in one LMDB
        transaction (any thread). A failed commit leaves them staged."""
        with self._commit_lock:
            with self._stage_lock:
                layers = [layer for layer in self._layers if not layer.committed]
            if not layers:
                return
            with self._env.begin(write=True) as txn:
                for layer in layers:
                    for (db, key), value in layer.writes.items():
                        if value is _DELETED:
                            txn.delete(key, db=self._dbs[db])
                        else:
                            txn.put(key, value, db=self._dbs[db])
            for layer in layers:
                layer.committed = True

    def _drop_committed(self) -> None:
        with self._stage_lock:
            self._layers = [layer for layer in self._layers if not layer.committed]

    def _commit_staged(self) -> None:
        """Commit everything staged, on this thread (blocking)."""
        self._seal_open_layer()
        try:
            self._commit_layers()
        finally:
            self._drop_committed()

    def sync(self) -> None:
        """Commit what is staged and make every committed write durable (fsync)."""
        self._commit_staged()
        self._env.sync(True)

    async def sync_async(self) -> None:
        """sync() without blocking the event loop; concurrent callers share commits
        and fsyncs.

        Every write staged before the call is durable when it returns: a caller
        arriving while a round runs waits for the next one, which starts after it.
        """
        loop = asyncio.get_running_loop()
        if self._sync_waiters is None:
            self._sync_waiters = loop.create_future()
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_rounds())
        await asyncio.shield(self._sync_waiters)

    async def _write_rounds(self) -> None:
        """Commit what is staged (and fsync when asked) in a worker thread, in rounds,
        until nothing is staged or waited for."""
        loop = asyncio.get_running_loop()
        while self._open_layer.writes or self._sync_waiters is not None:
            self._seal_open_layer()
            waiters, self._sync_waiters = self._sync_waiters, None
            try:
                await loop.run_in_executor(None, self._commit_round, waiters is not None)
            except Exception as error:
                log.error("metadata store: commit failed: %s", error)
                if waiters is not None:
                    waiters.set_exception(error)
                else:
                    # Nobody to tell: the writes stay staged and the next round
                    # (a sync, or close) tries them again.
                    return
            else:
                if waiters is not None:
                    waiters.set_result(None)
            finally:
                self._drop_committed()

    def _commit_round(self, fsync: bool) -> None:
        if fsync:
            self.sync()  # writes staged since the round began go along
        else:
            self._commit_layers()

    def close(self) -> None:
        self._commit_staged()
        self._env.sync(True)
        self._env.close()
        self._lock.release()
