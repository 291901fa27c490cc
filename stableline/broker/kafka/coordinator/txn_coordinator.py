"""Kafka's transaction coordinator on stableline transactions.

A transactional.id has a producer id and an epoch (transactional_ids.py, in the
cluster's metadata store), and each of its Kafka transactions is one stableline
transaction: opened through the broker's Coordinators at the producer's first
AddPartitionsToTxn (each added partition's topic joined to it before the answer,
so its end reaches them), fed by the producer's transactional batches
(`transaction_for` names it to Produce), and ended by EndTxn with the stableline
coordinator's own end, which writes the commit or abort marker into every topic
added. So SDK READ_COMMITTED subscriptions, Spark and Kafka read_committed
consumers all see a Kafka transaction only once it has committed, and never if it
aborts.

Where it lives: the id's record is in the cluster's metadata store, so whichever
broker FindCoordinator names acts on it (every change a compare-and-set; with the
embedded store, this one broker), and the brokers owning its partitions read it to
admit batches. Its stableline transactions are opened on the coordinator shard the
id hashes to (named_shard: the shard whose leader FindCoordinator names) when this
broker leads it, else on one it leads (Coordinators.open); one led elsewhere is
ended on its leader.

Promises:
- InitProducerId gives the id's producer id (allocated once) with an epoch one
  higher than the last. The transaction the id left open is aborted first (one
  already decided is completed as decided), so an older producer's records never
  become visible, and that producer's later requests are refused as fenced:
  PRODUCER_FENCED (raised here; the API layer answers INVALID_PRODUCER_EPOCH to
  versions older than the error) and INVALID_PRODUCER_EPOCH for its batches.
- A transaction that ended without its producer's EndTxn (its timeout passed, and
  the stableline coordinator aborted it) fences its producer, as Kafka's
  coordinator does by raising the epoch when it times a transaction out.
- A batch is admitted only with the id's current producer id and epoch, into its
  open transaction, for a topic added to it (INVALID_TXN_STATE otherwise).
- EndTxn retried after it completed is answered as the first time; after a crash
  it finds its transaction as the coordinator's log left it (decided ends are
  completed) and answers accordingly.
- A group's offsets are committed in a transaction (offsets_transaction) only by
  the id's current producer, in its open transaction, once AddOffsetsToTxn added
  the group; what was noted for them (note_offset) runs when an EndTxn here
  commits it, and is dropped when it ends otherwise.
- Requests for one id are handled one at a time on this broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, replace

from managed_ledger import TxnId
from stableline.broker.kafka.coordinator.producer_ids import transactional_producer_id
from stableline.broker.kafka.coordinator.transactional_ids import (
    MAX_EPOCH,
    EndResult,
    StoredRecord,
    TransactionalId,
    TransactionalIdRecord,
    TransactionalIds,
)
from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.broker.security.caller import CURRENT_CALLER
from stableline.broker.txn.coordinator_errors import CoordinatorNotLeaderError
from stableline.broker.txn.coordinators import Coordinators, named_shard
from stableline.metadata import BadVersion, MetadataStoreError
from txnbuffer import TransactionEndedError, TransactionNotFoundError, TxnState

log = logging.getLogger(__name__)

# How often idle transactional ids are looked for (Kafka's
# transactional.id.expiration check runs hourly too).
EXPIRY_INTERVAL_S = 3600.0
# Kafka's default transaction.max.timeout.ms: a longer transaction.timeout.ms is
# refused with INVALID_TRANSACTION_TIMEOUT.
MAX_TRANSACTION_TIMEOUT_MS = 900_000


# Transactions whose held group offsets are remembered (note_offset).
MAX_TXNS_WITH_OFFSETS = 10_000


@dataclass(frozen=True, slots=True)
class PartitionOfGroup:
    group_id: str
    topic: str  # the Kafka topic
    partition: int


@dataclass(frozen=True, slots=True)
class HeldOffset:
    offset: int
    on_commit: Callable[[], Awaitable[None]]


def callers_transactional_id(name: str) -> TransactionalId:
    """`name` as the calling connection's role's transactional id ("" with
    authentication off: CURRENT_CALLER is set by the Kafka session, sasl.py)."""
    caller = CURRENT_CALLER.get()
    return TransactionalId("" if caller is None else caller.role, name)


class TxnRefused(Exception):
    """A transactional request refused with a Kafka error code (and why, for the log
    and for Produce's error message)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _KeyedLocks:
    """One asyncio.Lock per key while anyone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class KafkaTransactionCoordinator:
    def __init__(
        self,
        ids: TransactionalIds,
        coordinators: Coordinators,
        max_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS,
    ) -> None:
        self._ids = ids
        self._coordinators = coordinators
        self._max_timeout_ms = max_timeout_ms
        self._locks = _KeyedLocks()
        self._expiring: asyncio.Task | None = None
        # Offsets TxnOffsetCommit held here, by transaction (note_offset).
        self._txn_offsets: OrderedDict[TxnId, dict[PartitionOfGroup, HeldOffset]] = OrderedDict()

    # ------------------------------------------------------------ life

    def start(self) -> None:
        """Forget idle transactional ids every EXPIRY_INTERVAL_S (each broker does:
        the deletes are compare-and-sets, so two at once delete one record once)."""
        self._expiring = asyncio.create_task(self._expire_idle(), name="kafka-txn-id-expiry")

    async def close(self) -> None:
        if self._expiring is not None:
            self._expiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiring
            self._expiring = None

    async def _expire_idle(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL_S)
            try:
                expired = await self._ids.expire(int(time.time() * 1000))
            except MetadataStoreError as error:
                log.warning("kafka: idle transactional ids not expired now: %s", error)
                continue
            if expired:
                log.info("kafka: forgot %d transactional ids idle for 7 days", expired)

    # ------------------------------------------------------------ InitProducerId

    async def init_producer_id(
        self,
        tid: TransactionalId,
        timeout_ms: int,
        producer_id: int = -1,
        epoch: int = -1,
    ) -> tuple[int, int]:
        """(producer id, epoch) for a new producer of `tid`, or for its
        producer (`producer_id`, `epoch`) raising its own epoch after an error
        (KIP-360): refused as fenced if that is not the current producer, answered
        as before if it is a retry of a raise that succeeded."""
        if not tid.name:
            raise TxnRefused(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise TxnRefused(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is not in 1..{self._max_timeout_ms}",
            )
        async with self._locks.hold(tid):
            stored = await self._ids.read(tid, fresh=True)
            if stored is None:
                stored = await self._ids.create(tid, timeout_ms)
            record = stored.record
            if producer_id >= 0 and record.epoch >= 0:
                retry = record.last_epoch >= 0 and epoch == record.last_epoch
                if retry and producer_id == record.producer_id:
                    return record.producer_id, record.epoch  # a retry: answered again
                if (producer_id, epoch) != (record.producer_id, record.epoch):
                    raise TxnRefused(
                        ErrorCode.PRODUCER_FENCED,
                        f"producer {producer_id} epoch {epoch} of {tid} is "
                        f"fenced: the current one is {record.producer_id} epoch {record.epoch}",
                    )
            if record.txn_id is not None:
                state = await self._finish(record.txn_id, commit=False)
                log.info(
                    "kafka: transactional id %s initialised again: its transaction %s is %s",
                    tid,
                    record.txn_id,
                    "forgotten" if state is None else state.value,
                )
            # Raised by the producer itself: its retry will name the epoch it had.
            last_epoch = record.epoch if producer_id >= 0 else -1
            producer_id, epoch = record.producer_id, record.epoch + 1
            if producer_id < 0:
                producer_id = transactional_producer_id(stored.created_revision)
            elif epoch > MAX_EPOCH:
                # Epochs are int16: a new producer id, from this record's last write.
                producer_id, epoch = transactional_producer_id(stored.modified_revision), 0
                last_epoch = -1
            new = TransactionalIdRecord(producer_id, epoch, timeout_ms, last_epoch=last_epoch)
            await self._write(tid, stored, new)
            return producer_id, epoch

    # ------------------------------------------------------------ AddPartitionsToTxn

    async def add_topics(
        self, tid: TransactionalId, producer_id: int, epoch: int, topics: list[str], client: str
    ) -> None:
        """Join `topics` (stableline topic names) to the id's transaction, opening it
        if none is open (AddPartitionsToTxn)."""
        await self._join(tid, producer_id, epoch, client, topics=topics)

    async def add_group(
        self, tid: TransactionalId, producer_id: int, epoch: int, group_id: str, client: str
    ) -> None:
        """Let the id's transaction commit `group_id`'s offsets (TxnOffsetCommit),
        opening it if none is open (AddOffsetsToTxn)."""
        await self._join(tid, producer_id, epoch, client, groups=[group_id])

    async def _join(
        self,
        tid: TransactionalId,
        producer_id: int,
        epoch: int,
        client: str,
        topics: Sequence[str] = (),
        groups: Sequence[str] = (),
    ) -> None:
        async with self._locks.hold(tid):
            stored = await self._current(tid, producer_id, epoch)
            record = stored.record
            txn_id = record.txn_id
            opened = txn_id is None
            if txn_id is None:
                txn_id = await self._open(tid, record.timeout_ms, client)
            added = tuple(topic for topic in dict.fromkeys(topics) if topic not in record.topics)
            new_groups = tuple(g for g in dict.fromkeys(groups) if g not in record.groups)
            try:
                for topic in added:
                    await self._coordinators.add_topic(txn_id, topic, None)
                if not added and not opened and not await self._is_open(txn_id):
                    raise TransactionEndedError(f"transaction {txn_id} has ended")
            except (TransactionEndedError, TransactionNotFoundError):
                # Ended without an EndTxn (or so long ago its coordinator forgot it).
                assert not opened, "a transaction just opened ended at once"
                await self._fence_timed_out(tid, stored)
            if not added and not new_groups and not opened:
                return  # Kafka's shortcut: all of it is in the transaction already
            updated = replace(
                record,
                txn_id=txn_id,
                topics=record.topics + added,
                groups=record.groups + new_groups,
                last_end=None,
            )
            try:
                await self._write(tid, stored, updated)
            except TxnRefused:
                if opened:  # nobody else knows of it: no reason to let it time out
                    with contextlib.suppress(Exception):
                        await self._finish(txn_id, commit=False)
                raise

    # ------------------------------------------------------------ TxnOffsetCommit

    async def offsets_transaction(
        self, tid: TransactionalId, producer_id: int, epoch: int, group_id: str
    ) -> TxnId:
        """The transaction a TxnOffsetCommit of `group_id` from (producer id, epoch)
        holds its acknowledgements in: the id's open one, to which AddOffsetsToTxn
        added the group. TxnRefused otherwise (read from the store: the group's
        coordinator may be another broker than the id's)."""
        record = self._producers_record(
            tid, await self._ids.read(tid, fresh=True), producer_id, epoch
        )
        if record.txn_id is None or group_id not in record.groups:
            raise TxnRefused(
                ErrorCode.INVALID_TXN_STATE,
                f"group {group_id!r} was not added to a transaction of {tid} "
                "(AddOffsetsToTxn comes first)",
            )
        return record.txn_id

    def offset_held(self, txn_id: TxnId, partition: PartitionOfGroup) -> int | None:
        """The offset this broker last held for `partition` in the transaction."""
        held = self._txn_offsets.get(txn_id, {}).get(partition)
        return None if held is None else held.offset

    def note_offset(
        self,
        txn_id: TxnId,
        partition: PartitionOfGroup,
        offset: int,
        on_commit: Callable[[], Awaitable[None]],
    ) -> None:
        """`offset` is held for `partition` in the transaction; `on_commit` runs here
        once an EndTxn on this broker commits it (at most MAX_TXNS_WITH_OFFSETS
        transactions are remembered, the oldest forgotten first: only what
        `on_commit` would have noted is lost, never an acknowledgement)."""
        held = self._txn_offsets.setdefault(txn_id, {})
        self._txn_offsets.move_to_end(txn_id)
        held[partition] = HeldOffset(offset, on_commit)
        while len(self._txn_offsets) > MAX_TXNS_WITH_OFFSETS:
            self._txn_offsets.popitem(last=False)

    # ------------------------------------------------------------ EndTxn

    async def end(self, tid: TransactionalId, producer_id: int, epoch: int, commit: bool) -> None:
        """Commit or abort the id's transaction: returns once its markers are written
        into every topic added to it."""
        wanted = EndResult.COMMIT if commit else EndResult.ABORT
        async with self._locks.hold(tid):
            stored = await self._current(tid, producer_id, epoch)
            record = stored.record
            if record.txn_id is None:
                if record.last_end == wanted:
                    return  # a retry of the end that completed
                raise TxnRefused(
                    ErrorCode.INVALID_TXN_STATE,
                    f"transactional id {tid} has no transaction open to {wanted}",
                )
            state = await self._finish(record.txn_id, commit)
            if state is TxnState.COMMITTED and not commit:
                # Committed by an end whose answer was lost (a crash before the record
                # said so); Kafka refuses an abort after a commit.
                await self._write(tid, stored, record.ended(EndResult.COMMIT))
                raise TxnRefused(
                    ErrorCode.INVALID_TXN_STATE,
                    f"transaction {record.txn_id} of {tid} committed already",
                )
            if state is None or state.commits != commit:
                await self._fence_timed_out(tid, stored)
            await self._write(tid, stored, record.ended(wanted))

    # ------------------------------------------------------------ Produce

    async def transaction_for(
        self, tid: TransactionalId, producer_id: int, epoch: int, topic: str, fresh: bool = False
    ) -> TxnId:
        """The stableline transaction a transactional batch of (producer id, epoch)
        for `topic` belongs to; TxnRefused with the Produce error otherwise. Read
        from the cache first, then (on a disagreement, or with `fresh`) the store."""
        stored = await self._ids.read(tid, fresh)
        try:
            return self._admitted(tid, stored, producer_id, epoch, topic)
        except TxnRefused:
            if fresh:
                raise
        return await self.transaction_for(tid, producer_id, epoch, topic, True)

    @staticmethod
    def _producers_record(
        tid: TransactionalId, stored: StoredRecord | None, producer_id: int, epoch: int
    ) -> TransactionalIdRecord:
        """The id's record, when (producer id, epoch) is its current producer."""
        if stored is None or stored.record.producer_id != producer_id:
            raise TxnRefused(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not that of transactional id {tid}",
            )
        record = stored.record
        if epoch != record.epoch:
            raise TxnRefused(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer epoch {epoch} of {tid} is fenced: the current epoch is {record.epoch}",
            )
        return record

    @classmethod
    def _admitted(
        cls,
        tid: TransactionalId,
        stored: StoredRecord | None,
        producer_id: int,
        epoch: int,
        topic: str,
    ) -> TxnId:
        record = cls._producers_record(tid, stored, producer_id, epoch)
        if record.txn_id is None or topic not in record.topics:
            raise TxnRefused(
                ErrorCode.INVALID_TXN_STATE,
                f"{topic} was not added to a transaction of {tid} (AddPartitionsToTxn comes first)",
            )
        return record.txn_id

    def ended_refusal(self, tid: TransactionalId, txn_id: TxnId) -> TxnRefused:
        """What a batch for an ended transaction the record still names is told."""
        return TxnRefused(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"transaction {txn_id} of {tid} has ended without the "
            "producer's EndTxn (its transaction.timeout.ms passed): the producer is fenced",
        )

    # ------------------------------------------------------------ helpers

    async def _current(self, tid: TransactionalId, producer_id: int, epoch: int) -> StoredRecord:
        """The id's record, read from the store, if (producer id, epoch) is its producer."""
        stored = await self._ids.read(tid, fresh=True)
        if stored is None or stored.record.producer_id != producer_id:
            raise TxnRefused(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not that of transactional id {tid} "
                "(InitProducerId comes first)",
            )
        if stored.record.epoch != epoch:
            raise TxnRefused(
                ErrorCode.PRODUCER_FENCED,
                f"producer epoch {epoch} of {tid} is fenced: a producer "
                f"initialised it again (epoch {stored.record.epoch})",
            )
        return stored

    async def _write(
        self, tid: TransactionalId, stored: StoredRecord, record: TransactionalIdRecord
    ) -> StoredRecord:
        try:
            return await self._ids.write(tid, stored, record)
        except BadVersion:
            # Another broker acted on the id meanwhile; the client retries and we re-read.
            raise TxnRefused(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"transactional id {tid} changed meanwhile; retry",
            ) from None

    async def _fence_timed_out(self, tid: TransactionalId, stored: StoredRecord) -> None:
        """The id's transaction ended without an EndTxn: raise its epoch (as Kafka's
        coordinator does at a timeout) and refuse the request as fenced."""
        record = stored.record
        if record.txn_id is not None:
            self._txn_offsets.pop(record.txn_id, None)
        await self._write(
            tid,
            stored,
            TransactionalIdRecord(record.producer_id, record.epoch + 1, record.timeout_ms),
        )
        raise TxnRefused(
            ErrorCode.PRODUCER_FENCED,
            f"transaction {record.txn_id} of {tid} ended without the "
            f"producer's EndTxn (its transaction.timeout.ms of {record.timeout_ms} ms "
            "passed): the producer is fenced",
        )

    async def _open(self, tid: TransactionalId, timeout_ms: int, client: str) -> TxnId:
        """A new stableline transaction for the id: on the coordinator shard the id
        hashes to (named_shard, the shard whose leader FindCoordinator names) when
        this broker leads it, so an id's transactions live on one shard; else on one
        this broker leads, or can take (Coordinators.open)."""
        coordinators = self._coordinators
        shard = named_shard(tid.owner, tid.name, coordinators.shard_count)
        if shard in coordinators.local:
            opened = await coordinators.open_on_shard(shard, timeout_ms, "", tid.owner, client)
        else:
            opened = await coordinators.open(timeout_ms, "", tid.owner, client)
        return opened.txn_id

    async def _is_open(self, txn_id: TxnId) -> bool:
        try:
            state, _ = await self._coordinators.state_of(txn_id)
        except TransactionNotFoundError:
            return False
        return state is TxnState.OPEN

    async def _finish(self, txn_id: TxnId, commit: bool) -> TxnState | None:
        """End the transaction as asked if it is open, or complete the end decided
        for it: its final state, None if its coordinator has forgotten it. What
        was noted for its committed offsets runs if it committed."""
        state = await self._end_anywhere(txn_id, commit)
        held = self._txn_offsets.pop(txn_id, {})
        if state is TxnState.COMMITTED and held:
            outcomes = await asyncio.gather(
                *(each.on_commit() for each in held.values()), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, Exception):
                    # Committed all the same: OffsetFetch answers the acknowledgement.
                    log.warning("kafka: a committed offset of %s not noted: %s", txn_id, outcome)
        return state

    async def _end_anywhere(self, txn_id: TxnId, commit: bool) -> TxnState | None:
        try:
            coordinator = await self._coordinators.deciding(txn_id)
        except CoordinatorNotLeaderError as error:
            return await self._finish_on(error.leader_address, txn_id, commit)
        except TransactionNotFoundError:
            return None
        try:
            meta = coordinator.get(txn_id)
        except TransactionNotFoundError:
            return None
        if meta.state.terminal:
            return meta.state
        # Decided already (a timeout, an end before a crash): that end is completed.
        return await coordinator.end(
            txn_id, commit if meta.state is TxnState.OPEN else meta.state.commits
        )

    async def _finish_on(self, address: str, txn_id: TxnId, commit: bool) -> TxnState | None:
        """_finish for a transaction whose shard the broker at `address` leads: asked
        of it as a client would, with this broker's own credentials."""
        peers = self._coordinators.leaders.peers  # a shard led elsewhere: a cluster
        try:
            state, _ = await self._coordinators.state_of(txn_id)
        except TransactionNotFoundError:
            return None
        if state.terminal:
            return state
        try:
            return await peers.end_transaction(
                address, txn_id, commit if state is TxnState.OPEN else state.commits
            )
        except TransactionEndedError:
            # It ended meanwhile (its timeout): as it ended.
            state, _ = await self._coordinators.state_of(txn_id)
            return state
