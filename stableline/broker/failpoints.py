"""The broker's failpoint hook, for crash and disk-fault tests (config `failpoints`,
off by default).

`failpoints = "txn-decided,txn-end-topic:persistent://public/default/b"` arms
failpoints by name, or by name and detail. A broker reaching an armed one prints
`{"event": "failpoint", "name": ..., "detail": ...}` on stdout, logs a warning,
and waits there until SIGUSR1 releases every failpoint for good, or it is killed.

`publish:TOPIC` holds every append to TOPIC (full name) before it is written, as
if the disk were slow: the broker's back-pressure on producers shows.

`internal-error:TOPIC` makes every append to TOPIC fail with an error no part of
the broker expects (InjectedFault), until SIGUSR1: the send is answered with an
internal error id, the traceback goes to the log under that id.

`replica-cursors:TOPIC` holds every cursor write the topic's owner sends this broker
as a replica of TOPIC (full name), as if it never arrived: a taking broker must find
the acks elsewhere.

Two more make the disk misbehave under every ledger (managed_ledger.disk):
- `disk-full`: every ledger write fails with ENOSPC until SIGUSR1 (space is
  back); `disk-full:N`: the next N writes fail.
- `fsync-fail`: every ledger fsync fails with EIO until SIGUSR1;
  `fsync-fail:N`: the next N fail.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging

from managed_ledger import disk

log = logging.getLogger(__name__)

PUBLISH = "publish"
INTERNAL_ERROR = "internal-error"
REPLICA_CURSORS = "replica-cursors"
DISK_FULL = "disk-full"
FSYNC_FAIL = "fsync-fail"


def _disk_fault(part: str) -> tuple[str, int | None] | None:
    """(kind, count or None for "until released") when `part` arms a disk fault."""
    name, _, detail = part.partition(":")
    if name not in (DISK_FULL, FSYNC_FAIL):
        return None
    if not detail:
        return name, None
    if not detail.isdigit():
        raise ValueError(f"failpoint {part!r}: the count after ':' must be a whole number")
    return name, int(detail)


class InjectedFault(RuntimeError):
    """The unexpected error the internal-error failpoint raises."""


class Failpoints:
    def __init__(self, spec: str):
        self.armed = {part.strip() for part in spec.split(",") if part.strip()}
        self._released = asyncio.Event()
        self.disk: disk.FaultyDisk | None = None
        for part in self.armed:
            fault = _disk_fault(part)
            if fault is None:
                continue
            if self.disk is None:
                self.disk = disk.FaultyDisk()
                disk.install(self.disk)
            kind, count = fault
            if kind == DISK_FULL:
                self.disk.fail_writes(errno.ENOSPC, count)
            else:
                self.disk.fail_syncs(errno.EIO, count)
            log.warning("failpoint %s armed: ledger writes will fail", part)

    def release(self) -> None:
        log.warning("failpoints released")
        self.armed.clear()
        if self.disk is not None:
            self.disk.heal()
        self._released.set()

    async def __call__(self, name: str, detail: str) -> None:
        if name == PUBLISH and f"{INTERNAL_ERROR}:{detail}" in self.armed:
            raise InjectedFault(f"failpoint {INTERNAL_ERROR} armed for {detail}")
        if name not in self.armed and f"{name}:{detail}" not in self.armed:
            return
        log.warning("failpoint %s reached (%s); waiting for SIGUSR1", name, detail)
        print(json.dumps({"event": "failpoint", "name": name, "detail": detail}), flush=True)
        await self._released.wait()
