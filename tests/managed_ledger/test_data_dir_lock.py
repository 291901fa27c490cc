"""data_dir_lock.py: one process owns a storage directory; the lock dies with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from managed_ledger import LocalStore
from managed_ledger.data_dir_lock import LOCK_FILE_NAME, DataDirInUseError, DataDirLock

HOLDER_TIMEOUT_S = 30.0


class Holder:
    """Another process holding `directory` through a LocalStore until told to exit."""

    def __init__(self, directory: Path):
        script = textwrap.dedent(
            f"""
            import sys
            from pathlib import Path
            from managed_ledger import LocalStore
            from managed_ledger.data_dir_lock import DataDirInUseError
            try:
                store = LocalStore(Path({str(directory)!r}))
            except DataDirInUseError as error:
                print("refused", error.pid, flush=True)
                sys.exit(0)
            print("holding", flush=True)
            sys.stdin.readline()
            store.close()
            """
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        # A blocking read of its first line: it holds the lock once it has printed it.
        self.answer = self.process.stdout.readline().strip()

    def exit(self) -> None:
        self.process.communicate("\n", timeout=HOLDER_TIMEOUT_S)
        assert self.process.returncode == 0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(HOLDER_TIMEOUT_S)


@pytest.fixture
def holder(tmp_path: Path):
    held = Holder(tmp_path / "metadata")
    assert held.answer == "holding"
    yield held
    if held.process.poll() is None:
        held.kill()


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path, holder):
    with pytest.raises(DataDirInUseError) as refused:
        LocalStore(tmp_path / "metadata")
    assert refused.value.pid == holder.process.pid
    assert refused.value.directory == tmp_path / "metadata"
    assert f"in use by pid {holder.process.pid}" in str(refused.value)


def test_the_lock_is_free_once_the_holder_closes_its_store(tmp_path, holder):
    holder.exit()
    LocalStore(tmp_path / "metadata").close()


def test_a_holder_killed_with_sigkill_leaves_a_stale_pid_but_no_lock(tmp_path, holder):
    pid = holder.process.pid
    holder.kill()
    lock_file = tmp_path / "metadata" / LOCK_FILE_NAME
    assert lock_file.read_text().strip() == str(pid)
    store = LocalStore(tmp_path / "metadata")
    assert lock_file.read_text().strip() == str(os.getpid())
    store.close()


def test_holders_in_one_process_share_the_lock_until_the_last_release(tmp_path):
    directory = tmp_path / "metadata"
    first = DataDirLock.acquire(directory)
    store = LocalStore(directory)
    first.release()
    first.release()  # a second release of one share is a no-op
    refused = Holder(directory)
    assert refused.answer == f"refused {os.getpid()}"
    refused.exit()
    store.close()
    other = Holder(directory)
    assert other.answer == "holding"
    other.exit()


def test_a_store_that_fails_to_open_gives_the_lock_back(tmp_path):
    directory = tmp_path / "metadata"
    directory.mkdir()
    (directory / "data.mdb").mkdir()  # LMDB cannot open a directory as its data file
    with pytest.raises(Exception) as failed:
        LocalStore(directory)
    assert not isinstance(failed.value, DataDirInUseError)
    (directory / "data.mdb").rmdir()
    other = Holder(directory)
    assert other.answer == "holding"
    other.exit()
