"""The data dir is the broker's own: directories 0700, files 0600.

Ledger files, the LMDB metadata, the security dir (keys, tokens) and whatever
else lives under the data dir hold messages or secrets no other local user may
read. A broker process creates everything under the umask OWNER_ONLY_UMASK, and
tightens what an older version (or a copy, or a restore) left readable by group
or others. Bits are only ever removed, never added.

At start only the data dir itself and its direct entries are checked
(restrict_top_of_data_dir), before anything is served: no other user can reach a
path below a 0700 directory it does not own, so that alone keeps everything
below private, and it costs the same whatever the number of topics. The walk of
the whole tree (restrict_data_dir), one lstat per file, runs after the broker is
healthy, so start-up does not grow with the topics' files.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_ONLY_UMASK = 0o077
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
_GROUP_AND_OTHERS = 0o077


def use_owner_only_umask() -> None:
    """Files and directories this process creates from now on are its owner's only."""
    os.umask(OWNER_ONLY_UMASK)


def _tighten(path: str, mode: int) -> bool:
    if not mode & _GROUP_AND_OTHERS:
        return False
    os.chmod(path, stat.S_IMODE(mode) & ~_GROUP_AND_OTHERS, follow_symlinks=False)
    return True


def _log_tightened(data_dir: Path, tightened: int) -> None:
    if tightened:
        log.warning(
            "data dir %s: took group and other permissions off %d files and directories "
            "(the broker's data is its owner's only: 0600 files, 0700 directories)",
            data_dir,
            tightened,
        )


def _tighten_entry(entry: os.DirEntry) -> bool:
    if entry.is_symlink():  # from the directory entry: no system call
        return False
    try:
        return _tighten(entry.path, entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False  # deleted meanwhile


def restrict_top_of_data_dir(data_dir: Path) -> int:
    """Create `data_dir` (0700) if missing, and take group and other permissions off
    it and its direct entries (symlinks are neither followed nor changed).
    Returns how many entries were tightened."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
    tightened = int(_tighten(str(data_dir), data_dir.stat().st_mode))
    with os.scandir(data_dir) as entries:
        tightened += sum(_tighten_entry(entry) for entry in entries)
    _log_tightened(data_dir, tightened)
    return tightened


def restrict_data_dir(data_dir: Path, stop: threading.Event | None = None) -> int:
    """Take group and other permissions off everything under `data_dir` (symlinks
    are neither followed nor changed), until done or `stop` is set. Returns how
    many entries were tightened."""
    tightened = 0
    pending = [str(data_dir)]
    while pending and not (stop is not None and stop.is_set()):
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    tightened += _tighten_entry(entry)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except FileNotFoundError:
            continue  # deleted meanwhile (a topic deleted while the broker runs)
    _log_tightened(data_dir, tightened)
    return tightened
