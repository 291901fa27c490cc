"""One writer per storage directory: an exclusive `flock` held for the owner's life.

Two processes writing one local store and its ledgers would each create ledgers,
rewrite ledger lists and move cursors under the other, and LMDB's own lock allows
that. Whoever opens a storage directory first takes `owner.lock` in it with
`flock(LOCK_EX | LOCK_NB)` and keeps the descriptor open; any other process is
refused at once with `DataDirInUseError`, which names the directory and the pid
written into the file by the holder.

Promises:
- The lock is the kernel's, not the file's: it dies with the holding process
  (`kill -9` included), so a stale `owner.lock` never blocks the next start. The pid
  in it is only for the message (it may be empty while a holder is starting).
- Within one process the lock is shared, counted per directory: the broker's command
  line takes it before it writes anything (the security bootstrap), and the metadata
  store it opens afterwards takes it again; the file is unlocked when the last holder
  releases it (or the process ends).
- The descriptor is not inherited by child processes (close-on-exec).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE_NAME = "owner.lock"


class DataDirInUseError(Exception):
    """Another process holds the directory's lock."""

    def __init__(self, directory: Path, pid: int | None):
        self.directory = directory
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"{directory} is in use by {holder} (lock {directory / LOCK_FILE_NAME})")


@dataclass(slots=True)
class _Held:
    descriptor: int
    holders: int


_held: dict[str, _Held] = {}
_guard = threading.Lock()


class DataDirLock:
    """One holder's share of a directory's lock; `release()` gives it back (once)."""

    __slots__ = ("_key", "_released", "directory")

    def __init__(self, directory: Path, key: str):
        self.directory = directory
        self._key = key
        self._released = False

    @classmethod
    def acquire(cls, directory: Path) -> DataDirLock:
        """Create `directory` if needed and lock it; DataDirInUseError if another
        process holds it."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = os.path.realpath(directory)
        with _guard:
            held = _held.get(key)
            if held is not None:
                held.holders += 1
                return cls(directory, key)
            path = os.path.join(key, LOCK_FILE_NAME)
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(descriptor)
                if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise DataDirInUseError(directory, _read_pid(path)) from None
                raise
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
            _held[key] = _Held(descriptor, 1)
            return cls(directory, key)

    def release(self) -> None:
        key = self._key
        with _guard:
            if self._released:
                return
            self._released = True
            held = _held[key]
            assert held.holders >= 1, key
            held.holders -= 1
            if held.holders == 0:
                del _held[key]
                # Closing the descriptor drops the flock; the file stays (its pid is
                # stale from now on and only ever informational).
                os.close(held.descriptor)


def _read_pid(path: str) -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            text = file.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
