"""LedgerFiles: a bounded LRU of descriptors that never closes one in use."""

from __future__ import annotations

import errno
import os

import pytest

from managed_ledger import (
    EntryHeader,
    LedgerFiles,
    ManagedLedger,
    ManagedLedgerConfig,
    TooManyOpenFilesError,
)
from managed_ledger import ledger_files as ledger_files_module


def _files(tmp_path, count):
    paths = []
    for index in range(count):
        path = tmp_path / f"{index}.log"
        path.write_bytes(b"x" * (index + 1))
        paths.append(path)
    return paths


def test_no_more_than_max_open_descriptors_stay_open_least_recently_used_closed_first(tmp_path):
    files = LedgerFiles(3)
    paths = _files(tmp_path, 5)
    for path in paths[:3]:
        with files.open(path, writable=False):
            pass
    with files.open(paths[0], writable=False):  # used again: now the most recent
        pass
    with files.open(paths[3], writable=False):
        pass
    assert len(files) == 3
    assert files.evicted == 1
    opened = files.opened
    with files.open(paths[0], writable=False):  # still open: no reopen
        pass
    assert files.opened == opened
    with files.open(paths[1], writable=False):  # the one closed: reopened
        pass
    assert files.opened == opened + 1


def test_a_descriptor_in_use_is_never_closed_and_the_excess_closes_when_released(tmp_path):
    files = LedgerFiles(1)
    first, second = _files(tmp_path, 2)
    with files.open(first, writable=False) as fd_first:
        with files.open(second, writable=False) as fd_second:
            assert len(files) == 2  # over the bound while both are in use
            assert os.pread(fd_first, 1, 0) == b"x"
            files.close(first)  # asked to close while in use: deferred
            assert os.pread(fd_first, 1, 0) == b"x"
        assert os.pread(fd_second, 2, 0) == b"xx"
    with pytest.raises(OSError):
        os.fstat(fd_first)  # closed once its user let go
    assert len(files) <= 1


def test_running_out_of_descriptors_is_too_many_open_files_naming_the_limits(tmp_path, monkeypatch):
    def out_of_files(*_args, **_kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    files = LedgerFiles(8)
    (path,) = _files(tmp_path, 1)
    monkeypatch.setattr(ledger_files_module.os, "open", out_of_files)
    with (
        pytest.raises(TooManyOpenFilesError, match=r"open-files limit is .*max_open_ledger_files"),
        files.open(path, writable=False),
    ):
        pass


async def test_many_ledgers_share_the_bound_and_stay_readable(tmp_path, store):
    files = LedgerFiles(4)
    config = ManagedLedgerConfig(fsync=False, cache_size_bytes=0)
    ledgers = [
        await ManagedLedger.open(f"t-{index}", tmp_path / str(index), store, config, files)
        for index in range(20)
    ]
    for index, ledger in enumerate(ledgers):
        await ledger.append(EntryHeader(num_messages=1), f"m{index}".encode())
        assert len(files) <= 4
    for index, ledger in enumerate(ledgers):
        (entry,) = ledger.read(ledger.first_position(), 10)
        assert entry.payload == f"m{index}".encode()
        assert len(files) <= 4
    for ledger in ledgers:
        await ledger.close()
    assert len(files) == 0


async def test_an_append_without_a_descriptor_fails_with_too_many_open_files_and_keeps_nothing(
    tmp_path, store, monkeypatch
):
    files = LedgerFiles(4)
    ledger = await ManagedLedger.open(
        "t", tmp_path / "t", store, ManagedLedgerConfig(fsync=False), files
    )
    first = await ledger.append(EntryHeader(num_messages=1), b"kept")
    files.close_all()
    real_open = ledger_files_module.os.open

    def out_of_files(*_args, **_kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(ledger_files_module.os, "open", out_of_files)
    with pytest.raises(TooManyOpenFilesError):
        await ledger.append(EntryHeader(num_messages=1), b"refused")
    monkeypatch.setattr(ledger_files_module.os, "open", real_open)
    assert ledger.last_confirmed == first
    second = await ledger.append(EntryHeader(num_messages=1), b"after")
    assert [e.payload for e in ledger.read(ledger.first_position(), 10)] == [b"kept", b"after"]
    assert second == first.next_in_ledger()
    await ledger.close()


def test_out_of_descriptors_once_closes_the_unused_ones_and_opens_anyway(tmp_path, monkeypatch):
    files = LedgerFiles(8)
    paths = _files(tmp_path, 4)
    for path in paths[:3]:
        with files.open(path, writable=False):
            pass
    real_open = ledger_files_module.os.open
    failures = []

    def out_of_files_once(*args, **kwargs):
        if not failures:
            failures.append(args)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(ledger_files_module.os, "open", out_of_files_once)
    with files.open(paths[3], writable=False) as fd:
        assert os.pread(fd, 4, 0) == b"xxxx"
    assert failures and len(files) == 1  # the three unused ones were closed
