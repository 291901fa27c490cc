"""Child processes a supervisor owns: out of the terminal's Ctrl-C, ended with it.

A child started with `supervised_popen_options()` is in a process group of its own,
so the Ctrl-C a terminal sends to its foreground group reaches only the supervisor,
which then stops its children in the order it chooses (brokers before their etcd).
On Linux the child also asks the kernel for SIGTERM when the supervisor dies, so a
supervisor ended by `kill -9` leaves nothing running.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def supervised_popen_options() -> dict[str, Any]:
    """Keyword arguments for subprocess.Popen that make the child supervised."""
    options: dict[str, Any] = {"process_group": 0}
    if sys.platform.startswith("linux"):
        options["preexec_fn"] = _terminate_with(os.getpid())
    return options


def _terminate_with(parent_pid: int) -> Callable[[], None]:
    # Looked up before the fork: the child only calls it.
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the request was made
            os.kill(os.getpid(), signal.SIGTERM)

    return in_child
