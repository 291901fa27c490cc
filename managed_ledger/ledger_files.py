"""Open ledger files, bounded: a least-recently-used cache of file descriptors.

A broker with many topics cannot keep a descriptor per segment for the topics'
lifetime (the process's open-files limit, often 1024, would stop it at about a
thousand topics). Segments ask this cache for a descriptor only for the span of
one read, write, sync or seal (`with files.open(path, writable) as fd:`); a
descriptor in use is pinned and never closed under its user; the rest are closed,
least recently used first, once more than `max_open` are open. An idle topic
therefore holds no file, and a topic being appended to keeps its writer's file
as long as it stays among the most recently used.

Promises:
- At most `max_open` descriptors stay open when none is in use; more only while
  more than that are in use at once (each is closed as its last user lets go).
- A descriptor is never closed while a `with` block holds it.
- Running out of descriptors first closes every unused one and tries again; if
  that fails it raises TooManyOpenFilesError naming the limits, never a bare
  OSError.
- Thread-safe: segments write and seal in worker threads and read on the loop.

Closing a descriptor loses nothing: a ledger's bytes are made durable by its
writer (fdatasync) before they are acknowledged, and a failed write's tail state
lives in the Segment, not in the descriptor.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from managed_ledger.config import ManagedLedgerConfig
from managed_ledger.errors import TooManyOpenFilesError

_OUT_OF_FILES = {errno.EMFILE, errno.ENFILE}


@dataclass(slots=True)
class _Open:
    fd: int
    writable: bool
    users: int = 0
    # Forgotten (file deleted or ledger closed) while in use: closed by the last user.
    doomed: bool = False


def max_open_files(config: ManagedLedgerConfig) -> int:
    """The cache's bound: max_open_ledger_files, or when 0 half the open-files soft
    limit (the other half is for connections, the local store and the rest)."""
    if config.max_open_ledger_files > 0:
        return config.max_open_ledger_files
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65_536
    return max(soft // 2, 16)


def out_of_files(path: object, error: OSError, max_open: int) -> TooManyOpenFilesError:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return TooManyOpenFilesError(
        f"cannot open {path}: too many open files ({error.strerror}); the broker's "
        f"open-files limit is {soft} (hard limit {hard}) and max_open_ledger_files is "
        f"{max_open}. Raise the limit (ulimit -n, LimitNOFILE=) or lower "
        "max_open_ledger_files."
    )


def open_file(path: object, flags: int, max_open: int, mode: int = 0o600) -> int:
    """os.open that reports running out of descriptors as TooManyOpenFilesError."""
    try:
        return os.open(path, flags, mode)
    except OSError as error:
        if error.errno in _OUT_OF_FILES:
            raise out_of_files(path, error, max_open) from error
        raise


class LedgerFiles:
    """The open descriptors of every ledger of a broker (or of one test's ledgers)."""

    def __init__(self, max_open: int):
        assert max_open >= 1, max_open
        self.max_open = max_open
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # descriptors opened in all, for stats and tests
        self.evicted = 0  # closed to stay within max_open

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def open(self, path: os.PathLike | str, writable: bool) -> Iterator[int]:
        """A descriptor of `path` (read-write when asked), held for the block."""
        key = os.fspath(path)
        with self._lock:
            held = self._open.get(key)
            if held is not None and writable and not held.writable:
                # Only a created segment is written, and it is opened writable first;
                # a read-only descriptor of it would be a stale one: reopen.
                if held.users == 0:
                    os.close(held.fd)
                    del self._open[key]
                    held = None
                else:
                    held.doomed = True
                    self._open.pop(key)
                    held = None
            if held is None:
                self._make_room()
                flags = os.O_RDWR if writable else os.O_RDONLY
                held = _Open(self._open_file(key, flags), writable)
                self.opened += 1
                self._open[key] = held
            else:
                self._open.move_to_end(key)
            held.users += 1
        try:
            yield held.fd
        finally:
            with self._lock:
                held.users -= 1
                if held.users == 0 and held.doomed:
                    os.close(held.fd)
                elif len(self._open) > self.max_open:
                    self._evict(self.max_open)

    def create(self, path: os.PathLike | str) -> None:
        """Create `path` (it must not exist), empty; its descriptor is not kept."""
        os.close(self._open_file(os.fspath(path), os.O_CREAT | os.O_EXCL | os.O_RDWR))

    def _open_file(self, key: str, flags: int) -> int:
        """os.open; out of descriptors, close every unused one and try once more
        (connections and other files may have taken what the bound left free)."""
        try:
            return os.open(key, flags, 0o600)  # the broker's own: no other user reads it
        except OSError as error:
            if error.errno not in _OUT_OF_FILES:
                raise
            self._evict(0)
        return open_file(key, flags, self.max_open)

    def _make_room(self) -> None:
        """Close unused descriptors, oldest first, to leave room for one more."""
        self._evict(self.max_open - 1)

    def _evict(self, keep: int) -> None:
        """Close unused descriptors, least recently used first, down to `keep` open."""
        if len(self._open) <= keep:
            return
        for key in list(self._open):
            held = self._open[key]
            if held.users == 0:
                del self._open[key]
                os.close(held.fd)
                self.evicted += 1
                if len(self._open) <= keep:
                    return

    def close(self, path: os.PathLike | str) -> None:
        """Close the descriptor of `path` now, or when its last user lets go."""
        key = os.fspath(path)
        with self._lock:
            held = self._open.pop(key, None)
            if held is None:
                return
            if held.users == 0:
                os.close(held.fd)
            else:
                held.doomed = True

    def close_all(self) -> None:
        with self._lock:
            for held in self._open.values():
                if held.users == 0:
                    os.close(held.fd)
                else:
                    held.doomed = True
            self._open.clear()
