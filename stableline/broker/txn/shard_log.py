"""A coordinator shard's log in the cluster's metadata store, so that the shard
outlives its leader's process and disk.

Each write of the shard's coordinator (a transaction's record, an ack, a sequence
block) is kept in the leader's own store, as with one broker, and copied to
`/stableline/coordinator-logs/{cluster}/{shard}/{key}` by guarded writes: each
applies only while the shard's record is at the version this leader took it at. A
broker that takes the shard (a CAS that bumps the record's epoch) reads the log
from there, so the old leader's next write is refused (`CoordinatorFencedError`),
whatever it believes about its lease.

Why the metadata store (etcd), not the topics' replicated ledgers: the log is small
(open transactions and the recently ended ones, a few hundred bytes each), written
a few times per transaction, and its fencing is exactly etcd's compare; a write
costs one etcd round trip shared by every change made meanwhile (group commit).

Promises:
- `flushed()` returns once every write made before it is in the metadata store,
  in the order made (a chunk of at most MAX_GUARDED_OPS keys at a time); the
  coordinator answers a change only after it. While the store cannot be reached,
  flushes retry with back-off and callers wait (their deadline is their own).
- Once a guarded write is refused, the log is fenced for good: every waiter and
  every later `flushed()` raises CoordinatorFencedError, and `on_fenced` runs once.
- `load` replaces the shard's records in the broker's store with the metadata
  store's (the truth: a local record never flushed was never answered).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
from collections.abc import Callable

from managed_ledger import LocalStore
from stableline.metadata import BadVersion, ClusterMetadataStore, MetadataStoreError
from stableline.metadata.layout import ROOT, check_cluster_name
from stableline.metadata.store import MAX_GUARDED_OPS
from txnbuffer import CoordinatorFencedError
from txnbuffer.coordinator import ACK_PREFIX, COORDINATOR_DB, TXN_PREFIX

log = logging.getLogger(__name__)

_MAX_RETRY_DELAY_S = 2.0


def shard_log_dir(cluster: str, shard: int) -> str:
    return f"{ROOT}/coordinator-logs/{check_cluster_name(cluster)}/{shard}"


def shard_key_prefix(shard: int) -> str:
    """Shard 0's records keep the keys of a single coordinator (a broker that ran
    alone keeps its log); the others' start with their shard."""
    return "" if shard == 0 else f"shard-{shard}/"


def sequence_key(shard: int) -> str:
    """The key of the shard's reserved sequence block (never prefixed)."""
    return f"sequence:{shard}"


class ShardLog:
    """The CoordinatorLog of a shard led here in a cluster (see the module docstring)."""

    def __init__(
        self,
        store: ClusterMetadataStore,
        cluster: str,
        shard: int,
        key_prefix: str,
        guard: str,
        guard_version: int,
        on_fenced: Callable[[int], None] = lambda shard: None,
    ):
        self.shard = shard
        self._store = store
        self._dir = shard_log_dir(cluster, shard)
        self._prefix = key_prefix
        self._guard = guard
        self._guard_version = guard_version
        self._on_fenced = on_fenced
        # Path -> value (None: delete), in the order last written.
        self._pending: dict[str, bytes | None] = {}
        self._written = 0  # writes made so far
        self._flushed = 0  # writes in the metadata store
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.fenced: CoordinatorFencedError | None = None
        self.flushes = 0

    def path_of(self, key: str) -> str:
        rest = key[len(self._prefix) :] if self._prefix and key.startswith(self._prefix) else key
        assert "/" not in rest and rest, key
        return f"{self._dir}/{rest}"

    def written(self, puts: dict[str, bytes], deletes: list[str]) -> None:
        if not puts and not deletes:
            return
        for key, value in puts.items():
            path = self.path_of(key)
            self._pending.pop(path, None)
            self._pending[path] = value
        for key in deletes:
            path = self.path_of(key)
            self._pending.pop(path, None)
            self._pending[path] = None
        self._written += 1
        if self._flusher is None and self.fenced is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush(), name=f"coordinator-log-{self.shard}"
            )

    async def flushed(self) -> None:
        if self.fenced is not None:
            raise self.fenced
        if self._flushed >= self._written:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((self._written, waiter))
        await waiter

    async def _flush(self) -> None:
        delay = 0.05
        try:
            while self._pending and self.fenced is None:
                reached, batch = self._written, self._pending
                self._pending = {}
                items = list(batch.items())
                for start in range(0, len(items), MAX_GUARDED_OPS):
                    chunk = items[start : start + MAX_GUARDED_OPS]
                    puts = {path: value for path, value in chunk if value is not None}
                    deletes = [path for path, value in chunk if value is None]
                    while True:
                        try:
                            await self._store.write_guarded(
                                self._guard, self._guard_version, puts, deletes
                            )
                            self.flushes += 1
                            delay = 0.05
                            break
                        except BadVersion:
                            self._fence()
                            return
                        except MetadataStoreError as error:
                            log.warning(
                                "coordinator shard %d: its log cannot be written (%s); "
                                "retrying in %.2f s",
                                self.shard,
                                error,
                                delay,
                            )
                            await asyncio.sleep(delay)
                            delay = min(delay * 2, _MAX_RETRY_DELAY_S)
                self._flushed = reached
                self._wake(functools.partial(operator.ge, reached))
        finally:
            self._flusher = None

    def _wake(self, due: Callable[[int], bool]) -> None:
        still = []
        for wanted, waiter in self._waiters:
            if not due(wanted):
                still.append((wanted, waiter))
            elif not waiter.done():
                if self.fenced is not None:
                    waiter.set_exception(self.fenced)
                else:
                    waiter.set_result(None)
        self._waiters = still

    def _fence(self) -> None:
        self.fenced = CoordinatorFencedError(
            f"transaction coordinator shard {self.shard} was taken by another broker; "
            f"ask again: the client is sent to its new leader"
        )
        self._pending.clear()
        self._wake(lambda wanted: True)
        log.warning("coordinator shard %d: another broker took it; this one stops", self.shard)
        self._on_fenced(self.shard)

    async def close(self) -> None:
        flusher = self._flusher
        if flusher is not None:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        self._waiters = []


def _local_records(local: LocalStore, shard: int, key_prefix: str) -> dict[str, bytes]:
    """The shard's records in the broker's store: its transactions, their acks and its
    reserved sequence block."""
    records = {
        key: bytes(value)
        for prefix in (key_prefix + TXN_PREFIX, key_prefix + ACK_PREFIX)
        for key, value in local.scan_prefix(COORDINATOR_DB, prefix)
    }
    sequence = local.get(COORDINATOR_DB, sequence_key(shard))
    if sequence is not None:
        records[sequence_key(shard)] = bytes(sequence)
    return records


async def load(
    store: ClusterMetadataStore, cluster: str, shard: int, key_prefix: str, local: LocalStore
) -> int:
    """Replace the shard's records in `local` with the log in the metadata store; the
    number of records loaded, 0 when it has none (then `local` is left as it is).
    """
    directory = shard_log_dir(cluster, shard)
    remote = await store.scan(directory)
    if not remote:
        return 0
    puts = {}
    for path, result in remote:
        rest = path[len(directory) + 1 :]
        key = rest if rest.startswith("sequence:") else key_prefix + rest
        puts[key] = result.value
    stale = [key for key in _local_records(local, shard, key_prefix) if key not in puts]
    local.write_many(COORDINATOR_DB, puts, stale)
    local.sync()
    return len(puts)


def upload(log_: ShardLog, local: LocalStore, shard: int, key_prefix: str) -> None:
    """Queue every record of the shard in `local` for the log (a first flush)."""
    log_.written(_local_records(local, shard, key_prefix), [])
