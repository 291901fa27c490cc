"""The data dir is the broker's own: directories 0700, files 0600.

Ledger files, the LMDB metadata, the security dir (keys, tokens) and whatever
else lives under the data dir hold messages or secrets no other local user may
read. A broker process creates everything under the umask OWNER_ONLY_UMASK, and
at start tightens what an older version (or a copy, or a restore) left readable
by group or others. Bits are only ever removed, never added.
"""

from __future__ import annotations

import logging
import os
import stat
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


def restrict_data_dir(data_dir: Path) -> int:
    """Create `data_dir` (0700) if missing, and take group and other permissions off
    it and everything under it (symlinks are neither followed nor changed).
    Returns how many entries were tightened."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
    tightened = int(_tighten(str(data_dir), data_dir.stat().st_mode))
    for root, directories, files in os.walk(data_dir):
        for name in directories + files:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            tightened += _tighten(path, mode)
    if tightened:
        log.warning(
            "data dir %s: took group and other permissions off %d files and directories "
            "(the broker's data is its owner's only: 0600 files, 0700 directories)",
            data_dir,
            tightened,
        )
    return tightened
