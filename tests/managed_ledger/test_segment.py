"""One ledger's segment file: written frames, committed offsets, the index, recovery."""

from __future__ import annotations

import errno
import os
from array import array
from pathlib import Path

import pytest

import managed_ledger.segment as segment_module
from managed_ledger import CorruptEntryError
from managed_ledger.framing import encode_frame
from managed_ledger.segment import Segment, delete_files


def frame(i: int) -> bytes:
    return encode_frame(f"header-{i:03d}".encode(), f"payload-{i:06d}".encode())


def entry(i: int, at: int | None = None) -> tuple[int, bytes, bytes]:
    """As Segment.read returns it: (entry id, header, payload) of frame(i), at id `at`."""
    return (i if at is None else at), f"header-{i:03d}".encode(), f"payload-{i:06d}".encode()


FRAME_LEN = len(frame(0))


def write_committed(segment: Segment, ids, fsync: bool = False) -> None:
    frames = [frame(i) for i in ids]
    segment.write(frames, fsync)
    segment.commit_offsets([len(f) for f in frames])


def fail_once(real, error: OSError):
    calls = {"failed": 0}

    def fake(*args):
        if not calls["failed"]:
            calls["failed"] = 1
            raise error
        return real(*args)

    return fake


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / f"{7:016x}.log"


@pytest.fixture
def segment(path: Path):
    opened = Segment.create(7, path)
    yield opened
    opened.release()


def test_new_segment_is_an_empty_open_file(segment, path):
    assert (segment.entry_count, segment.size, segment.closed) == (0, 0, False)
    assert path.exists() and path.stat().st_size == 0


def test_create_refuses_a_file_that_already_exists(segment, path):
    with pytest.raises(FileExistsError):
        Segment.create(7, path)


def test_written_frames_are_invisible_until_their_offsets_are_committed(segment, path):
    segment.write([frame(0), frame(1)], fsync=False)
    assert path.stat().st_size == 2 * FRAME_LEN
    assert segment.entry_count == 0 and segment.size == 0
    segment.commit_offsets([FRAME_LEN, FRAME_LEN])
    assert segment.entry_count == 2 and segment.size == 2 * FRAME_LEN


def test_read_returns_committed_entries_in_order(segment):
    write_committed(segment, range(3))
    write_committed(segment, range(3, 5))
    assert segment.read(0, 4) == [entry(i) for i in range(5)]
    assert segment.read(2, 3) == [entry(2), entry(3)]


def test_read_past_the_committed_entries_is_refused(segment):
    write_committed(segment, range(2))
    segment.write([frame(2)], fsync=False)  # written, not committed
    with pytest.raises(AssertionError):
        segment.read(0, 2)


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))


def test_read_skips_a_frame_corrupted_on_disk_and_marks_it_damaged(segment, path, caplog):
    write_committed(segment, range(3))
    flip_byte(path, FRAME_LEN + FRAME_LEN // 2)
    assert segment.read(0, 0) == [entry(0)]
    assert segment.read(0, 2) == [entry(0), entry(2)]
    assert segment.damaged == {1}
    assert f"entry 1 at offset {FRAME_LEN} is corrupt" in caplog.text


def test_read_of_a_short_file_still_raises_corrupt_entry_error(segment, path):
    write_committed(segment, range(3))
    os.truncate(path, 2 * FRAME_LEN)
    with pytest.raises(CorruptEntryError):
        segment.read(0, 2)


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(FRAME_LEN // 2, id="in-payload"),
        pytest.param(FRAME_LEN * 2 + 4, id="in-crc"),
        pytest.param(FRAME_LEN * 2 + 1, id="in-length"),
    ],
)
def test_recover_keeps_every_valid_entry_after_a_damaged_one(segment, path, where, caplog):
    write_committed(segment, range(10))
    segment.release()  # a crash: no index
    flip_byte(path, where)
    damaged_id = where // FRAME_LEN
    recovered = Segment.recover(7, path)
    try:
        assert recovered.entry_count == 10 and recovered.size == 10 * FRAME_LEN
        assert recovered.damaged == {damaged_id}
        kept = [entry(i) for i in range(10) if i != damaged_id]
        assert recovered.read(0, 9) == kept
        assert f"entry {damaged_id} at offset {damaged_id * FRAME_LEN} is corrupt" in caplog.text
        assert [r.levelname for r in caplog.records if "is corrupt" in r.message] == ["ERROR"]
    finally:
        recovered.release()
    # The index written by recovery keeps the damaged entry's place.
    reopened = Segment.open_closed(7, path, damaged=frozenset({damaged_id}))
    try:
        assert reopened.read(0, 9) == kept
    finally:
        reopened.release()


def test_recover_after_damage_still_cuts_a_torn_tail(segment, path):
    write_committed(segment, range(5))
    segment.release()
    flip_byte(path, FRAME_LEN + 20)
    with path.open("ab") as handle:
        handle.write(frame(5)[:-3])  # the last write torn
    recovered = Segment.recover(7, path)
    try:
        assert (recovered.entry_count, recovered.size) == (5, 5 * FRAME_LEN)
        assert recovered.damaged == {1}
        assert recovered.read(0, 4) == [entry(i) for i in (0, 2, 3, 4)]
    finally:
        recovered.release()


def test_write_with_fsync_calls_fdatasync_once_per_batch(segment, monkeypatch):
    calls: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    segment.write([frame(0), frame(1), frame(2)], fsync=True)
    assert len(calls) == 1
    segment.write([frame(3)], fsync=False)
    assert len(calls) == 1


def test_seal_writes_an_index_of_every_entry_offset(segment):
    write_committed(segment, range(4))
    segment.seal()
    assert segment.closed
    offsets = array("q")
    offsets.frombytes(segment.index_path.read_bytes())
    assert list(offsets) == [i * FRAME_LEN for i in range(5)]
    assert not segment.index_path.with_suffix(".idx.tmp").exists()


def test_sealed_segment_refuses_writes_but_still_reads(segment):
    write_committed(segment, range(2))
    segment.seal()
    with pytest.raises(AssertionError):
        segment.write([frame(2)], fsync=False)
    assert segment.read(0, 1) == [entry(0), entry(1)]


def test_closed_segment_reopens_from_its_index_without_scanning(segment, path, monkeypatch):
    write_committed(segment, range(3))
    segment.close()

    def no_scan(_data):
        raise AssertionError("a cleanly closed ledger must not be scanned")

    monkeypatch.setattr(segment_module, "scan_log", no_scan)
    reopened = Segment.open_closed(7, path)
    try:
        assert (reopened.entry_count, reopened.size, reopened.closed) == (3, 3 * FRAME_LEN, True)
        assert reopened.read(0, 2) == [entry(i) for i in range(3)]
    finally:
        reopened.release()


@pytest.mark.parametrize(
    "index_bytes",
    [
        pytest.param(lambda raw: raw[:-3], id="cut-mid-offset"),
        pytest.param(lambda raw: raw[:-8], id="one-offset-short"),
        pytest.param(lambda raw: b"", id="empty"),
        pytest.param(lambda raw: b"\xff" * len(raw), id="foreign-bytes"),
    ],
)
def test_index_that_does_not_match_the_file_is_ignored_and_the_file_scanned(
    segment, path, index_bytes
):
    write_committed(segment, range(3))
    segment.close()
    segment.index_path.write_bytes(index_bytes(segment.index_path.read_bytes()))
    reopened = Segment.open_closed(7, path)
    try:
        assert reopened.entry_count == 3
        assert reopened.read(0, 2) == [entry(i) for i in range(3)]
    finally:
        reopened.release()


def test_segment_without_an_index_is_recovered_by_scanning(segment, path):
    write_committed(segment, range(3))
    segment.release()  # as a crash would leave it: no seal, no index
    assert not segment.index_path.exists()
    reopened = Segment.open_closed(7, path)
    try:
        assert reopened.entry_count == 3 and reopened.closed
        assert reopened.index_path.exists()
    finally:
        reopened.release()


@pytest.mark.parametrize(
    ("damage", "whole"),
    [
        pytest.param(lambda data: data[:-1], 2, id="last-frame-short-one-byte"),
        pytest.param(lambda data: data[: 2 * FRAME_LEN + 5], 2, id="torn-in-frame-header"),
        pytest.param(lambda data: data + b"\x00" * 100, 3, id="zero-filled-tail"),
        pytest.param(lambda data: data + os.urandom(7) + b"garbage", 3, id="garbage-tail"),
        pytest.param(lambda data: data[:-1] + bytes([data[-1] ^ 1]), 2, id="bad-crc"),
    ],
)
def test_recover_cuts_the_tail_at_the_last_whole_frame_and_writes_an_index(
    segment, path, damage, whole
):
    write_committed(segment, range(3))
    segment.release()
    path.write_bytes(damage(path.read_bytes()))
    recovered = Segment.recover(7, path)
    assert (recovered.entry_count, recovered.size, recovered.closed) == (
        whole,
        whole * FRAME_LEN,
        True,
    )
    assert path.stat().st_size == whole * FRAME_LEN
    assert recovered.read(0, whole - 1) == [entry(i) for i in range(whole)]
    recovered.release()
    again = Segment.open_closed(7, path)  # the index written by recovery is trusted
    try:
        assert again.entry_count == whole
    finally:
        again.release()


def test_recover_of_a_missing_file_is_an_empty_segment(path):
    recovered = Segment.recover(7, path)
    assert (recovered.entry_count, recovered.size) == (0, 0)


def test_failed_fdatasync_cuts_the_bytes_it_wrote_and_fences_the_file(segment, path, monkeypatch):
    write_committed(segment, range(2))
    monkeypatch.setattr(os, "fdatasync", fail_once(os.fdatasync, OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        segment.write([frame(2), frame(3)], fsync=True)
    assert path.stat().st_size == 2 * FRAME_LEN
    assert segment.entry_count == 2
    assert segment.fenced
    with pytest.raises(AssertionError, match="fenced"):
        segment.write([frame(4)], fsync=True)
    # What was committed before the failure stays readable, and seals as it was.
    assert segment.read(0, 1) == [entry(0), entry(1)]
    segment.seal()
    reopened = Segment.open_closed(7, path)
    assert reopened.read(0, reopened.entry_count - 1) == [entry(0), entry(1)]
    reopened.release()


def test_full_disk_on_write_fails_the_batch_but_does_not_fence(segment, path, faulty_disk):
    write_committed(segment, range(2))
    faulty_disk.fail_writes(errno.ENOSPC, count=1)
    with pytest.raises(OSError) as raised:
        segment.write([frame(2)], fsync=True)
    assert raised.value.errno == errno.ENOSPC
    assert not segment.fenced  # a full disk refused the bytes; nothing is in doubt
    assert path.stat().st_size == 2 * FRAME_LEN
    write_committed(segment, [3], fsync=True)
    assert segment.read(0, 2) == [entry(0), entry(1), entry(3, at=2)]


def test_io_error_on_write_fences_the_file(segment, path, faulty_disk):
    write_committed(segment, range(1))
    faulty_disk.fail_writes(errno.EIO, count=1)
    with pytest.raises(OSError):
        segment.write([frame(1)], fsync=False)
    assert segment.fenced
    assert path.stat().st_size == FRAME_LEN


def test_seal_fsyncs_through_the_disk_seam_and_fails_when_the_device_does(
    segment, path, faulty_disk
):
    write_committed(segment, range(2))
    faulty_disk.fail_syncs(errno.EIO, count=1)
    with pytest.raises(OSError):
        segment.seal()
    assert not segment.closed  # not sealed: a later seal tries again
    segment.seal()
    assert segment.closed and segment.index_path.exists()


def test_short_write_is_an_error_and_its_bytes_are_cut(segment, path, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, data[:10], offset))
    with pytest.raises(OSError, match="short write"):
        segment.write([frame(0)], fsync=False)
    assert path.stat().st_size == 0
    assert segment.entry_count == 0


def test_seal_cuts_bytes_of_a_failed_write_that_could_not_be_cut_at_the_time(
    segment, path, monkeypatch
):
    write_committed(segment, range(2))
    monkeypatch.setattr(os, "fdatasync", fail_once(os.fdatasync, OSError(errno.EIO, "EIO")))
    monkeypatch.setattr(os, "ftruncate", fail_once(os.ftruncate, OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        segment.write([frame(2)], fsync=True)
    assert path.stat().st_size == 3 * FRAME_LEN  # the cut failed too
    segment.seal()
    assert path.stat().st_size == 2 * FRAME_LEN
    segment.release()
    reopened = Segment.open_closed(7, path)
    try:
        assert reopened.entry_count == 2
    finally:
        reopened.release()


def test_delete_files_removes_the_file_and_its_index_and_tolerates_either_missing(segment, path):
    write_committed(segment, range(1))
    segment.close()
    assert path.exists() and segment.index_path.exists()
    delete_files(path)
    assert not path.exists() and not segment.index_path.exists()
    delete_files(path)  # already gone: no error


def test_truncate_hides_the_entries_at_once_and_the_next_write_cuts_the_file(segment, path):
    write_committed(segment, range(5))
    segment.truncate(2)
    assert segment.entry_count == 2 and segment.size == 2 * FRAME_LEN
    assert segment.read(0, 1) == [entry(0), entry(1)]
    write_committed(segment, [9])
    assert path.stat().st_size == 3 * FRAME_LEN
    assert segment.read(0, 2) == [entry(0), entry(1), entry(9, at=2)]
    segment.close()
    assert Segment.open_closed(7, path).entry_count == 3


def test_a_closed_segment_reopened_and_truncated_is_cut_by_seal(segment, path):
    write_committed(segment, range(4))
    segment.seal()
    segment.reopen()
    segment.truncate(1)
    segment.seal()
    assert path.stat().st_size == FRAME_LEN
    reopened = Segment.open_closed(7, path)
    assert reopened.entry_count == 1 and reopened.read(0, 0) == [entry(0)]
