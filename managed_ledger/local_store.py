"""The broker's local store: one LMDB environment for every topic of a broker.

It holds ledger lists and cursors (ledger.py), and whatever its callers keep beside
them (transaction-buffer snapshots, the coordinator's log, the broker's own
records), each in a named database its owner names: the store opens a database on
its first use and knows none of their names. Writes are
not fsynced one by one: callers that need durability (a new ledger in the list)
ask for `sync()`; cursor positions are synced in the background, so a crash may
redeliver the last acknowledgements but never loses data. One process at a time
opens a store: it holds the directory's lock (data_dir_lock.py) until close().
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from managed_ledger.data_dir_lock import DataDirLock

# Named databases one store can hold (LMDB fixes the number when it opens).
MAX_DATABASES = 16


class LocalStore:
    """What one broker keeps of its own topics, on its own disk (never shared with
    another broker; the cluster's shared metadata is stableline.metadata's
    ClusterMetadataStore)."""

    def __init__(self, path: Path, map_size: int = 1 << 34):
        # Before LMDB opens anything: DataDirInUseError if another process has it.
        self._lock = DataDirLock.acquire(path)
        try:
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=MAX_DATABASES,
                sync=False,
                metasync=False,
                writemap=False,
                # The directory 0700, its files 0600: metadata is the broker's own.
                mode=0o700,
            )
        except BaseException:
            self._lock.release()
            raise
        self._dbs: dict[bytes, Any] = {}
        self._opening = threading.Lock()  # reads run in worker threads too
        # Group sync: callers waiting for durability share one fsync, run off the loop.
        self._sync_waiters: asyncio.Future | None = None
        self._sync_task: asyncio.Task | None = None

    def _db(self, name: bytes) -> Any:
        """The named database, opened (made, the first time) on its first use."""
        db = self._dbs.get(name)
        if db is None:
            with self._opening:
                db = self._dbs.get(name)
                if db is None:
                    db = self._dbs[name] = self._env.open_db(name)
        return db

    def get(self, db: bytes, key: str) -> bytes | None:
        with self._env.begin(db=self._db(db)) as txn:
            value = txn.get(key.encode())
            return bytes(value) if value is not None else None

    def get_json(self, db: bytes, key: str) -> Any:
        value = self.get(db, key)
        return json.loads(value) if value is not None else None

    def put(self, db: bytes, key: str, value: bytes) -> None:
        with self._env.begin(db=self._db(db), write=True) as txn:
            txn.put(key.encode(), value)

    def put_json(self, db: bytes, key: str, value: Any) -> None:
        self.put(db, key, json.dumps(value, separators=(",", ":")).encode())

    def write_many(self, db: bytes, puts: dict[str, bytes], deletes: list[str] = ()) -> None:
        """Apply puts and deletes in one LMDB transaction: all of them or none."""
        with self._env.begin(db=self._db(db), write=True) as txn:
            for key in deletes:
                txn.delete(key.encode())
            for key, value in puts.items():
                txn.put(key.encode(), value)

    def delete(self, db: bytes, key: str) -> None:
        with self._env.begin(db=self._db(db), write=True) as txn:
            txn.delete(key.encode())

    def delete_prefix(self, db: bytes, prefix: str) -> int:
        raw = prefix.encode()
        removed = 0
        with self._env.begin(db=self._db(db), write=True) as txn:
            cursor = txn.cursor()
            if cursor.set_range(raw):
                while cursor.key().startswith(raw):
                    removed += 1
                    if not cursor.delete():
                        break
        return removed

    def scan_prefix(self, db: bytes, prefix: str) -> Iterator[tuple[str, bytes]]:
        raw = prefix.encode()
        with self._env.begin(db=self._db(db)) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(raw):
                return
            for key, value in cursor:
                if not key.startswith(raw):
                    break
                yield key.decode(), bytes(value)

    def sync(self) -> None:
        """Make every committed write durable (fsync)."""
        self._env.sync(True)

    async def sync_async(self) -> None:
        """sync() without blocking the event loop; concurrent callers share fsyncs.

        Every write committed before the call is durable when it returns: a caller
        arriving while an fsync runs waits for the next one, which starts after it.
        """
        loop = asyncio.get_running_loop()
        if self._sync_waiters is None:
            self._sync_waiters = loop.create_future()
            if self._sync_task is None or self._sync_task.done():
                self._sync_task = loop.create_task(self._sync_rounds())
        await asyncio.shield(self._sync_waiters)

    async def _sync_rounds(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sync_waiters is not None:
            waiters, self._sync_waiters = self._sync_waiters, None
            try:
                await loop.run_in_executor(None, self.sync)
            except Exception as error:
                waiters.set_exception(error)
            else:
                waiters.set_result(None)

    def close(self) -> None:
        self._env.sync(True)
        self._env.close()
        self._lock.release()
