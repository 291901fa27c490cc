"""The OS calls that put a ledger's bytes on disk, behind one seam.

Segments write and sync their data through `current()`: normally the operating
system itself. A `FaultyDisk` installed in its place (by unit tests, or by the
broker's `disk-full` / `fsync-fail` failpoints) makes writes or syncs fail the
way a full or failing disk does (ENOSPC, EIO), so the code that handles those
faults runs for real in tests, against real files.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass


class Disk:
    """The operating system: what every segment uses unless a test says otherwise."""

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)


@dataclass(slots=True)
class _Fault:
    error_number: int
    remaining: int | None  # None: until healed

    def take(self) -> int | None:
        """The errno to fail this call with, or None when the fault is used up."""
        if self.remaining is None:
            return self.error_number
        if self.remaining <= 0:
            return None
        self.remaining -= 1
        return self.error_number


class FaultyDisk(Disk):
    """The OS, except that the writes or syncs it is told to fail raise OSError.

    Thread-safe: segments write from the event loop's worker threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._write_fault: _Fault | None = None
        self._sync_fault: _Fault | None = None
        self.failed_writes = 0
        self.failed_syncs = 0

    def fail_writes(self, error_number: int = errno.ENOSPC, count: int | None = None) -> None:
        """Fail the next `count` writes (every write until heal() when None)."""
        with self._lock:
            self._write_fault = _Fault(error_number, count)

    def fail_syncs(self, error_number: int = errno.EIO, count: int | None = None) -> None:
        """Fail the next `count` fdatasync/fsync calls (all until heal() when None)."""
        with self._lock:
            self._sync_fault = _Fault(error_number, count)

    def heal(self) -> None:
        """Space is back and the device works again."""
        with self._lock:
            self._write_fault = self._sync_fault = None

    def _raise_if(self, fault: _Fault | None, what: str) -> None:
        with self._lock:
            error_number = fault.take() if fault is not None else None
            if error_number is None:
                return
            if what == "write":
                self.failed_writes += 1
            else:
                self.failed_syncs += 1
        raise OSError(error_number, f"{os.strerror(error_number)} (injected {what} fault)")

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self._raise_if(self._write_fault, "write")
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self._raise_if(self._sync_fault, "sync")
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._raise_if(self._sync_fault, "sync")
        super().fsync(fd)


_current: Disk = Disk()


def current() -> Disk:
    return _current


def install(disk: Disk) -> Disk:
    """Make `disk` the one segments use; returns the one it replaces."""
    global _current
    previous, _current = _current, disk
    return previous
