"""The etcd metadata store: a cluster's brokers agree through one etcd (3.4+).

It speaks etcd's v3 gRPC API through the stubs of the `aetcd` package on a channel
of its own (aetcd's client has no TLS and one endpoint; this needs both):

- A compare-and-set is one etcd Txn: `create_revision == 0` for a create, `version
  == expected + 1` otherwise (etcd counts versions from 1, the interface from 0).
- The session is an etcd lease of `session_timeout_s` (rounded up to whole seconds;
  etcd may grant more). Ephemeral keys are put under it; close() revokes it. A
  keep-alive goes out every third of the TTL. The store tracks the lease's earliest
  possible expiry (send time of the last answered keep-alive + granted TTL): on a
  failed keep-alive the session is SUSPENDED, and it is declared LOST a sixth of
  the TTL before that expiry, so a broker stops acting on its ephemeral keys before
  etcd deletes them and anyone else can act. LOST is declared by a timer armed at
  each renewal, not by the keep-alive loop (whose attempt may hang on an etcd that
  does not answer), or sooner by `session_holds()` when asked past that time; a
  renewal answered after it does not undo it. Once etcd answers again a LOST
  session's lease is revoked and a new one granted (SESSION_REESTABLISHED); whoever
  owned ephemeral keys writes them again.
- Watches share one etcd watch on every key (`/`), resumed after a broken stream
  from the next revision, so no change is missed while etcd keeps its history; if it
  was compacted away meanwhile, the watches end with WatchOverflow.
- Every call has a deadline (`operation_timeout_s`); an unreachable etcd is
  `MetadataStoreUnavailable` naming the URL, at once when the connection is refused.
- With USER:PASSWORD the store authenticates (and again when etcd's token lapses);
  the user needs read and write on the keys under `/`. Wrong or missing credentials
  are refused at open, with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from stableline.metadata.errors import (
    AlreadyExists,
    BadVersion,
    MetadataStoreUnavailable,
    NotFound,
    WatchOverflow,
)
from stableline.metadata.etcd_url import EtcdSettings
from stableline.metadata.paths import (
    check_path,
    check_prefix,
    child_names,
    children_prefix,
    under,
)
from stableline.metadata.store import MAX_GUARDED_OPS, ClusterMetadataStore
from stableline.metadata.values import (
    GetResult,
    Notification,
    NotificationType,
    SessionEvent,
    SessionState,
    Stat,
)

log = logging.getLogger(__name__)

DEFAULT_OPERATION_TIMEOUT_S = 10.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# Retries of a broken keep-alive or watch stream back off up to this.
_MAX_RETRY_DELAY_S = 1.0
# How long close() waits for its keep-alive and watch tasks to end.
_CLOSE_WAIT_S = 2.0
_CHANNEL_OPTIONS = (
    # etcd restarted or another endpoint up: reconnect within a second, not gRPC's 2 min.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


# What etcd says (some as INVALID_ARGUMENT) when credentials are wrong or missing.
_CREDENTIAL_ERRORS = ("authentication failed", "user name is empty", "permission denied")


class _LeaseExpired(Exception):
    """etcd answered a keep-alive with TTL 0: the lease no longer exists."""


def _stat(kv: Any) -> Stat:
    return Stat(kv.version - 1, kv.create_revision, kv.mod_revision, kv.lease != 0)


class EtcdMetadataStore(ClusterMetadataStore):
    def __init__(
        self,
        settings: EtcdSettings,
        channel: grpc.aio.Channel,
        *,
        session_timeout_s: float,
        operation_timeout_s: float,
    ):
        super().__init__(settings.redacted)
        assert session_timeout_s > 0 and operation_timeout_s > 0
        self.settings = settings
        self._channel = channel
        self._kv = rpc.KVStub(channel)
        self._leases = rpc.LeaseStub(channel)
        self._watch_stub = rpc.WatchStub(channel)
        self._auth = rpc.AuthStub(channel)
        self._metadata: tuple[tuple[str, str], ...] | None = None
        self._operation_timeout_s = operation_timeout_s
        self._ttl_s = max(1, math.ceil(session_timeout_s))
        self._lease_id = 0
        # The earliest moment (monotonic) etcd may expire the lease.
        self._lease_deadline = 0.0
        # Fires at _lost_at, when the lease was not renewed meanwhile.
        self._lost_timer: asyncio.TimerHandle | None = None
        self._keeper: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None
        # The open keep-alive and watch streams, cancelled by close() directly: a
        # cancelled task awaiting a stream's read may not see its cancellation.
        self._streams: set[Any] = set()
        self._closing = False
        self._watching: asyncio.Future | None = None

    @classmethod
    async def open(
        cls,
        settings: EtcdSettings,
        *,
        session_timeout_s: float = 30.0,
        operation_timeout_s: float = DEFAULT_OPERATION_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> EtcdMetadataStore:
        """Connect, authenticate, grant the session's lease; MetadataStoreUnavailable
        naming the URL if etcd cannot be reached within `connect_timeout_s`."""
        target, options = await _target(settings)
        credentials = _credentials(settings)
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=options)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=options)
        store = cls(
            settings,
            channel,
            session_timeout_s=session_timeout_s,
            operation_timeout_s=operation_timeout_s,
        )
        try:
            await store._authenticate(connect_timeout_s)
            # A read of the key space the store uses: etcd grants leases to anyone,
            # so this is what finds missing or short rights at open.
            await store._call(
                store._kv.Range,
                rpc.RangeRequest(
                    key=b"/", range_end=prefix_range_end(b"/"), limit=1, keys_only=True
                ),
                timeout_s=connect_timeout_s,
            )
            await store._grant_lease(connect_timeout_s)
        except BaseException:
            await channel.close()
            raise
        store._keeper = asyncio.create_task(store._keep_session())
        return store

    # --- calls ----------------------------------------------------------------------

    async def _authenticate(self, timeout_s: float) -> None:
        if self.settings.user is None:
            return
        self._metadata = None
        reply = await self._call(
            self._auth.Authenticate,
            rpc.AuthenticateRequest(name=self.settings.user, password=self.settings.password),
            timeout_s=timeout_s,
        )
        self._metadata = (("token", reply.token),)

    async def _call(
        self, method: Callable[..., Awaitable[Any]], request: Any, *, timeout_s: float = 0.0
    ) -> Any:
        """One etcd RPC with a deadline; grpc errors become the store's errors.

        An expired auth token (etcd's simple tokens lapse when idle) is renewed once.
        """
        for attempt in (1, 2):
            try:
                return await method(
                    request,
                    timeout=timeout_s or self._operation_timeout_s,
                    metadata=self._metadata,
                )
            except grpc.aio.AioRpcError as error:
                if (
                    attempt == 1
                    and self._metadata is not None
                    and "invalid auth token" in (error.details() or "")
                ):
                    await self._authenticate(timeout_s or self._operation_timeout_s)
                    continue
                raise self._error(error) from None
        raise AssertionError("unreachable")

    def _error(self, error: grpc.aio.AioRpcError) -> MetadataStoreUnavailable:
        code, details = error.code(), error.details() or ""
        where = f"etcd at {self.description}"
        if code is grpc.StatusCode.UNAVAILABLE:
            return MetadataStoreUnavailable(
                f"{where} is unreachable ({details}); check that it runs and that "
                f"--metadata-store names it"
            )
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return MetadataStoreUnavailable(f"{where} did not answer in time; retry later")
        if code in (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
        ) or any(sign in details for sign in _CREDENTIAL_ERRORS):
            return MetadataStoreUnavailable(
                f"{where} refused the credentials ({details}); check the user and "
                f"password in the metadata store URL and the user's etcd role"
            )
        return MetadataStoreUnavailable(f"{where} failed: {code.name}: {details}")

    async def open_to_anyone(self) -> bool:
        """Whether etcd answers a read from a client with no user, password or client
        certificate (on a channel of its own): true when etcd runs without
        authentication, so anyone who reaches it can rewrite the cluster's grants,
        registrations and ownership."""
        target, options = await _target(self.settings)
        anonymous = replace(
            self.settings, user=None, password=None, tls_cert_file=None, tls_key_file=None
        )
        credentials = _credentials(anonymous)
        if self.settings.tls_cert_file:
            log.info(
                "checking that etcd at %s refuses a client without a certificate (gRPC "
                "may log the TLS error of that refusal next)",
                self.description,
            )
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=options)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=options)
        try:
            await rpc.KVStub(channel).Range(
                rpc.RangeRequest(
                    key=b"/", range_end=prefix_range_end(b"/"), limit=1, keys_only=True
                ),
                timeout=self._operation_timeout_s,
            )
        except grpc.aio.AioRpcError:
            return False  # refused (no credentials) or no TLS handshake without a cert
        finally:
            await channel.close()
        return True

    # --- reads ----------------------------------------------------------------------

    async def get(self, path: str) -> GetResult | None:
        self._check_open()
        reply = await self._call(self._kv.Range, rpc.RangeRequest(key=check_path(path).encode()))
        if not reply.kvs:
            return None
        kv = reply.kvs[0]
        return GetResult(bytes(kv.value), _stat(kv))

    async def exists(self, path: str) -> bool:
        self._check_open()
        request = rpc.RangeRequest(key=check_path(path).encode(), count_only=True)
        return (await self._call(self._kv.Range, request)).count > 0

    async def children(self, path: str) -> list[str]:
        self._check_open()
        prefix = children_prefix(path)
        raw = prefix.encode()
        request = rpc.RangeRequest(key=raw, range_end=prefix_range_end(raw), keys_only=True)
        reply = await self._call(self._kv.Range, request)
        return child_names(prefix, [kv.key.decode() for kv in reply.kvs])

    async def scan(self, prefix: str) -> list[tuple[str, GetResult]]:
        self._check_open()
        check_prefix(prefix)
        # One range over every key starting with the prefix's text (one revision),
        # siblings such as /a/bc for /a/b left out after.
        raw = prefix.encode()
        request = rpc.RangeRequest(
            key=raw,
            range_end=prefix_range_end(raw),
            sort_order=rpc.RangeRequest.ASCEND,
            sort_target=rpc.RangeRequest.KEY,
        )
        reply = await self._call(self._kv.Range, request)
        found = []
        for kv in reply.kvs:
            path = kv.key.decode()
            if under(prefix, path):
                found.append((path, GetResult(bytes(kv.value), _stat(kv))))
        return found

    # --- writes ---------------------------------------------------------------------

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
    ) -> Stat:
        self._check_open()
        key = check_path(path).encode()
        assert expected_version is None or expected_version >= -1, expected_version
        lease = 0
        if ephemeral:
            if self._session_state is SessionState.LOST:
                raise MetadataStoreUnavailable(
                    f"etcd at {self.description}: the session is lost, so ephemeral key "
                    f"{path} cannot be written until it is re-established"
                )
            lease = self._lease_id
        put = rpc.PutRequest(key=key, value=value, lease=lease, prev_kv=True)
        if expected_version is None:
            reply = await self._call(self._kv.Put, put)
            put_reply, revision = reply, reply.header.revision
        else:
            if expected_version == -1:
                compare = rpc.Compare(
                    key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0
                )
            else:
                compare = rpc.Compare(
                    key=key,
                    target=rpc.Compare.VERSION,
                    result=rpc.Compare.EQUAL,
                    version=expected_version + 1,
                )
            reply = await self._call(
                self._kv.Txn,
                rpc.TxnRequest(
                    compare=[compare],
                    success=[rpc.RequestOp(request_put=put)],
                    failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))],
                ),
            )
            if not reply.succeeded:
                kvs = reply.responses[0].response_range.kvs
                actual = kvs[0].version - 1 if kvs else None
                if expected_version == -1:
                    assert actual is not None
                    raise AlreadyExists(path, actual)
                raise BadVersion(path, expected_version, actual)
            put_reply, revision = reply.responses[0].response_put, reply.header.revision
        if put_reply.HasField("prev_kv"):
            previous = put_reply.prev_kv
            return Stat(previous.version, previous.create_revision, revision, ephemeral)
        return Stat(0, revision, revision, ephemeral)

    async def write_guarded(
        self, guard: str, guard_version: int, puts: dict[str, bytes], deletes: list[str]
    ) -> None:
        self._check_open()
        assert guard_version >= 0 and len(puts) + len(deletes) <= MAX_GUARDED_OPS
        guard_key = check_path(guard).encode()
        operations = [
            rpc.RequestOp(request_put=rpc.PutRequest(key=check_path(path).encode(), value=value))
            for path, value in puts.items()
        ]
        operations += [
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(key=check_path(path).encode())
            )
            for path in deletes
        ]
        reply = await self._call(
            self._kv.Txn,
            rpc.TxnRequest(
                compare=[
                    rpc.Compare(
                        key=guard_key,
                        target=rpc.Compare.VERSION,
                        result=rpc.Compare.EQUAL,
                        version=guard_version + 1,
                    )
                ],
                success=operations,
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=guard_key))],
            ),
        )
        if not reply.succeeded:
            kvs = reply.responses[0].response_range.kvs
            raise BadVersion(guard, guard_version, kvs[0].version - 1 if kvs else None)

    async def delete(self, path: str, expected_version: int | None = None) -> int:
        self._check_open()
        key = check_path(path).encode()
        if expected_version is None:
            reply = await self._call(self._kv.DeleteRange, rpc.DeleteRangeRequest(key=key))
            if reply.deleted == 0:
                raise NotFound(path)
            return reply.header.revision
        compare = rpc.Compare(
            key=key,
            target=rpc.Compare.VERSION,
            result=rpc.Compare.EQUAL,
            version=expected_version + 1,
        )
        reply = await self._call(
            self._kv.Txn,
            rpc.TxnRequest(
                compare=[compare],
                success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))],
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key))],
            ),
        )
        if not reply.succeeded:
            kvs = reply.responses[0].response_range.kvs
            if not kvs:
                raise NotFound(path)
            raise BadVersion(path, expected_version, kvs[0].version - 1)
        return reply.header.revision

    # --- session ------------------------------------------------------------------------

    @property
    def lease_deadline(self) -> float:
        """The earliest moment (time.monotonic()) etcd may expire the session's lease:
        the send time of the last answered keep-alive (or grant) plus the TTL given."""
        return self._lease_deadline

    @property
    def _keep_alive_interval_s(self) -> float:
        return self._ttl_s / 3

    @property
    def _lost_at(self) -> float:
        """When a session that cannot renew its lease is declared LOST (monotonic)."""
        return self._lease_deadline - self._ttl_s / 6

    def session_holds(self) -> bool:
        if self._session_state not in (SessionState.CONNECTED, SessionState.SUSPENDED):
            return False
        if time.monotonic() < self._lost_at:
            return True
        self._session_event(SessionEvent.SESSION_LOST)
        return False

    def _renewed(self, sent: float, ttl: int) -> None:
        """The lease, renewed (or granted) as asked at `sent`, lives `ttl` s from then."""
        assert ttl > 0, ttl
        self._lease_deadline = sent + ttl
        self._arm_lost_timer()

    def _arm_lost_timer(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
        self._lost_timer = asyncio.get_running_loop().call_later(
            max(0.0, self._lost_at - time.monotonic()), self._lost_time_reached
        )

    def _lost_time_reached(self) -> None:
        self._lost_timer = None
        if self.session_holds():  # woken a little early: wait for the rest
            self._arm_lost_timer()

    async def _grant_lease(self, timeout_s: float = 0.0) -> None:
        sent = time.monotonic()
        reply = await self._call(
            self._leases.LeaseGrant, rpc.LeaseGrantRequest(TTL=self._ttl_s), timeout_s=timeout_s
        )
        assert reply.TTL > 0, reply
        self._lease_id = reply.ID
        self._renewed(sent, reply.TTL)

    async def _keep_session(self) -> None:
        """Keep the lease alive; move the session state as etcd answers or not."""
        delay = 0.1
        while not self._closing:
            try:
                if self._session_state is SessionState.LOST:
                    await self._reestablish()
                await self._keep_alive()
            except asyncio.CancelledError:
                raise
            except _LeaseExpired:
                if self._session_state is not SessionState.LOST:
                    self._session_event(SessionEvent.SESSION_LOST)
            except Exception as error:  # the stream broke, timed out, or etcd is away
                log.debug("etcd keep-alive failed: %r", error)
                if self._session_state is SessionState.CONNECTED:
                    self._session_event(SessionEvent.CONNECTION_LOST)
            else:
                continue  # closing, or LOST: re-established at the top
            # A SUSPENDED session is declared LOST by its timer (_lost_time_reached).
            await asyncio.sleep(delay)
            delay = min(max(delay, 0.1) * 2, _MAX_RETRY_DELAY_S)

    async def _keep_alive(self) -> None:
        """One keep-alive stream: renew every third of the TTL until it fails, or
        return once the session is LOST (a renewal answered too late does not undo
        that: the lease is revoked and a new one granted)."""
        call = self._leases.LeaseKeepAlive(metadata=self._metadata)
        self._streams.add(call)
        interval = self._keep_alive_interval_s
        try:
            while not self._closing and self._session_state is not SessionState.LOST:
                sent = time.monotonic()
                # asyncio.timeout, not wait_for: wait_for can swallow close()'s
                # cancellation when the read completes at the same moment.
                async with asyncio.timeout(interval):
                    await call.write(rpc.LeaseKeepAliveRequest(ID=self._lease_id))
                    reply = await call.read()
                if reply is grpc.aio.EOF:
                    raise ConnectionError("etcd ended the keep-alive stream")
                if reply.TTL <= 0:
                    raise _LeaseExpired()
                if not self.session_holds():
                    return
                self._renewed(sent, reply.TTL)
                if self._session_state is SessionState.SUSPENDED:
                    self._session_event(SessionEvent.RECONNECTED)
                await asyncio.sleep(interval)
        finally:
            self._streams.discard(call)
            call.cancel()

    async def _reestablish(self) -> None:
        """A new lease after a lost one. The old one is revoked first (etcd may have
        kept it through a restart), so its keys go now and never outlive LOST."""
        if self._lease_id:
            await self._revoke(self._lease_id, self._keep_alive_interval_s)
            self._lease_id = 0
        await self._grant_lease(self._keep_alive_interval_s)
        assert self._session_state is SessionState.LOST, self._session_state
        self._session_event(SessionEvent.SESSION_REESTABLISHED)

    async def _revoke(self, lease_id: int, timeout_s: float) -> None:
        """Revoke the lease; one etcd no longer knows counts as revoked."""
        try:
            await self._leases.LeaseRevoke(
                rpc.LeaseRevokeRequest(ID=lease_id), timeout=timeout_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as error:
            if error.code() is not grpc.StatusCode.NOT_FOUND:
                raise self._error(error) from None

    # --- watches ------------------------------------------------------------------------

    async def _start_watching(self) -> None:
        if self._watcher is None:
            self._watching = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.create_task(self._watch_all())
        try:
            await asyncio.wait_for(asyncio.shield(self._watching), self._operation_timeout_s)
        except TimeoutError:
            raise MetadataStoreUnavailable(
                f"etcd at {self.description} did not start a watch in time; retry later"
            ) from None

    async def _watch_all(self) -> None:
        """One etcd watch on every key; resumed from the next revision when it breaks."""
        next_revision = 0
        delay = 0.1
        root = b"/"
        while not self._closing:
            call = self._watch_stub.Watch(metadata=self._metadata)
            self._streams.add(call)
            try:
                create = rpc.WatchCreateRequest(
                    key=root, range_end=prefix_range_end(root), start_revision=next_revision
                )
                await call.write(rpc.WatchRequest(create_request=create))
                while True:
                    reply = await call.read()
                    if reply is grpc.aio.EOF:
                        raise ConnectionError("etcd ended the watch stream")
                    if reply.compact_revision:
                        self._end_watches(
                            WatchOverflow(
                                f"etcd at {self.description} compacted the changes this "
                                f"watch missed while away; re-read and watch again"
                            )
                        )
                        next_revision = 0
                        raise ConnectionError("watch history compacted")
                    if reply.canceled:
                        raise ConnectionError(f"etcd cancelled the watch: {reply.cancel_reason}")
                    if reply.created:
                        if next_revision == 0:
                            next_revision = reply.header.revision + 1
                        delay = 0.1
                        if not self._watching.done():
                            self._watching.set_result(None)
                        continue
                    for event in reply.events:
                        self._notify(_notification(event))
                        next_revision = event.kv.mod_revision + 1
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.debug("etcd watch broke: %r", error)
            finally:
                self._streams.discard(call)
                call.cancel()
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY_DELAY_S)

    # --- life -------------------------------------------------------------------------

    async def close(self) -> None:
        if self._session_state is SessionState.CLOSED:
            return
        self._closing = True
        if self._lost_timer is not None:
            self._lost_timer.cancel()
        tasks = {task for task in (self._keeper, self._watcher) if task is not None}
        for task in tasks:
            task.cancel()
        for call in list(self._streams):
            call.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=_CLOSE_WAIT_S)
            if stuck:
                log.warning("etcd store %s: %d task(s) did not stop", self.description, len(stuck))
        if self._lease_id:
            # Ephemeral keys go now rather than a TTL later; if etcd is away they lapse.
            with contextlib.suppress(MetadataStoreUnavailable):
                await self._revoke(self._lease_id, min(2.0, self._operation_timeout_s))
        self._mark_closed()
        await self._channel.close()


def _notification(event: Any) -> Notification:
    kv = event.kv
    path = kv.key.decode()
    if event.type == rpc.Event.DELETE:
        return Notification(NotificationType.DELETED, path, kv.mod_revision)
    kind = NotificationType.CREATED if kv.version == 1 else NotificationType.MODIFIED
    return Notification(kind, path, kv.mod_revision, GetResult(bytes(kv.value), _stat(kv)))


async def _target(settings: EtcdSettings) -> tuple[str, list[tuple[str, Any]]]:
    """gRPC target and options: one endpoint as given; several resolved to addresses
    that one channel fails over between (pick_first)."""
    options: list[tuple[str, Any]] = list(_CHANNEL_OPTIONS)
    if len(settings.endpoints) == 1:
        host, port = settings.endpoints[0]
        return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), options
    loop = asyncio.get_running_loop()
    addresses: list[str] = []
    for host, port in settings.endpoints:
        try:
            infos = await loop.getaddrinfo(
                host, port, family=socket.AF_INET, type=socket.SOCK_STREAM
            )
        except OSError as error:
            raise MetadataStoreUnavailable(
                f"etcd at {settings.redacted}: cannot resolve {host} ({error})"
            ) from None
        addresses.extend(f"{info[4][0]}:{port}" for info in infos)
    names = [host for host, _ in settings.endpoints if not _is_ip(host)]
    if settings.tls and names:
        # The certificate names the host, not the address resolved for it.
        options.append(("grpc.ssl_target_name_override", names[0]))
    return "ipv4:" + ",".join(dict.fromkeys(addresses)), options


def _is_ip(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except OSError:
            continue
    return False


def _credentials(settings: EtcdSettings) -> grpc.ChannelCredentials | None:
    if not settings.tls:
        return None

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as error:
            raise MetadataStoreUnavailable(
                f"etcd at {settings.redacted}: cannot read TLS file {path}: {error.strerror}"
            ) from None

    return grpc.ssl_channel_credentials(
        root_certificates=read(settings.tls_trust_certs_file),
        private_key=read(settings.tls_key_file),
        certificate_chain=read(settings.tls_cert_file),
    )
