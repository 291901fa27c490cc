"""An accept loop that counts connections before anything else is spent on them.

asyncio's servers give a protocol no peer address until the connection is made, and
with TLS not until its handshake is done, so a cap per address would come too late:
a peer stalling handshakes would hold descriptors uncounted. Here the listening
socket is read directly: each accepted socket is charged to its address in an
AddressSlots at once (past a cap it is closed there and then), then handed to
asyncio (`connect_accepted_socket`, the TLS handshake bounded by
`handshake_timeout_s`); its slot is given back when the connection is lost or its
handshake fails.

A connection is *waiting* from its accept until its protocol says it has proven
itself (`Admission.proven`: a Kafka connection authenticated, an HTTP one sent its
first request's headers). Past a cap, a new connection takes the slot of the
longest-waiting connection of its address (past the total: of any address), which
is closed; only when there is none is the new one refused. Honest clients prove
themselves within milliseconds, so sockets that sit silent are what goes: a client
keeps logging in from the address an attacker fills with them, as soon as it
connects and not once the attacker's time is up.

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

from stableline.broker.connections.address_slots import AddressSlots, Refusal

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


class Admission:
    """One accepted connection's slot: given back once, whichever way it ends."""

    __slots__ = ("_listener", "_released", "_waiting", "address", "task", "transport")

    def __init__(self, listener: GuardedListener, address: str) -> None:
        self.address = address
        self._listener = listener
        self._released = False
        self._waiting = True
        self.transport: asyncio.BaseTransport | None = None
        self.task: asyncio.Task | None = None

    def proven(self) -> None:
        """The connection has shown it is a client (authenticated, a request sent):
        no newcomer may take its slot from now on."""
        if self._waiting:
            self._waiting = False
            self._listener._stop_waiting(self)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.proven()
            self._listener.slots.release(self.address)

    def evict(self) -> None:
        """Give the slot up for a newcomer and close the connection."""
        self.release()
        if self.transport is not None:
            self.transport.abort()
        elif self.task is not None:
            self.task.cancel()  # its TLS handshake


class _Counted(asyncio.Protocol):
    """Delegates to the real protocol; gives the slot back when the connection ends."""

    def __init__(self, inner: asyncio.BaseProtocol, admission: Admission) -> None:
        self._inner = inner
        self._admission = admission

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._admission.transport = transport
        self._inner.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._admission.release()
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
    """Listens on (host, port), admitting connections within `slots`' caps;
    `protocol_factory(admission)` makes each connection's protocol."""

    def __init__(
        self,
        name: str,
        slots: AddressSlots,
        protocol_factory: Callable[[Admission], asyncio.BaseProtocol],
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
        # Connections not proven yet, oldest first: all, and by address.
        self._waiting: dict[Admission, None] = {}
        self._waiting_at: dict[str, dict[Admission, None]] = {}
        self.accept_failures = 0
        self.handshake_failures = 0
        self.evicted = 0

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

    def _stop_waiting(self, admission: Admission) -> None:
        self._waiting.pop(admission, None)
        at = self._waiting_at.get(admission.address)
        if at is not None:
            at.pop(admission, None)
            if not at:
                del self._waiting_at[admission.address]

    def _take(self, address: str) -> Refusal | None:
        """A slot for `address`, a waiting connection's if need be (it is closed)."""
        for _ in range(2):  # past the total, then perhaps past the address's cap
            refusal = self.slots.refusal(address)
            if refusal is None:
                break
            waiting = self._waiting if refusal is Refusal.TOTAL else self._waiting_at.get(address)
            if not waiting:
                break
            next(iter(waiting)).evict()
            self.evicted += 1
        return self.slots.take(address)

    def _admit(self, conn: socket.socket, peer: object) -> None:
        address = peer[0] if isinstance(peer, tuple) else str(peer)
        refusal = self._take(address)
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
        admission = Admission(self, address)
        self._waiting[admission] = None
        self._waiting_at.setdefault(address, {})[admission] = None
        task = self._loop.create_task(self._connect(conn, admission))
        admission.task = task
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        # A task cancelled before it ran (evicted in the batch that accepted it)
        # never reaches its own clean-up: the socket is closed here. The same socket
        # object closed twice is harmless.
        task.add_done_callback(lambda done: conn.close() if done.cancelled() else None)

    async def _connect(self, conn: socket.socket, admission: Admission) -> None:
        release, address = admission.release, admission.address
        if admission._released:  # evicted before this task ran
            conn.close()
            return
        try:
            await self._loop.connect_accepted_socket(
                lambda: _Counted(self._factory(admission), admission),
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
