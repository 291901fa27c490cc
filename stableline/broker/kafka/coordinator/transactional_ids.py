"""Kafka transactional ids as the cluster's metadata store keeps them.

One record per transactional.id of a role (TransactionalId; the path is
layout.kafka_transactional_id_path): its producer
id, its epoch, the transaction timeout it was initialised with, the stableline
transaction it has open (if any) with the topics added to it, and how its last
transaction ended. The store is the broker's cluster metadata store: the embedded
one in the data dir for a lone broker, etcd for a cluster, so a record survives
restarts and every broker reads the same one.

Promises:
- A record changes only by compare-and-set on the version it was read at
  (`write`): of two writers acting on one id at once, one wins and the other gets
  BadVersion, having changed nothing.
- A transactional id's producer id is allocated once, when its record is first
  initialised: 2**61 + the store revision of its creation (producer_ids.py),
  unique in the store. It changes only if the epoch would pass MAX_EPOCH.
- A record no producer has changed for EXPIRATION_MS is deleted by `expire` (as
  Kafka expires an idle transactional.id), so records are bounded by the ids in use.
- Reads come from a cache of at most MAX_CACHED records, kept current by every
  write made through this object; `read(fresh=True)` asks the store (what a
  broker does when the cached record disagrees with a request, since another
  broker may have written it).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from managed_ledger import TxnId
from stableline.metadata import AlreadyExists, BadVersion, ClusterMetadataStore, NotFound
from stableline.metadata.layout import (
    kafka_transactional_id_of,
    kafka_transactional_id_path,
    kafka_transactional_ids_dir,
)

MAX_CACHED = 10_000
# An id no producer has initialised or used for this long is forgotten (its next
# producer gets a new producer id), as Kafka's transactional.id.expiration.ms.
EXPIRATION_MS = 7 * 24 * 3600 * 1000
# Kafka's epochs are int16; past this a producer id is replaced (Kafka does the same).
MAX_EPOCH = 32_766


@dataclass(frozen=True, slots=True)
class TransactionalId:
    """A Kafka transactional.id and the role that uses it ("" with authentication
    off): ids are per role, as stableline's transaction names are, so one role can
    neither fence another's producers nor end its transactions."""

    owner: str
    name: str

    def __str__(self) -> str:
        return repr(self.name) if not self.owner else f"{self.name!r} of role {self.owner!r}"


class EndResult:
    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class TransactionalIdRecord:
    # -1 until the first InitProducerId has completed.
    producer_id: int
    epoch: int
    timeout_ms: int
    # The stableline transaction the producer has open, and the topics and consumer
    # groups (AddOffsetsToTxn) added to it.
    txn_id: TxnId | None = None
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    # How the last transaction ended by the producer's EndTxn ("commit" / "abort"),
    # so a retried EndTxn is answered as the first was; None after an init.
    last_end: str | None = None
    # When the producer last changed it (ms since the epoch): an id idle for
    # EXPIRATION_MS is forgotten.
    updated_ms: int = 0
    # The epoch before the last one, when the producer raised it itself (KIP-360),
    # so that request retried gets the same answer; -1 otherwise.
    last_epoch: int = -1

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "producerId": self.producer_id,
                "epoch": self.epoch,
                "timeoutMs": self.timeout_ms,
                "txn": None if self.txn_id is None else str(self.txn_id),
                "topics": list(self.topics),
                "groups": list(self.groups),
                "lastEnd": self.last_end,
                "updatedMs": self.updated_ms,
                "lastEpoch": self.last_epoch,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TransactionalIdRecord:
        data = json.loads(raw)
        txn = data["txn"]
        txn_id = None
        if txn is not None:
            most, least = txn.split(":")
            txn_id = TxnId(int(most), int(least))
        return cls(
            data["producerId"],
            data["epoch"],
            data["timeoutMs"],
            txn_id,
            tuple(data["topics"]),
            tuple(data["groups"]),
            data["lastEnd"],
            data["updatedMs"],
            data["lastEpoch"],
        )

    def ended(self, result: str) -> TransactionalIdRecord:
        """This record once its transaction ended by the producer's EndTxn."""
        return replace(self, txn_id=None, topics=(), groups=(), last_end=result)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as read: with the version a compare-and-set names, and the store
    revision of its creation (what its producer id is made from)."""

    record: TransactionalIdRecord
    version: int
    created_revision: int
    modified_revision: int


class TransactionalIds:
    """The records of one cluster's transactional ids, read through a cache."""

    def __init__(
        self, store: ClusterMetadataStore, cluster: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._cluster = cluster
        self._clock = clock  # stamps each write (updated_ms)
        self._cache: OrderedDict[TransactionalId, StoredRecord] = OrderedDict()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _path(self, tid: TransactionalId) -> str:
        return kafka_transactional_id_path(self._cluster, tid.owner, tid.name)

    async def read(self, tid: TransactionalId, fresh: bool = False) -> StoredRecord | None:
        """The id's record (None if it was never initialised)."""
        if not fresh:
            cached = self._cache.get(tid)
            if cached is not None:
                self._cache.move_to_end(tid)
                return cached
        found = await self._store.get(self._path(tid))
        if found is None:
            self._cache.pop(tid, None)
            return None
        stored = StoredRecord(
            TransactionalIdRecord.from_json(found.value),
            found.stat.version,
            found.stat.created_revision,
            found.stat.modified_revision,
        )
        self._remember(tid, stored)
        return stored

    async def create(self, tid: TransactionalId, timeout_ms: int) -> StoredRecord:
        """The id's record, made (not yet initialised: epoch -1) if there is none."""
        record = TransactionalIdRecord(-1, -1, timeout_ms, updated_ms=self._now_ms())
        while True:
            try:
                stat = await self._store.put(self._path(tid), record.to_json(), expected_version=-1)
                break
            except AlreadyExists:
                found = await self.read(tid, fresh=True)
                if found is not None:
                    return found
                # Expired by another broker between the two: create it after all.
        stored = StoredRecord(record, stat.version, stat.created_revision, stat.modified_revision)
        self._remember(tid, stored)
        return stored

    async def write(
        self, tid: TransactionalId, read: StoredRecord, record: TransactionalIdRecord
    ) -> StoredRecord:
        """Replace the record read as `read` by `record`; BadVersion (and the cached
        copy forgotten) if it changed since. The record is stamped with the time."""
        record = replace(record, updated_ms=self._now_ms())
        try:
            stat = await self._store.put(
                self._path(tid), record.to_json(), expected_version=read.version
            )
        except BadVersion:
            self._cache.pop(tid, None)
            raise
        stored = StoredRecord(record, stat.version, stat.created_revision, stat.modified_revision)
        self._remember(tid, stored)
        return stored

    async def expire(self, now_ms: int, expiration_ms: int = EXPIRATION_MS) -> int:
        """Delete the records last changed more than `expiration_ms` before `now_ms`
        (a record changed meanwhile is kept); how many were deleted. A transaction
        outlives no such wait (its timeout is at most minutes), so none is open."""
        deleted = 0
        for path, found in await self._store.scan(kafka_transactional_ids_dir(self._cluster)):
            record = TransactionalIdRecord.from_json(found.value)
            if record.updated_ms + expiration_ms > now_ms:
                continue
            try:
                await self._store.delete(path, expected_version=found.stat.version)
            except (BadVersion, NotFound):
                continue  # used again, or deleted by another broker, meanwhile
            self._cache.pop(TransactionalId(*kafka_transactional_id_of(path)), None)
            deleted += 1
        return deleted

    def _remember(self, tid: TransactionalId, stored: StoredRecord) -> None:
        cached = self._cache.get(tid)
        if cached is not None and cached.modified_revision > stored.modified_revision:
            return  # a read that began before a write here ended after it
        self._cache[tid] = stored
        self._cache.move_to_end(tid)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)
