"""An accept loop that counts connections before anything else is spent on them.

asyncio's servers give a protocol no peer address until the connection is made, and
with TLS not until its handshake is done, so a cap per address would come too late:
a peer stalling handshakes would hold descriptors uncounted. Here the listening
socket is read directly: each accepted socket is charged to its address in an
AddressSlots at once (past a cap it is closed there and then), then handed to
asyncio (`connect_accepted_socket`, the TLS handshake bounded by
`handshake_timeout_s`); its slot is given back when the connection is lost or its
handshake fails.

Out of descriptors (EMFILE and the like) the loop stops accepting for a moment
(ACCEPT_BACKOFF_S, doubling to ACCEPT_BACKOFF_MAX_S) instead of spinning, and says
so at most once per LOG_INTERVAL_S with how many accepts failed meanwhile: the
clients wait in the listen backlog, the log does not fill the disk.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import struct
import time
from collections.abc import Callable

from stableline.broker.address_slots import AddressSlots, Refusal

log = logging.getLogger(__name__)

BACKLOG = 1024
ACCEPTS_PER_WAKEUP = 128
ACCEPT_BACKOFF_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0
LOG_INTERVAL_S = 10.0
# SO_LINGER on, 0 s: close() sends a reset and keeps no TIME_WAIT.
_RESET = struct.pack("ii", 1, 0)
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class ThrottledLog:
    """One log line per `interval_s` at most, with how many were held back."""

    def __init__(self, logger: logging.Logger, interval_s: float = LOG_INTERVAL_S) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._last = -float("inf")
        self._held = 0

    def __call__(self, level: int, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._held += 1
            return
        held, self._held, self._last = self._held, 0, now
        if held:
            message += " (%d more like it since the last such line)"
            args = (*args, held)
        self._log.log(level, message, *args)


class _Counted(asyncio.Protocol):
    """Delegates to the real protocol; gives the slot back when the connection ends."""

    def __init__(self, inner: asyncio.BaseProtocol, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release = release

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._release()
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[attr-defined]

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class GuardedListener:
    """Listens on (host, port), admitting connections within `slots`' caps."""

    def __init__(
        self,
        name: str,
        slots: AddressSlots,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        ssl_context: ssl.SSLContext | None,
        handshake_timeout_s: float,
    ) -> None:
        self.name = name
        self.slots = slots
        self._factory = protocol_factory
        self._ssl = ssl_context
        self._handshake_timeout_s = handshake_timeout_s
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task] = set()
        self._backoff_s = ACCEPT_BACKOFF_S
        self._retry: asyncio.TimerHandle | None = None
        self._log = ThrottledLog(log)
        self._refusal_log = ThrottledLog(log)
        self.accept_failures = 0
        self.handshake_failures = 0

    def start(self, host: str, port: int) -> int:
        """Listen; the bound port (port 0 picks a free one). OSError if it cannot."""
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._accept)
        return sock.getsockname()[1]

    @property
    def sockets(self) -> list[socket.socket]:
        return [self._sock] if self._sock is not None else []

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._sock is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        for task in self._pending:
            task.cancel()

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, peer = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:
                continue
            except OSError as error:
                if error.errno not in _OUT_OF_RESOURCES:
                    log.warning("%s: accept failed: %s", self.name, error)
                    break
                self._out_of_resources(error)
                return
            self._admit(conn, peer)
        self._backoff_s = ACCEPT_BACKOFF_S

    def _out_of_resources(self, error: OSError) -> None:
        self.accept_failures += 1
        self._log(
            logging.ERROR,
            "%s: cannot accept a connection: %s; pausing accepts %.2f s. Raise the "
            "open-files limit (ulimit -n) or lower the connection caps",
            self.name,
            error.strerror,
            self._backoff_s,
        )
        self._loop.remove_reader(self._sock.fileno())
        self._retry = self._loop.call_later(self._backoff_s, self._resume)
        self._backoff_s = min(self._backoff_s * 2, ACCEPT_BACKOFF_MAX_S)

    def _resume(self) -> None:
        self._retry = None
        if self._sock is not None:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _admit(self, conn: socket.socket, peer: object) -> None:
        address = peer[0] if isinstance(peer, tuple) else str(peer)
        refusal = self.slots.take(address)
        if refusal is not None:
            # Closed at once, unread: a reset tells the client, and costs nothing more.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            conn.close()
            caps = self.slots.caps
            self._refusal_log(
                logging.WARNING,
                "%s: refused a connection from %s: %s",
                self.name,
                address,
                f"{caps.total} connections are open, the most allowed"
                if refusal is Refusal.TOTAL
                else f"that address holds {caps.per_address} connections, the most one may",
            )
            return
        conn.setblocking(False)
        task = self._loop.create_task(self._connect(conn, address))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket, address: str) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.slots.release(address)

        try:
            await self._loop.connect_accepted_socket(
                lambda: _Counted(self._factory(), release),
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=self._handshake_timeout_s if self._ssl else None,
            )
        except asyncio.CancelledError:  # the port is closing
            conn.close()
            release()
            raise
        except Exception as error:
            # A failed or stalled TLS handshake (asyncio has closed the socket), or
            # the peer gone already: the slot is free again either way.
            self.handshake_failures += 1
            conn.close()
            release()
            if not isinstance(error, (OSError, TimeoutError)):
                log.debug("%s: connection from %s not set up: %r", self.name, address, error)
