"""The disk seam: the OS by default, and a FaultyDisk that fails what it is told to."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from managed_ledger import disk


@pytest.fixture
def fd(tmp_path: Path):
    descriptor = os.open(tmp_path / "file", os.O_CREAT | os.O_RDWR)
    yield descriptor
    os.close(descriptor)


def test_the_default_disk_is_the_operating_system(fd):
    assert type(disk.current()) is disk.Disk
    assert disk.current().pwrite(fd, b"abc", 0) == 3
    disk.current().fdatasync(fd)
    assert os.pread(fd, 3, 0) == b"abc"


def test_counted_write_faults_fail_that_many_writes_then_pass(fd):
    faulty = disk.FaultyDisk()
    faulty.fail_writes(errno.ENOSPC, count=2)
    for _ in range(2):
        with pytest.raises(OSError) as raised:
            faulty.pwrite(fd, b"x", 0)
        assert raised.value.errno == errno.ENOSPC
    assert faulty.pwrite(fd, b"y", 0) == 1
    assert faulty.failed_writes == 2 and os.pread(fd, 1, 0) == b"y"


def test_an_uncounted_fault_lasts_until_healed_and_covers_both_syncs(fd):
    faulty = disk.FaultyDisk()
    faulty.fail_syncs(errno.EIO)
    for sync in (faulty.fdatasync, faulty.fsync, faulty.fdatasync):
        with pytest.raises(OSError, match="injected sync fault"):
            sync(fd)
    assert faulty.pwrite(fd, b"z", 0) == 1  # writes were not told to fail
    faulty.heal()
    faulty.fdatasync(fd)
    faulty.fsync(fd)
    assert faulty.failed_syncs == 3


def test_install_returns_the_disk_it_replaces():
    faulty = disk.FaultyDisk()
    previous = disk.install(faulty)
    try:
        assert disk.current() is faulty
    finally:
        assert disk.install(previous) is faulty
    assert disk.current() is previous
