"""The transaction coordinator: a durable state machine per transaction, in LMDB.

OPEN -> COMMITTING -> COMMITTED, OPEN -> ABORTING -> ABORTED, OPEN -> TIMEOUT -> ABORTED
(the table of txnbuffer/txn_state.py, checked at every move).
A decision (COMMITTING, ABORTING, TIMEOUT) is fsynced before any marker is
written; after a restart every decided transaction is driven to its end again,
so a decided transaction never changes its mind. The low watermark is the
highest sequence at or below which every transaction of this coordinator has
ended; markers carry it so topics can abort zombies and refuse late appends.
A transaction belongs to its owner, a plain string the broker gives when it opens
one ("" for anonymous), recorded with it: ending it, adding a topic or an ack to
it, or reading it on behalf of another (`caller`, None to skip the check) is
refused with TransactionNotOwnedError and changes nothing. Names are looked up per
owner: two owners may each have a transaction of the same name.
Open transactions are bounded (TransactionLimits): in all, and per client (whom the
broker counts against: the owner, or the connection when everyone is anonymous);
past either a new transaction is refused and nothing is written. The messages one
transaction acknowledges are bounded too (`max_acks_per_txn`: past it an ack is
refused with TransactionTooLargeError). Ended transactions are bounded too:
each is remembered (in memory and in the log) for `ended_retention_s` after its
end and among the latest `max_ended` ends, then forgotten, name and records with
it; a look-up of a forgotten id answers TransactionNotFound.

The log: one record per transaction (`txn:SEQUENCE`, its state, topics, name, owner) and
one per transactional ack (`ack:SEQUENCE:INDEX`), so an ack appends a small record
instead of rewriting all the earlier ones. Records of an older layout, with the
acks inside the transaction's record, are read and rewritten in this one at
recovery.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sortedcontainers import SortedSet

from managed_ledger import LocalStore, TxnId
from txnbuffer.ended_txns import EndedTransactions
from txnbuffer.errors import (
    CoordinatorFencedError,
    TooManyTransactionsError,
    TransactionEndedError,
    TransactionNotFoundError,
    TransactionNotOwnedError,
    TransactionTooLargeError,
)
from txnbuffer.failpoint import TXN_DECIDED, TXN_END_TOPIC, Failpoint, reach
from txnbuffer.txn_state import TxnState, check_txn_transition

log = logging.getLogger(__name__)

COORDINATOR_DB = b"coordinator"
# Sequences are reserved durably in blocks, so a restart never reuses one.
SEQUENCE_BLOCK = 1000
# Ended transactions stay queryable (and a repeated end answers as before) this long
# after their end, and at most this many of the latest ends.
ENDED_RETENTION_S = 3600.0
MAX_ENDED = 100_000
# Records of forgotten transactions are deleted with the next write of the log, or
# on their own once this many wait: a few LMDB write transactions, not one each.
DELETE_BATCH = 512
MAX_NAME_LENGTH = 256
MAX_TIMEOUT_MS = 24 * 3600 * 1000
# Messages one transaction may acknowledge: its acks are kept in memory until it ends.
MAX_ACKS_PER_TXN = 100_000


@dataclass(frozen=True, slots=True)
class TransactionLimits:
    # Transactions not yet ended (open, or decided and still ending).
    max_open: int = 100_000
    max_open_per_owner: int = 10_000
    # Ended transactions remembered: for this long after their end, and at most this many.
    ended_retention_s: float = ENDED_RETENTION_S
    max_ended: int = MAX_ENDED
    # Message ids acknowledged in one transaction, over all its acks.
    max_acks_per_txn: int = MAX_ACKS_PER_TXN

    def __post_init__(self) -> None:
        if min(self.max_open, self.max_open_per_owner, self.max_ended, self.max_acks_per_txn) < 1:
            raise ValueError("transaction limits must be >= 1")
        if not self.ended_retention_s > 0:
            raise ValueError("the retention of ended transactions must be > 0 s")


@dataclass(slots=True)
class TxnAck:
    topic: str
    subscription: str
    message_ids: list[tuple[int, int, int]]

    def to_json(self) -> bytes:
        return json.dumps(
            [self.topic, self.subscription, self.message_ids], separators=(",", ":")
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TxnAck:
        return cls.from_list(json.loads(raw))

    @classmethod
    def from_list(cls, data: list) -> TxnAck:
        topic, subscription, ids = data
        return cls(topic, subscription, [tuple(i) for i in ids])


@dataclass(slots=True)
class TxnMetadata:
    txn_id: TxnId
    state: TxnState
    timeout_ms: int
    opened_ms: int
    topics: list[str] = field(default_factory=list)
    acks: list[TxnAck] = field(default_factory=list)
    ended_ms: int = 0
    name: str = ""  # see named_transaction()
    owner: str = ""  # who opened it ("" anonymous); only the owner may use it
    acked_ids: int = 0  # message ids over all acks (max_acks_per_txn); not stored, summed

    def to_json(self) -> bytes:
        """The transaction's record; its acks are records of their own (ack_key)."""
        return json.dumps(
            {
                "state": self.state.value,
                "timeout_ms": self.timeout_ms,
                "opened_ms": self.opened_ms,
                "topics": self.topics,
                "ended_ms": self.ended_ms,
                "name": self.name,
                "owner": self.owner,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, txn_id: TxnId, raw: bytes) -> TxnMetadata:
        """A record of either layout: an older one still holds its acks ("acks")."""
        data = json.loads(raw)
        acks = [TxnAck.from_list(ack) for ack in data.get("acks", ())]
        return cls(
            txn_id,
            TxnState(data["state"]),
            data["timeout_ms"],
            data["opened_ms"],
            data["topics"],
            acks,
            data["ended_ms"],
            data.get("name", ""),
            # Records written before owners were kept: anonymous.
            data.get("owner", ""),
            sum(len(ack.message_ids) for ack in acks),
        )

    def describe(self) -> dict:
        """The transactionMetadata document (Pulsar's field names where they exist)."""
        return {
            "txnId": str(self.txn_id),
            "status": self.state.value,
            "openTimestamp": self.opened_ms,
            "timeoutAt": self.opened_ms + self.timeout_ms,
            "ageMs": int(time.time() * 1000) - self.opened_ms,
            "producedPartitions": list(self.topics),
            "ackedPartitions": {
                f"{a.topic}#{a.subscription}": len(a.message_ids) for a in self.acks
            },
            "endedTimestamp": self.ended_ms or None,
            "name": self.name or None,
            "owner": self.owner or None,
        }


class TransactionParticipant(Protocol):
    """What the coordinator asks of the broker to end a transaction everywhere."""

    async def end_on_topic(
        self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None: ...

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None: ...


TXN_PREFIX = "txn:"
ACK_PREFIX = "ack:"


class CoordinatorLog(Protocol):
    """Where a coordinator's writes go besides its own store: in a cluster, the copy a
    successor recovers the shard from (the broker's txn/shard_log.py)."""

    def written(self, puts: dict[str, bytes], deletes: list[str]) -> None:
        """The records just written to (and deleted from) the coordinator's store."""
        ...

    async def flushed(self) -> None:
        """Return once every record written so far is where a successor finds it;
        CoordinatorFencedError when another broker has taken the shard."""
        ...


class LocalLog:
    """A coordinator whose store is its only log (one broker, or the embedded store)."""

    def written(self, puts: dict[str, bytes], deletes: list[str]) -> None:
        pass

    async def flushed(self) -> None:
        pass


def txn_key(sequence: int, prefix: str = "") -> str:
    return f"{prefix}{TXN_PREFIX}{sequence:020d}"


def ack_key(sequence: int, index: int, prefix: str = "") -> str:
    """The record of a transaction's index-th ack; a transaction's acks sort together."""
    return f"{prefix}{ACK_PREFIX}{sequence:020d}:{index:08d}"


def _ack_sequence(key: str, prefix: str = "") -> int:
    start = len(prefix) + len(ACK_PREFIX)
    return int(key[start : start + 20])


class TransactionCoordinator:
    def __init__(
        self,
        coordinator_id: int,
        store: LocalStore,
        participant: TransactionParticipant,
        limits: TransactionLimits | None = None,
        clock: Callable[[], float] = time.time,
        key_prefix: str = "",
        log: CoordinatorLog | None = None,
    ):
        """`key_prefix`: what this coordinator's records' keys start with, so several
        coordinators (a cluster's shards) share one store; "" for the first. `log`:
        where its writes go besides the store (LocalLog: nowhere)."""
        assert ":" not in key_prefix, key_prefix
        self.coordinator_id = coordinator_id
        self._prefix = key_prefix
        self.limits = limits or TransactionLimits()
        self.store = store
        self.log: CoordinatorLog = log or LocalLog()
        self.participant = participant
        self._clock = clock  # wall-clock seconds: stamps and retention (tests move it)
        # Open transactions, and ended ones not yet forgotten (see self._ended).
        self._txns: dict[int, TxnMetadata] = {}
        self._open: SortedSet = SortedSet()  # sequences not yet ended
        self._ended = EndedTransactions(
            int(self.limits.ended_retention_s * 1000), self.limits.max_ended
        )
        # Keys of forgotten transactions' records, deleted with the next write.
        self._doomed_keys: list[str] = []
        self._next_sequence = 1
        self._reserved_until = 0
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._drivers: dict[int, asyncio.Task] = {}  # running ends; each removes itself
        # (owner, name) -> sequence of its latest transaction, while that one is remembered.
        self._by_name: dict[tuple[str, str], int] = {}
        # Whom each open transaction counts against (max_open_per_owner), and the counts.
        # Recovered open transactions count against their owner (if not anonymous).
        self._client_of: dict[int, str] = {}
        self._open_by_client: dict[str, int] = {}
        self.committed_count = 0
        self.aborted_count = 0
        self.timed_out_count = 0
        self.failpoint: Failpoint | None = None

    # ------------------------------------------------------------ recovery

    async def recover(self) -> None:
        """Load every transaction; re-drive decided ones; re-arm (or fire) timeouts.

        Ended transactions past the retention or the count are forgotten, and records
        of the older layout are rewritten, in one LMDB write transaction.
        """
        reserved = self.store.get(COORDINATOR_DB, f"sequence:{self.coordinator_id}")
        self._reserved_until = int(reserved) if reserved else 0
        self._next_sequence = self._reserved_until + 1
        inline_acks: list[int] = []  # records of the older layout, acks inside
        for key, raw in self.store.scan_prefix(COORDINATOR_DB, self._prefix + TXN_PREFIX):
            sequence = int(key[len(self._prefix) + len(TXN_PREFIX) :])
            meta = TxnMetadata.from_json(TxnId(self.coordinator_id, sequence), raw)
            self._txns[sequence] = meta
            if meta.acks:
                inline_acks.append(sequence)
        for key, raw in self.store.scan_prefix(COORDINATOR_DB, self._prefix + ACK_PREFIX):
            meta = self._txns.get(_ack_sequence(key, self._prefix))
            if meta is None:
                self._doomed_keys.append(key)  # its transaction's record is gone
                continue
            assert key == ack_key(meta.txn_id.least_bits, len(meta.acks), self._prefix), key
            ack = TxnAck.from_json(raw)
            meta.acks.append(ack)
            meta.acked_ids += len(ack.message_ids)
        ended = sorted(
            (meta.ended_ms, sequence)
            for sequence, meta in self._txns.items()
            if meta.state.terminal
        )
        for ended_ms, sequence in ended:
            self._ended.add(sequence, ended_ms)
        for sequence, meta in self._txns.items():
            if meta.name:
                key = (meta.owner, meta.name)
                self._by_name[key] = max(sequence, self._by_name.get(key, 0))
            if not meta.state.terminal:
                self._open.add(sequence)
                if meta.owner:
                    self._count_client(sequence, meta.owner)
        self._forget_expired()
        # The remembered ones of the older layout: their acks move to records of their own.
        migrated: dict[str, bytes] = {}
        for sequence in inline_acks:
            meta = self._txns.get(sequence)
            if meta is not None:
                migrated[txn_key(sequence, self._prefix)] = meta.to_json()
                migrated.update(
                    (ack_key(sequence, index, self._prefix), ack.to_json())
                    for index, ack in enumerate(meta.acks)
                )
        self._write(migrated)
        redriven = 0
        for sequence in list(self._open):
            meta = self._txns[sequence]
            if meta.state.decided:
                self._start_driver(meta)
                redriven += 1
            else:
                self._arm_timeout(meta)
        if redriven:
            log.info(
                "coordinator %d: re-driving %d decided transactions", self.coordinator_id, redriven
            )

    # ------------------------------------------------------------ state

    @property
    def low_watermark(self) -> int:
        """Every sequence at or below this has ended."""
        if self._open:
            return self._open[0] - 1
        return self._next_sequence - 1

    @property
    def last_sequence(self) -> int:
        """Pulsar's coordinator sequence id: every transaction opened has least bits at
        or below it (after a restart it starts past the block the last run reserved)."""
        return self._next_sequence - 1

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _write(self, puts: dict[str, bytes]) -> None:
        """Write records, deleting those of forgotten transactions in the same LMDB
        transaction."""
        self.store.write_many(COORDINATOR_DB, puts, self._doomed_keys)
        self.log.written(puts, self._doomed_keys)
        self._doomed_keys = []

    def _persist(self, meta: TxnMetadata) -> None:
        self._write({txn_key(meta.txn_id.least_bits, self._prefix): meta.to_json()})

    def _forget_expired(self) -> None:
        """Forget the ended transactions past the retention or the count (O(1) each)."""
        for sequence in self._ended.expired(self._now_ms()):
            meta = self._txns.pop(sequence)
            assert meta.state.terminal, meta
            key = (meta.owner, meta.name)
            if meta.name and self._by_name.get(key) == sequence:
                del self._by_name[key]
            self._doomed_keys.append(txn_key(sequence, self._prefix))
            self._doomed_keys.extend(
                ack_key(sequence, i, self._prefix) for i in range(len(meta.acks))
            )
        if len(self._doomed_keys) >= DELETE_BATCH:
            self._write({})

    def _reserve(self) -> int:
        sequence = self._next_sequence
        if sequence > self._reserved_until:
            self._reserved_until = sequence + SEQUENCE_BLOCK - 1
            key, value = f"sequence:{self.coordinator_id}", str(self._reserved_until).encode()
            self.store.put(COORDINATOR_DB, key, value)
            self.store.sync()
            # Before any id of the block is answered (the caller awaits durable()).
            self.log.written({key: value}, [])
        self._next_sequence += 1
        return sequence

    def named_transaction(
        self, name: str, timeout_ms: int, owner: str = "", client: str | None = None
    ) -> TxnMetadata:
        """`owner`'s transaction called `name` while it is open or committed (asking
        again, e.g. a retried or replayed writer, joins it or learns it is done);
        otherwise, never opened or aborted, a new one under that name. Another owner's
        transaction of that name is never returned: names are per owner."""
        if not 0 < len(name) <= MAX_NAME_LENGTH:
            raise ValueError(f"a transaction name has 1 to {MAX_NAME_LENGTH} characters")
        self._forget_expired()
        key = (owner, name)
        sequence = self._by_name.get(key)
        meta = self._txns.get(sequence) if sequence is not None else None
        if meta is not None and (meta.state is TxnState.OPEN or meta.state.commits):
            assert meta.owner == owner, (meta, owner)
            return meta
        txn_id = self.new_transaction(timeout_ms, owner, client)
        meta = self._txns[txn_id.least_bits]
        meta.name = name
        self._by_name[key] = txn_id.least_bits
        self._persist(meta)
        return meta

    def new_transaction(self, timeout_ms: int, owner: str = "", client: str | None = None) -> TxnId:
        """Open a transaction owned by `owner` ("" anonymous), counted against `client`
        (default: the owner; "" counts only against the total limit)."""
        if timeout_ms <= 0:
            raise ValueError(f"transaction timeout must be > 0 ms, got {timeout_ms}")
        if timeout_ms > MAX_TIMEOUT_MS:
            raise ValueError(
                f"transaction timeout must be <= {MAX_TIMEOUT_MS} ms, got {timeout_ms}"
            )
        client = owner if client is None else client
        self._check_limits(client)
        self._forget_expired()
        sequence = self._reserve()
        if client:
            self._count_client(sequence, client)
        meta = TxnMetadata(
            TxnId(self.coordinator_id, sequence),
            TxnState.OPEN,
            timeout_ms,
            self._now_ms(),
            owner=sys.intern(owner),
        )
        self._txns[sequence] = meta
        self._open.add(sequence)
        self._persist(meta)
        self._arm_timeout(meta)
        return meta.txn_id

    def _count_client(self, sequence: int, client: str) -> None:
        self._client_of[sequence] = client
        self._open_by_client[client] = self._open_by_client.get(client, 0) + 1

    def _check_limits(self, client: str) -> None:
        limits = self.limits
        if len(self._open) >= limits.max_open:
            raise TooManyTransactionsError(
                f"coordinator {self.coordinator_id} has {len(self._open)} open transactions, "
                f"the most max_open_transactions allows; end some (or let them time out) "
                "before opening more"
            )
        if client and self._open_by_client.get(client, 0) >= limits.max_open_per_owner:
            raise TooManyTransactionsError(
                f"client {client} has {self._open_by_client[client]} open transactions, the "
                "most max_open_transactions_per_client allows; end some before opening more"
            )

    def open_by(self, client: str) -> int:
        """Transactions counted against `client` that have not ended."""
        return self._open_by_client.get(client, 0)

    def get(self, txn_id: TxnId) -> TxnMetadata:
        self._forget_expired()
        mine = txn_id.most_bits == self.coordinator_id
        meta = self._txns.get(txn_id.least_bits) if mine else None
        if meta is not None:
            return meta
        name = f"transaction {txn_id}"
        if mine and 0 < txn_id.least_bits < self._next_sequence:
            limits = self.limits
            raise TransactionNotFoundError(
                f"{name} is not known to coordinator {self.coordinator_id}: it ended more "
                f"than {limits.ended_retention_s:g} s ago (txn_ended_retention_s) or before "
                f"the latest {limits.max_ended} ended transactions (max_ended_transactions), "
                "and was forgotten, or it was never opened"
            )
        raise TransactionNotFoundError(
            f"{name} is not known to coordinator {self.coordinator_id}: never opened"
        )

    def owned(self, txn_id: TxnId, caller: str | None) -> TxnMetadata:
        """The transaction, if `caller` owns it (None: whoever asks, e.g. a superuser);
        otherwise TransactionNotOwnedError, naming neither the owner nor its state."""
        meta = self.get(txn_id)
        if caller is not None and caller != meta.owner:
            raise TransactionNotOwnedError(
                f"transaction {txn_id} belongs to another role: only the role that opened "
                "it (or a superuser) may end it, send or acknowledge in it, or read it"
            )
        return meta

    def _require_open(self, txn_id: TxnId, caller: str | None = None) -> TxnMetadata:
        meta = self.owned(txn_id, caller)
        if meta.state is not TxnState.OPEN:
            raise TransactionEndedError(
                f"transaction {txn_id} is {meta.state.value}; start a new transaction"
            )
        return meta

    def add_topic(self, txn_id: TxnId, topic: str, caller: str | None = None) -> None:
        """Record that the transaction writes to topic (before the write happens)."""
        meta = self._require_open(txn_id, caller)
        if topic not in meta.topics:
            # Interned: thousands of remembered transactions share a few topic names.
            meta.topics.append(sys.intern(topic))
            self._persist(meta)

    def check_ack(self, txn_id: TxnId, caller: str | None, count: int) -> TxnMetadata:
        """What add_ack refuses, checked without recording anything: the transaction
        is `caller`'s, open, and has room for `count` more acknowledged messages."""
        meta = self._require_open(txn_id, caller)
        limit = self.limits.max_acks_per_txn
        if meta.acked_ids + count > limit:
            raise TransactionTooLargeError(
                f"transaction {txn_id} has acknowledged {meta.acked_ids} messages; {count} "
                f"more would pass the limit of {limit} per transaction (max_acks_per_txn): "
                "commit it and acknowledge the rest in a new transaction"
            )
        return meta

    def add_ack(
        self,
        txn_id: TxnId,
        topic: str,
        subscription: str,
        message_ids: list[tuple[int, int, int]],
        caller: str | None = None,
    ) -> None:
        meta = self.check_ack(txn_id, caller, len(message_ids))
        ack = TxnAck(sys.intern(topic), sys.intern(subscription), list(message_ids))
        # A record of its own: O(1) per ack, however many the transaction has.
        self._write({ack_key(txn_id.least_bits, len(meta.acks), self._prefix): ack.to_json()})
        meta.acks.append(ack)
        meta.acked_ids += len(ack.message_ids)

    async def durable(self) -> None:
        """Return once every change so far is durable (fsynced, and in the log a
        successor recovers from); CoordinatorFencedError when another broker has
        taken the shard. A change is answered only after this."""
        await asyncio.gather(self.store.sync_async(), self.log.flushed())

    def list_open(self) -> list[TxnMetadata]:
        return [self._txns[s] for s in self._open]

    # ------------------------------------------------------------ ending

    async def end(self, txn_id: TxnId, commit: bool, caller: str | None = None) -> TxnState:
        """Commit or abort; returns the final state. Ending an ended transaction is an error,
        and so is ending another owner's (nothing changes)."""
        meta = self.owned(txn_id, caller)
        if meta.state is TxnState.OPEN:
            self._decide(meta, TxnState.COMMITTING if commit else TxnState.ABORTING)
        elif meta.state.commits != commit or meta.state.terminal:
            raise TransactionEndedError(f"transaction {txn_id} is already {meta.state.value}")
        driver = self._drivers.get(meta.txn_id.least_bits)
        if driver is None:  # only once close() cancelled it
            driver = self._start_driver(meta)
        await asyncio.shield(driver)
        return meta.state

    def _decide(self, meta: TxnMetadata, state: TxnState) -> None:
        timer = self._timers.pop(meta.txn_id.least_bits, None)
        if timer is not None:
            timer.cancel()
        self._transition(meta, state)
        self._persist(meta)
        # The driver makes the decision durable before it writes any marker; the
        # fsync runs off the loop and is shared by decisions made meanwhile.
        self._start_driver(meta)

    @staticmethod
    def _transition(meta: TxnMetadata, new: TxnState) -> None:
        """The one place a transaction's state changes; an illegal move raises
        (txnbuffer/txn_state.py)."""
        check_txn_transition(meta.txn_id, meta.state, new)
        meta.state = new

    def _start_driver(self, meta: TxnMetadata) -> asyncio.Task:
        sequence = meta.txn_id.least_bits
        driver = self._drivers.get(sequence)
        if driver is None:
            driver = asyncio.create_task(self._drive(meta), name=f"txn-end:{sequence}")
            self._drivers[sequence] = driver
            driver.add_done_callback(functools.partial(self._driver_done, sequence))
        return driver

    def _driver_done(self, sequence: int, driver: asyncio.Task) -> None:
        if self._drivers.get(sequence) is driver:
            del self._drivers[sequence]
        if not driver.cancelled() and driver.exception() is not None:
            # Fenced: the new leader ends it. Read here, so a re-driven end that
            # nobody awaits is not logged as a lost exception.
            log.info("transaction %d left to the shard's new leader", sequence)

    async def _drive(self, meta: TxnMetadata) -> None:
        commit = meta.state.commits
        delay = 0.05
        while True:
            try:
                await self.durable()
                await reach(self.failpoint, TXN_DECIDED, str(meta.txn_id))
                # Read after the sync: a transaction that ended meanwhile raises it.
                watermark = self.low_watermark
                await asyncio.gather(
                    *[
                        self._end_on_topic(topic, meta.txn_id, commit, watermark)
                        for topic in meta.topics
                    ]
                )
                for ack in meta.acks:
                    await self.participant.end_acks(ack, meta.txn_id, commit)
                break
            except (asyncio.CancelledError, CoordinatorFencedError):
                # Fenced: the shard's new leader ends it from the log it took over.
                raise
            except Exception:
                # A decided transaction must end: retry with backoff until it does.
                log.exception("ending transaction %s failed; retrying", meta.txn_id)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        if meta.state is TxnState.TIMEOUT:
            self.timed_out_count += 1
        self._transition(meta, TxnState.COMMITTED if commit else TxnState.ABORTED)
        meta.ended_ms = self._now_ms()
        sequence = meta.txn_id.least_bits
        self._open.discard(sequence)
        self._forget_client(sequence)
        # Remembered from here, and forgotten once past the retention or the count;
        # the completion and the deletions of forgotten records share one write.
        self._ended.add(sequence, meta.ended_ms)
        self._forget_expired()
        self._persist(meta)
        if commit:
            self.committed_count += 1
        else:
            self.aborted_count += 1

    async def _end_on_topic(
        self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        await reach(self.failpoint, TXN_END_TOPIC, topic)
        await self.participant.end_on_topic(topic, txn_id, commit, low_watermark)

    def _forget_client(self, sequence: int) -> None:
        client = self._client_of.pop(sequence, None)
        if client is not None:
            left = self._open_by_client[client] - 1
            if left:
                self._open_by_client[client] = left
            else:
                del self._open_by_client[client]

    def _arm_timeout(self, meta: TxnMetadata) -> None:
        remaining_ms = meta.opened_ms + meta.timeout_ms - self._now_ms()
        loop = asyncio.get_running_loop()
        self._timers[meta.txn_id.least_bits] = loop.call_later(
            max(remaining_ms, 0) / 1000, self._on_timeout, meta
        )

    def _on_timeout(self, meta: TxnMetadata) -> None:
        self._timers.pop(meta.txn_id.least_bits, None)
        if meta.state is TxnState.OPEN:
            log.info("transaction %s timed out after %d ms; aborting", meta.txn_id, meta.timeout_ms)
            self._decide(meta, TxnState.TIMEOUT)

    def ends_under_way(self) -> list[asyncio.Task]:
        """The ends being driven now, decided and not yet complete (a leader that
        hands its shard over lets them finish first)."""
        return [task for task in self._drivers.values() if not task.done()]

    def stop_timers(self) -> None:
        """No transaction times out here any more (another broker leads the shard)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        drivers = [task for task in self._drivers.values() if not task.done()]
        for task in drivers:
            task.cancel()
        await asyncio.gather(*drivers, return_exceptions=True)

    def stats(self) -> dict:
        return {
            "coordinatorId": self.coordinator_id,
            "lowWaterMark": self.low_watermark,
            "openTxns": len(self._open),
            "maxOpenTxns": self.limits.max_open,
            "maxOpenTxnsPerClient": self.limits.max_open_per_owner,
            "clientsWithOpenTxns": len(self._open_by_client),
            "maxAcksPerTxn": self.limits.max_acks_per_txn,
            "endedTxns": len(self._ended),
            "maxEndedTxns": self.limits.max_ended,
            "endedRetentionS": self.limits.ended_retention_s,
            "committedCount": self.committed_count,
            "abortedCount": self.aborted_count,
            "timedOutCount": self.timed_out_count,
        }
