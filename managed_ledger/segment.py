"""One ledger: an append-only segment file of framed entries and its offset index.

While open, the offsets live in memory as entries are written. On close the offset
index is written beside the file (`.idx`), so reopening a closed ledger reads one
small file instead of scanning the log. A ledger without an index (the one that
was open when the process died) is scanned, and its torn or corrupt tail is cut at
the last valid entry.
"""

from __future__ import annotations

import errno
import logging
import os
from array import array
from pathlib import Path

from managed_ledger import disk
from managed_ledger.errors import CorruptEntryError
from managed_ledger.framing import decode_frame, scan_frames

log = logging.getLogger(__name__)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """The file of one ledger. Appends are done by the ledger's writer only."""

    def __init__(self, ledger_id: int, path: Path, offsets: array, size: int, closed: bool):
        self.ledger_id = ledger_id
        self.path = path
        # offsets[i] is where entry i starts; offsets[-1] == size (the end sentinel).
        self._offsets = offsets
        self._size = size
        self.closed = closed
        self._fd: int | None = None
        self._tail_uncut = False  # bytes of a failed write not yet cut off
        # Set when the disk failed a write or an fsync of this file: it takes no
        # more appends and the ledger rolls over (see write()).
        self.fenced = False

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".idx")

    @property
    def entry_count(self) -> int:
        return len(self._offsets) - 1

    @property
    def size(self) -> int:
        return self._size

    @classmethod
    def create(cls, ledger_id: int, path: Path) -> Segment:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        os.fsync(fd)
        _fsync_directory(path.parent)
        segment = cls(ledger_id, path, array("q", [0]), 0, closed=False)
        segment._fd = fd
        return segment

    @classmethod
    def open_closed(cls, ledger_id: int, path: Path) -> Segment:
        """Open a ledger that was closed cleanly (its index exists), else recover it."""
        index_path = path.with_suffix(".idx")
        if index_path.exists() and path.exists():
            offsets = array("q")
            raw = index_path.read_bytes()
            size = path.stat().st_size
            # A malformed index (cut short, foreign bytes) is as good as none.
            if len(raw) % offsets.itemsize == 0:
                offsets.frombytes(raw)
                if len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == size:
                    return cls(ledger_id, path, offsets, size, closed=True)
            log.warning("ledger %d: index does not match the file; scanning it", ledger_id)
        return cls.recover(ledger_id, path)

    @classmethod
    def recover(cls, ledger_id: int, path: Path) -> Segment:
        """Scan the file, cut any torn or corrupt tail, and close it with an index."""
        if not path.exists():
            log.warning("ledger %d: file %s is missing; treating it as empty", ledger_id, path)
            path.touch()
        data = path.read_bytes()
        offsets = array("q")
        end = 0
        for offset, _header, _payload, following in scan_frames(data):
            offsets.append(offset)
            end = following
        offsets.append(end)
        if end < len(data):
            log.warning(
                "ledger %d: cutting %d bytes of torn or corrupt tail at offset %d",
                ledger_id,
                len(data) - end,
                end,
            )
            with open(path, "r+b") as handle:
                handle.truncate(end)
                handle.flush()
                os.fsync(handle.fileno())
        segment = cls(ledger_id, path, offsets, end, closed=False)
        segment.close()
        return segment

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY if self.closed else os.O_RDWR)
        return self._fd

    def write(self, frames: list[bytes], fsync: bool) -> None:
        """Write frames at the end and make them durable. Runs off the event loop."""
        assert not self.closed, f"write to closed ledger {self.ledger_id}"
        data = b"".join(frames)
        fd = self._descriptor()
        if self._tail_uncut:
            # A failed batch's bytes are still past the committed size: a write
            # now could leave some of its frames whole, and durable, behind it.
            self._cut_uncommitted_tail(fd)
            if self._tail_uncut:
                raise OSError(f"ledger {self.ledger_id}: cannot cut the bytes of a failed write")
        assert not self.fenced, f"write to fenced ledger {self.ledger_id}"
        device = disk.current()
        try:
            written = device.pwrite(fd, data, self._size)
            if written != len(data):
                # How a nearly full device answers: the next write would say ENOSPC.
                raise OSError(
                    errno.ENOSPC,
                    f"short write to ledger {self.ledger_id}: {written} of {len(data)} bytes",
                )
        except OSError as error:
            # A full disk refuses the bytes and says so; anything else is a device
            # in trouble, and this file is written no more.
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                self.fenced = True
            self._cut_uncommitted_tail(fd)
            raise
        if fsync:
            try:
                device.fdatasync(fd)
            except OSError:
                # After a failed fsync the page cache cannot be trusted (the kernel
                # may have dropped the dirty pages, and a retry would "succeed"
                # without writing them): the batch fails, and this file takes no
                # more appends. The ledger seals it at its committed size and
                # rolls over to a fresh one.
                self.fenced = True
                self._cut_uncommitted_tail(fd)
                raise

    def _cut_uncommitted_tail(self, fd: int) -> None:
        """Drop the bytes past the committed size; until it succeeds, write() and
        seal() retry it first."""
        self._tail_uncut = True
        try:
            os.ftruncate(fd, self._size)
            os.fsync(fd)
            self._tail_uncut = False
        except OSError as error:
            log.warning("ledger %d: cannot cut a failed write: %s", self.ledger_id, error)

    def commit_offsets(self, frame_lengths: list[int]) -> None:
        """Publish the offsets of frames that write() made durable."""
        offset = self._size
        offsets = self._offsets
        for length in frame_lengths:
            offset += length
            offsets.append(offset)
        self._size = offset

    def read(self, first: int, last: int) -> list[tuple[bytes, bytes]]:
        """Entries first..last (inclusive) as (header, payload), CRC-checked."""
        assert 0 <= first <= last < self.entry_count, (first, last, self.entry_count)
        start = self._offsets[first]
        end = self._offsets[last + 1]
        data = os.pread(self._descriptor(), end - start, start)
        if len(data) != end - start:
            raise CorruptEntryError(f"ledger {self.ledger_id}: short read at offset {start}")
        view = memoryview(data)
        result = []
        offset = 0
        for _ in range(last - first + 1):
            header, payload, offset = decode_frame(view, offset)
            result.append((header, payload))
        assert offset == len(data)
        return result

    def close(self) -> None:
        """Seal the ledger and release its file descriptor."""
        self.seal()
        self.release()

    def seal(self) -> None:
        """Make the file durable, write its offset index, and stop accepting appends.

        The descriptor stays open: readers on the event loop may be using it while
        this runs in a worker thread. release() closes it, on the loop.
        """
        if not self.closed:
            fd = self._descriptor()
            if os.fstat(fd).st_size != self._size:
                # Bytes of a failed write that could not be cut at the time.
                os.ftruncate(fd, self._size)
            disk.current().fsync(fd)
            tmp = self.index_path.with_suffix(".idx.tmp")
            with open(tmp, "wb") as handle:
                handle.write(self._offsets.tobytes())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.index_path)
            _fsync_directory(self.path.parent)
            self.closed = True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.release()
        delete_files(self.path)


def delete_files(path: Path) -> None:
    """Remove a ledger's file and its index, whether or not it was ever opened."""
    path.unlink(missing_ok=True)
    path.with_suffix(".idx").unlink(missing_ok=True)
