"""A per-address cap for the gRPC port's sockets, calls or not (Linux).

gRPC accepts its own connections and tells a server nothing of them until they
call, so ConnectionTable can cap only connections with a call open, and gRPC's own
option caps the port's total: sockets that finish TLS and HTTP/2's preface and
never call could still fill the port from one address until gRPC's idle timeout
closed them. This guard looks at the port's established sockets as the kernel
lists them (/proc/net/tcp and tcp6) every SWEEP_INTERVAL_S; where one address has
more than its per-address cap, it shuts down the surplus among that address's
sockets with no call open at two sweeps running, oldest first (by inode), as a
newcomer past a cap
displaces the longest-waiting connection on the Kafka and HTTP ports. The socket
is found among this process's descriptors and shut down through a duplicate
(checked to be the same socket), so gRPC sees its peer gone and closes its own.
Where /proc is missing it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stableline.broker.connections.guarded_accept import ThrottledLog

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 1.0
_ESTABLISHED = "01"
_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


@dataclass(frozen=True, slots=True)
class PortSocket:
    address: str
    port: int
    inode: int


def _ip(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # tcp6: four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if words[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, words[12:])
    return socket.inet_ntop(socket.AF_INET6, words)


def port_sockets(port: int, tables: Iterable[str] = _TABLES) -> list[PortSocket]:
    """The established sockets whose local port is `port`, as the kernel lists them."""
    found = []
    for table in tables:
        try:
            with open(table) as lines:
                next(lines, None)
                for line in lines:
                    fields = line.split()
                    local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                    if state != _ESTABLISHED or int(local.rpartition(":")[2], 16) != port:
                        continue
                    host, _, remote_port = remote.rpartition(":")
                    found.append(PortSocket(_ip(host), int(remote_port, 16), int(inode)))
        except OSError:
            continue
    return found


def surplus(
    sockets: list[PortSocket],
    per_address: int,
    calling: set[tuple[str, int]],
    idle_before: set[int] | None = None,
) -> list[PortSocket]:
    """The sockets to shut down: of each address past `per_address`, the oldest of
    those with no call open (`calling`: (address, port) of peers with one) and, when
    `idle_before` is given, idle at the sweep before too (inodes): a connection just
    made, its first call not in yet, is not taken for a silent one."""
    by_address: dict[str, list[PortSocket]] = {}
    for entry in sockets:
        by_address.setdefault(entry.address, []).append(entry)
    chosen = []
    for entries in by_address.values():
        over = len(entries) - per_address
        if over <= 0:
            continue
        idle = sorted(
            (
                e
                for e in entries
                if (e.address, e.port) not in calling
                and (idle_before is None or e.inode in idle_before)
            ),
            key=lambda e: e.inode,
        )
        chosen.extend(idle[:over])
    return chosen


def shut_down(inodes: set[int]) -> int:
    """Shut down this process's sockets with these inodes; how many were."""
    done = 0
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for name in descriptors:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if not target.startswith("socket:["):
            continue
        inode = int(target[8:-1])
        if inode not in inodes:
            continue
        try:
            duplicate = os.dup(int(name))
        except OSError:
            continue
        try:
            if os.fstat(duplicate).st_ino != inode:
                continue  # the descriptor was reused meanwhile
            with contextlib.suppress(OSError):
                _shutdown(duplicate)
                done += 1
        finally:
            os.close(duplicate)
    return done


def _shutdown(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.detach()  # the descriptor stays the caller's to close


class GrpcSocketGuard:
    """Sweeps the gRPC port every SWEEP_INTERVAL_S (start/stop with the server)."""

    def __init__(self, port: int, per_address: int, calling: Callable[[], set[tuple[str, int]]]):
        self._port = port
        self._per_address = per_address
        self._calling = calling
        self._task: asyncio.Task | None = None
        self._log = ThrottledLog(log)
        self._idle_before: set[int] = set()
        self.shut = 0

    def start(self) -> None:
        if os.path.exists(_TABLES[0]):
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            calling = self._calling()
            try:
                shut = await asyncio.to_thread(self._sweep, calling)
            except Exception:
                log.exception("grpc: the per-address socket sweep failed")
                continue
            if shut:
                self.shut += shut
                self._log(
                    logging.INFO,
                    "grpc: shut down %d connection(s) with no call past "
                    "max_connections_per_address (%d) of their address",
                    shut,
                    self._per_address,
                )

    def _sweep(self, calling: set[tuple[str, int]]) -> int:
        sockets = port_sockets(self._port)
        if len(sockets) <= self._per_address:
            self._idle_before = set()
            return 0
        chosen = surplus(sockets, self._per_address, calling, self._idle_before)
        self._idle_before = {e.inode for e in sockets if (e.address, e.port) not in calling}
        return shut_down({entry.inode for entry in chosen}) if chosen else 0
