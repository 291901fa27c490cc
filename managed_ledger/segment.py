"""One ledger: an append-only segment file of framed entries and its offset index.

While open, the offsets live in memory as entries are written. On close the offset
index is written beside the file (`.idx`), so reopening a closed ledger reads one
small file instead of scanning the log. A ledger without an index (the one that
was open when the process died) is scanned: every entry that passes its CRC is
kept, a damaged entry between valid ones keeps its number and is marked damaged
(never read, never counted), and only a torn tail after the last valid entry is cut.

A segment holds no file descriptor of its own: it borrows one from the broker's
LedgerFiles cache for each read, write or seal, so idle ledgers keep no file open.
"""

from __future__ import annotations

import errno
import logging
import os
from array import array
from contextlib import AbstractContextManager
from pathlib import Path

from managed_ledger import disk
from managed_ledger.errors import CorruptEntryError
from managed_ledger.framing import decode_frame, scan_log
from managed_ledger.ledger_files import LedgerFiles, open_file

# Ledgers opened without a cache of their own (tools, unit tests) share this one.
_SHARED_FILES = LedgerFiles(256)

log = logging.getLogger(__name__)


def _fsync_directory(directory: Path) -> None:
    fd = open_file(directory, os.O_RDONLY, _SHARED_FILES.max_open)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """The file of one ledger. Appends are done by the ledger's writer only."""

    def __init__(
        self,
        ledger_id: int,
        path: Path,
        offsets: array,
        size: int,
        closed: bool,
        files: LedgerFiles | None = None,
        damaged: frozenset[int] | set[int] = frozenset(),
    ):
        self.ledger_id = ledger_id
        # Entries whose bytes fail their checks: their numbers stay taken, reads
        # skip them. Found by recovery, or by a read of a closed ledger.
        self.damaged: set[int] = set(damaged)
        self.path = path
        self._files = files if files is not None else _SHARED_FILES
        # offsets[i] is where entry i starts; offsets[-1] == size (the end sentinel).
        self._offsets = offsets
        self._size = size
        self.closed = closed
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
    def create(cls, ledger_id: int, path: Path, files: LedgerFiles | None = None) -> Segment:
        """A new empty ledger file, its directory entry durable (so are the bytes the
        writer fdatasyncs into it later); its descriptor is left to the cache."""
        files = files if files is not None else _SHARED_FILES
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        files.create(path)
        _fsync_directory(path.parent)
        return cls(ledger_id, path, array("q", [0]), 0, closed=False, files=files)

    @classmethod
    def open_closed(
        cls,
        ledger_id: int,
        path: Path,
        files: LedgerFiles | None = None,
        damaged: frozenset[int] | set[int] = frozenset(),
    ) -> Segment:
        """Open a ledger that was closed cleanly (its index exists), else recover it.
        `damaged`: the entries recorded as damaged when it was recovered."""
        index_path = path.with_suffix(".idx")
        if index_path.exists() and path.exists():
            offsets = array("q")
            raw = index_path.read_bytes()
            size = path.stat().st_size
            # A malformed index (cut short, foreign bytes) is as good as none.
            if len(raw) % offsets.itemsize == 0:
                offsets.frombytes(raw)
                if len(offsets) >= 1 and offsets[0] == 0 and offsets[-1] == size:
                    return cls(ledger_id, path, offsets, size, True, files, damaged)
            log.warning("ledger %d: index does not match the file; scanning it", ledger_id)
        return cls.recover(ledger_id, path, files)

    @classmethod
    def recover(cls, ledger_id: int, path: Path, files: LedgerFiles | None = None) -> Segment:
        """Scan the file, keep every valid entry, mark the damaged ones, cut a torn
        tail, and close it with an index."""
        if not path.exists():
            log.warning("ledger %d: file %s is missing; treating it as empty", ledger_id, path)
            path.touch()
        data = path.read_bytes()
        scan = scan_log(data)
        entries = len(scan.offsets) - 1
        for damage in scan.damage:
            log.error(
                "ledger %d: entry %d at offset %d is corrupt (%d bytes fail their checks); "
                "it is skipped, the %d entries after it are kept%s",
                ledger_id,
                damage.entry_index,
                damage.start,
                damage.end - damage.start,
                entries - damage.entry_index - 1,
                ""
                if damage.exact
                else "; its length field is damaged too, so the bytes may have held "
                "more than one entry and later entry numbers may have moved",
            )
        end = scan.end
        if end < len(data):
            log.warning(
                "ledger %d: cutting %d bytes of torn tail at offset %d",
                ledger_id,
                len(data) - end,
                end,
            )
            with open(path, "r+b") as handle:
                handle.truncate(end)
                handle.flush()
                os.fsync(handle.fileno())
        damaged = {damage.entry_index for damage in scan.damage}
        segment = cls(ledger_id, path, array("q", scan.offsets), end, False, files, damaged)
        segment.close()
        return segment

    def _descriptor(self) -> AbstractContextManager[int]:
        """A descriptor borrowed from the cache: `with self._descriptor() as fd:`."""
        return self._files.open(self.path, writable=not self.closed)

    def write(self, frames: list[bytes], fsync: bool) -> None:
        """Write frames at the end and make them durable. Runs off the event loop."""
        assert not self.closed, f"write to closed ledger {self.ledger_id}"
        data = b"".join(frames)
        with self._descriptor() as fd:
            self._write(fd, data, fsync)

    def _write(self, fd: int, data: bytes, fsync: bool) -> None:
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

    def discard_uncommitted(self) -> None:
        """Cut the bytes a write() made durable that will not be committed (the other
        copies did not confirm them), so the next write lands where they were."""
        with self._descriptor() as fd:
            self._cut_uncommitted_tail(fd)
        if self._tail_uncut:
            raise OSError(f"ledger {self.ledger_id}: cannot cut an unconfirmed write")

    def commit_offsets(self, frame_lengths: list[int]) -> None:
        """Publish the offsets of frames that write() made durable."""
        offset = self._size
        offsets = self._offsets
        for length in frame_lengths:
            offset += length
            offsets.append(offset)
        self._size = offset

    def reopen(self) -> None:
        """Take appends again after seal(): a replica's copy of the newest ledger
        after a restart, or a closed copy being cut back (truncate). The index
        written by seal is rewritten by the next seal."""
        assert not self.fenced, f"reopen of fenced ledger {self.ledger_id}"
        self.closed = False

    def truncate(self, entry_count: int) -> None:
        """Forget every entry from `entry_count` on. Readers stop seeing them at
        once (the offsets shrink here); the file itself is cut to the new size,
        and fsynced, by the next write() or seal(), before anything else reaches it."""
        assert not self.closed, f"truncate of closed ledger {self.ledger_id}"
        assert 0 <= entry_count <= self.entry_count, (entry_count, self.entry_count)
        del self._offsets[entry_count + 1 :]
        self._size = self._offsets[-1]
        self.damaged = {entry_id for entry_id in self.damaged if entry_id < entry_count}
        self._tail_uncut = True

    def last_within(self, first: int, last: int, max_bytes: int) -> int:
        """The last entry of first..last whose frames from `first` on take at most
        `max_bytes` (known from the offsets, nothing read); first - 1 when entry
        `first` alone takes more."""
        assert 0 <= first <= last < self.entry_count, (first, last, self.entry_count)
        offsets = self._offsets
        limit = offsets[first] + max_bytes
        low, high = first - 1, last  # entry `low` ends within the limit (or is first - 1)
        while low < high:
            middle = (low + high + 1) // 2
            if offsets[middle + 1] <= limit:
                low = middle
            else:
                high = middle - 1
        return low

    def span(self, first: int, last: int) -> int:
        """Bytes the frames of entries first..last take in the file."""
        return self._offsets[last + 1] - self._offsets[first]

    def read(self, first: int, last: int) -> list[tuple[int, bytes, bytes]]:
        """Entries first..last (inclusive) as (entry id, header, payload), CRC-checked.

        Damaged entries are left out. One that fails its checks here (bytes that
        went bad after the ledger was closed) is logged, added to `damaged` and
        left out too: the entries around it are still returned.
        """
        assert 0 <= first <= last < self.entry_count, (first, last, self.entry_count)
        start = self._offsets[first]
        end = self._offsets[last + 1]
        with self._descriptor() as fd:
            data = os.pread(fd, end - start, start)
        if len(data) != end - start:
            raise CorruptEntryError(f"ledger {self.ledger_id}: short read at offset {start}")
        view = memoryview(data)
        damaged = self.damaged
        offsets = self._offsets
        result = []
        offset = 0
        for entry_id in range(first, last + 1):
            following = offsets[entry_id + 1] - start
            if entry_id in damaged:
                offset = following
                continue
            try:
                header, payload, offset = decode_frame(view, offset)
                if offset != following:
                    raise CorruptEntryError(f"frame end {offset} is not the indexed {following}")
            except CorruptEntryError as error:
                log.error(
                    "ledger %d: entry %d at offset %d is corrupt (%s); it is skipped",
                    self.ledger_id,
                    entry_id,
                    offsets[entry_id],
                    error,
                )
                damaged.add(entry_id)
                offset = following
                continue
            result.append((entry_id, header, payload))
        assert offset == len(data)
        return result

    def close(self) -> None:
        """Seal the ledger and release its file descriptor."""
        self.seal()
        self.release()

    def seal(self) -> None:
        """Make the file durable, write its offset index, and stop accepting appends.

        Readers on the event loop may be using the descriptor while this runs in a
        worker thread: the cache closes it only once no one holds it.
        """
        if not self.closed:
            with self._descriptor() as fd:
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
        """Close the file's descriptor (now, or once its current user lets go)."""
        self._files.close(self.path)

    def delete(self) -> None:
        self.release()
        delete_files(self.path)


def delete_files(path: Path) -> None:
    """Remove a ledger's file and its index, whether or not it was ever opened."""
    path.unlink(missing_ok=True)
    path.with_suffix(".idx").unlink(missing_ok=True)
