"""The embedded metadata store: LMDB in one directory, for a single broker.

What `make run` uses: no server to start. It keeps the interface's promises within
one process, which holds the directory's lock (a second opener gets
`MetadataStoreUnavailable`):

- Writes are group-committed: a write's LMDB transaction commits at once (so a `get`
  right after sees it), and the write returns, and its watchers hear of it, after
  the fsync that made it durable; concurrent writers share fsyncs.
- The session is the store's life: ephemeral keys are deleted at `close()`, and any
  left by a process that died are deleted on the next open, before it returns.
- Revisions are a counter kept in the same LMDB transaction as each write, so
  `created_revision`/`modified_revision` order changes as etcd's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
from pathlib import Path

import lmdb

from stableline.metadata.errors import (
    AlreadyExists,
    BadVersion,
    MetadataStoreUnavailable,
    NotFound,
)
from stableline.metadata.paths import check_path, check_prefix, child_names, children_prefix, under
from stableline.metadata.store import MAX_GUARDED_OPS, ClusterMetadataStore
from stableline.metadata.values import GetResult, Notification, NotificationType, Stat

# version, created revision, modified revision, ephemeral; then the value.
_HEADER = struct.Struct("<qqqB")
_REVISION = b"revision"
_MAP_SIZE = 1 << 32


def _encode(stat: Stat, value: bytes) -> bytes:
    header = _HEADER.pack(
        stat.version, stat.created_revision, stat.modified_revision, stat.ephemeral
    )
    return header + value


def _decode(raw: bytes) -> GetResult:
    version, created, modified, ephemeral = _HEADER.unpack_from(raw)
    return GetResult(bytes(raw[_HEADER.size :]), Stat(version, created, modified, bool(ephemeral)))


class EmbeddedMetadataStore(ClusterMetadataStore):
    def __init__(self, directory: Path, *, fsync: bool = True):
        super().__init__(str(directory))
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_file = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_file)
            raise MetadataStoreUnavailable(
                f"metadata store {directory} is open in another process; stop it first"
            ) from None
        self._env = lmdb.open(
            str(directory), map_size=_MAP_SIZE, max_dbs=4, sync=False, metasync=False, mode=0o700
        )
        self._kv = self._env.open_db(b"kv")
        self._ephemeral = self._env.open_db(b"ephemeral")
        self._meta = self._env.open_db(b"meta")
        self._fsync = fsync
        # Group commit: writes committed since the running fsync started, and the
        # future their writers wait on (see _durable).
        self._pending: list[Notification] = []
        self._sync_waiters: asyncio.Future | None = None
        self._sync_task: asyncio.Task | None = None
        # A previous run's session is over: its ephemeral keys go before anyone reads.
        self._delete_ephemeral_keys()
        self._env.sync(True)

    # --- reads ----------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        self._check_open()
        with self._env.begin(db=self._kv) as txn:
            raw = txn.get(check_path(path).encode())
            return _decode(raw) if raw is not None else None

    async def exists(self, path: str) -> bool:
        self._check_open()
        with self._env.begin(db=self._kv) as txn:
            return txn.get(check_path(path).encode()) is not None

    async def children(self, path: str) -> list[str]:
        self._check_open()
        prefix = children_prefix(path)
        raw_prefix = prefix.encode()
        keys = []
        with self._env.begin(db=self._kv) as txn:
            cursor = txn.cursor()
            if cursor.set_range(raw_prefix):
                for key in cursor.iternext(keys=True, values=False):
                    if not key.startswith(raw_prefix):
                        break
                    keys.append(key.decode())
        return child_names(prefix, keys)

    async def scan(self, prefix: str) -> list[tuple[str, GetResult]]:
        self._check_open()
        check_prefix(prefix)
        found = []
        with self._env.begin(db=self._kv) as txn:
            cursor = txn.cursor()
            start = b"/" if prefix == "/" else prefix.encode()
            if cursor.set_range(start):
                for key, raw in cursor.iternext():
                    path = bytes(key).decode()
                    if not under(prefix, path):
                        if path.startswith(prefix):
                            continue  # a sibling such as /a/bc after /a/b's keys
                        break
                    found.append((path, _decode(raw)))
        return found

    # --- writes ---------------------------------------------------------------------

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
    ) -> Stat:
        self._check_open()
        key = check_path(path).encode()
        assert expected_version is None or expected_version >= -1, expected_version
        with self._env.begin(write=True) as txn:
            raw = txn.get(key, db=self._kv)
            current = _decode(raw).stat if raw is not None else None
            if expected_version == -1 and current is not None:
                raise AlreadyExists(path, current.version)
            if (
                expected_version is not None
                and expected_version >= 0
                and (current is None or current.version != expected_version)
            ):
                raise BadVersion(path, expected_version, current and current.version)
            revision = self._next_revision(txn)
            if current is None:
                stat = Stat(0, revision, revision, ephemeral)
            else:
                stat = Stat(current.version + 1, current.created_revision, revision, ephemeral)
            txn.put(key, _encode(stat, value), db=self._kv)
            if ephemeral:
                txn.put(key, b"", db=self._ephemeral)
            elif current is not None and current.ephemeral:
                txn.delete(key, db=self._ephemeral)
        kind = NotificationType.CREATED if current is None else NotificationType.MODIFIED
        self._pending.append(Notification(kind, path, revision, GetResult(value, stat)))
        await self._durable()
        return stat

    async def write_guarded(
        self, guard: str, guard_version: int, puts: dict[str, bytes], deletes: list[str]
    ) -> None:
        self._check_open()
        assert guard_version >= 0 and len(puts) + len(deletes) <= MAX_GUARDED_OPS
        notifications = []
        with self._env.begin(write=True) as txn:
            raw = txn.get(check_path(guard).encode(), db=self._kv)
            current = _decode(raw).stat if raw is not None else None
            if current is None or current.version != guard_version:
                raise BadVersion(guard, guard_version, current and current.version)
            revision = self._next_revision(txn)
            for path, value in puts.items():
                key = check_path(path).encode()
                raw = txn.get(key, db=self._kv)
                before = _decode(raw).stat if raw is not None else None
                assert before is None or not before.ephemeral, path
                if before is None:
                    stat = Stat(0, revision, revision, False)
                    kind = NotificationType.CREATED
                else:
                    stat = Stat(before.version + 1, before.created_revision, revision, False)
                    kind = NotificationType.MODIFIED
                txn.put(key, _encode(stat, value), db=self._kv)
                notifications.append(Notification(kind, path, revision, GetResult(value, stat)))
            for path in deletes:
                if txn.delete(check_path(path).encode(), db=self._kv):
                    notifications.append(Notification(NotificationType.DELETED, path, revision))
        self._pending.extend(notifications)
        await self._durable()

    async def delete(self, path: str, expected_version: int | None = None) -> int:
        self._check_open()
        key = check_path(path).encode()
        with self._env.begin(write=True) as txn:
            raw = txn.get(key, db=self._kv)
            if raw is None:
                raise NotFound(path)
            current = _decode(raw).stat
            if expected_version is not None and current.version != expected_version:
                raise BadVersion(path, expected_version, current.version)
            txn.delete(key, db=self._kv)
            txn.delete(key, db=self._ephemeral)
            revision = self._next_revision(txn)
        self._pending.append(Notification(NotificationType.DELETED, path, revision))
        await self._durable()
        return revision

    def _next_revision(self, txn: lmdb.Transaction) -> int:
        raw = txn.get(_REVISION, db=self._meta)
        revision = (int(raw) if raw is not None else 0) + 1
        txn.put(_REVISION, str(revision).encode(), db=self._meta)
        return revision

    def _delete_ephemeral_keys(self) -> tuple[list[str], int]:
        """The ephemeral keys deleted, and the revision of their deletion."""
        revision = 0
        with self._env.begin(write=True) as txn:
            keys = list(txn.cursor(db=self._ephemeral).iternext(keys=True, values=False))
            for key in keys:
                txn.delete(key, db=self._kv)
                txn.delete(key, db=self._ephemeral)
            if keys:
                revision = self._next_revision(txn)
        return [bytes(key).decode() for key in keys], revision

    # --- durability -----------------------------------------------------------------

    async def _durable(self) -> None:
        """Return once every write committed before the call is fsynced.

        A writer arriving while an fsync runs waits for the next one, which starts
        after it; notifications go out in commit order after their fsync.
        """
        if not self._fsync:
            self._flush_notifications(self._take_pending())
            return
        loop = asyncio.get_running_loop()
        if self._sync_waiters is None:
            self._sync_waiters = loop.create_future()
            if self._sync_task is None or self._sync_task.done():
                self._sync_task = loop.create_task(self._sync_rounds())
        await asyncio.shield(self._sync_waiters)

    def _take_pending(self) -> list[Notification]:
        pending, self._pending = self._pending, []
        return pending

    def _flush_notifications(self, notifications: list[Notification]) -> None:
        for notification in notifications:
            self._notify(notification)

    async def _sync_rounds(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sync_waiters is not None:
            # Taken together, with no await between: the writes whose notifications
            # this round sends are exactly those whose writers wait on `waiters`.
            waiters, self._sync_waiters = self._sync_waiters, None
            notifications = self._take_pending()
            try:
                await loop.run_in_executor(None, self._env.sync, True)
            except lmdb.Error as error:
                waiters.set_exception(
                    MetadataStoreUnavailable(
                        f"metadata store {self.description}: fsync failed ({error}); "
                        f"the write may not survive a crash"
                    )
                )
            else:
                waiters.set_result(None)
            self._flush_notifications(notifications)

    # --- life -------------------------------------------------------------------------

    async def close(self) -> None:
        if self._lock_file < 0:
            return
        if self._sync_task is not None and not self._sync_task.done():
            with contextlib.suppress(Exception):
                await self._sync_task
        deleted, revision = self._delete_ephemeral_keys()
        self._env.sync(True)
        self._flush_notifications(self._take_pending())
        for path in deleted:
            self._notify(Notification(NotificationType.DELETED, path, revision))
        self._mark_closed()
        self._env.close()
        os.close(self._lock_file)
        self._lock_file = -1
