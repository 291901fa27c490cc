"""The transaction coordinators as the rest of the broker sees them: one object that
opens, joins, reads and ends transactions wherever their shard is led.

This broker runs a TransactionCoordinator for each shard it leads (all of them with
the embedded store; txn/coordinator_shards.py says which in a cluster), each keeping its
log in this broker's metadata store under a key prefix of its own. A call for a
transaction of a shard led by another broker goes to that broker (peers.py) with the
client's role, and is checked there as if the client had called.

Promises:
- One path in for each operation, local or remote: `add_topic`, `check_ack`,
  `add_ack`, `state_of` raise the coordinator's own errors (TransactionEndedError,
  TransactionNotFoundError, TransactionNotOwnedError, TooManyTransactionsError,
  TransactionTooLargeError) whichever broker refused.
- `open` uses a shard this broker leads (round robin); leading none, it takes a
  shard nobody leads yet, and only when every shard is led elsewhere does it ask a
  live leader to open the transaction. A named transaction always lives on the shard
  its (owner, name) hashes to, so asking again through any broker finds it.
- A transaction is ended, and read by its client, only on its shard's leader: any
  other broker answers NotOwner naming the leader (CoordinatorUnavailable when the
  leader is down).
- A topic joined to a remote transaction is remembered here (at most
  MAX_REMEMBERED_JOINS, oldest forgotten first), so a producer's later batches in it
  cost no call; its end still reaches the topic, which refuses anything after it.
- A stopping broker hands its shards over (`hand_over`, within a time budget): from
  its start no new call is taken for them (each waits for the hand-over, then is
  sent to the new leader, or served here should no other broker be live), ends
  under way finish and their answers go out, the log holds every change, and one
  CAS names another live broker, which takes the shard at once (`_record_changed`).
  Whatever is left past the budget the new leader re-drives from the log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from managed_ledger import LocalStore, TxnId
from stableline.broker.errors import BrokerError
from stableline.broker.topics.write_gate import WriteGate
from stableline.broker.txn.coordinator_errors import (
    CoordinatorLeavingError,
    CoordinatorNotLeaderError,
    CoordinatorUnavailableError,
)
from stableline.broker.txn.remote_acks import HeldRemoteAcks, NoRemoteAcks
from stableline.broker.txn.shard_leaders import EveryShardHere, ShardLeaders
from stableline.broker.txn.shard_log import shard_key_prefix
from stableline.metadata import BrokerInfo, MetadataStoreError
from txnbuffer import (
    CoordinatorFencedError,
    TransactionCoordinator,
    TransactionLimits,
    TransactionNotFoundError,
    TransactionParticipant,
    TxnAck,
    TxnMetadata,
    TxnState,
)
from txnbuffer.failpoint import Failpoint

log = logging.getLogger(__name__)

MAX_REMEMBERED_JOINS = 100_000
# How long a call for a transaction of a shard led elsewhere looks for its leader:
# past a session timeout (4 s by default), so a killed leader's shard is taken over.
LEADER_RETRY_S = 6.0
# A shard leader's refusals that another look-up may answer.
_LEADER_MOVING = frozenset({"BrokerUnavailable", "NotOwner", "CoordinatorUnavailable"})

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OpenedTransaction:
    txn_id: TxnId
    state: TxnState
    # The gRPC address of the shard's leader; "" when it is this broker.
    coordinator_address: str


def named_shard(owner: str, name: str, count: int) -> int:
    """The shard of a named transaction: the same wherever it is asked for."""
    return zlib.crc32(f"{owner}\0{name}".encode()) % count


class Coordinators:
    def __init__(
        self,
        store: LocalStore,
        participant: TransactionParticipant,
        limits: TransactionLimits,
        leaders: ShardLeaders | None = None,
        write_gate: WriteGate | None = None,
        failpoint: Failpoint | None = None,
        on_started: Callable[[TransactionCoordinator], None] | None = None,
        remote_acks: HeldRemoteAcks | None = None,
    ):
        """`leaders`: which broker leads each shard (txn/shard_leaders.py); by default
        this one leads the only shard. `remote_acks`: in a cluster, what subscriptions
        here hold for transactions of shards led elsewhere."""
        self.store = store
        self.participant = participant
        self.limits = limits
        self.leaders: ShardLeaders = leaders or EveryShardHere()
        self.shard_count = self.leaders.count
        self.local: dict[int, TransactionCoordinator] = {}
        self.failpoint = failpoint
        # Set once the shards this broker leads have recovered (start()).
        self.ready = asyncio.Event()
        self.remote_acks: HeldRemoteAcks = remote_acks or NoRemoteAcks()
        self.broker_id = ""
        # Whether this broker may write (the registry's gate: topics/write_gate.py); new
        # transactions, joins and ends are refused while it is fenced.
        self.write_gate = write_gate or WriteGate()
        # Run for each coordinator once it has recovered (the broker restores held acks).
        self.on_started = on_started
        self._round_robin = itertools.count()
        self._starting: dict[int, asyncio.Task] = {}
        self._taking = asyncio.Lock()
        # Background work: following the shard records, taking over shards.
        self._tasks: set[asyncio.Task] = set()
        self._joined: OrderedDict[tuple[TxnId, str, str | None], None] = OrderedDict()
        # The broker is stopping: it takes no shard, and hands over those it leads.
        self._leaving = False
        # Shard being handed over -> set once it is (calls for it wait on it).
        self._handing: dict[int, asyncio.Event] = {}
        # Coordinators of shards handed over, closed with the rest.
        self._handed_over: list[TransactionCoordinator] = []

    # ------------------------------------------------------------ life

    async def start(self, broker_id: str = "") -> None:
        """Recover the coordinators of the shards this broker leads: every shard with
        the embedded store, those whose records name `broker_id` in a cluster."""
        self.broker_id = broker_id
        self._spawn(self.leaders.follow(self._record_changed), "coordinator-shards")
        for shard in await self.leaders.led_here(broker_id):
            await self._start_local(shard)
        self.ready.set()

    def _spawn(self, coroutine, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_local(self, shard: int) -> TransactionCoordinator:
        coordinator = self.local.get(shard)
        if coordinator is not None:
            return coordinator
        task = self._starting.get(shard)
        if task is None:
            task = self._starting[shard] = asyncio.create_task(self._recover(shard))
        return await asyncio.shield(task)

    async def _recover(self, shard: int) -> TransactionCoordinator:
        try:
            log_ = await self.leaders.open_log(shard, self.broker_id, self._fenced)
            coordinator = TransactionCoordinator(
                shard,
                self.store,
                self.participant,
                self.limits,
                key_prefix=shard_key_prefix(shard),
                log=log_,
            )
            coordinator.failpoint = self.failpoint
            await coordinator.recover()
        finally:
            self._starting.pop(shard, None)
        self.local[shard] = coordinator
        if self.on_started is not None:
            self.on_started(coordinator)
        return coordinator

    def _fenced(self, shard: int) -> None:
        """Another broker took the shard: this one decides nothing more for it (its
        ends under way finish or fail; the new leader re-drives them)."""
        self.leaders.forget(shard)
        coordinator = self.local.pop(shard, None)
        if coordinator is not None:
            coordinator.stop_timers()

    def _record_changed(self, shard: int, leader: str) -> None:
        if leader != self.broker_id and shard in self.local:
            log.warning("coordinator shard %d: now led by broker %s; letting it go", shard, leader)
            self._fenced(shard)
        elif leader == self.broker_id and shard not in self.local and not self._leaving:
            # Handed over by a stopping leader (or placed here): taken now, not on
            # the first call that needs it.
            self._spawn(self._take_handed(shard), f"coordinator-shard-{shard}")

    async def _take_handed(self, shard: int) -> None:
        await self.ready.wait()
        try:
            await self._start_local(shard)
        except Exception as error:  # the next call for it tries again
            log.warning("coordinator shard %d named this broker, not started: %s", shard, error)

    async def hand_over(self, timeout_s: float) -> None:
        """The broker stops: give every shard led here to another live broker, within
        `timeout_s` (see the module docstring). A shard no other broker can take stays
        here, and is taken over once this broker has left."""
        self._leaving = True
        if not self.ready.is_set():
            return  # nothing recovered, nothing to hand over
        shards = sorted(shard for shard in self.local if shard not in self._handing)
        if not shards:
            return
        deadline = asyncio.get_running_loop().time() + timeout_s
        for shard in shards:
            self._handing[shard] = asyncio.Event()
            # Decided only by the next leader from now on (it re-arms the timeouts).
            self.local[shard].stop_timers()
        log.info("handing over coordinator shards %s", shards)
        await asyncio.gather(*(self._hand_over_one(shard, deadline) for shard in shards))

    async def _hand_over_one(self, shard: int, deadline: float) -> None:
        coordinator = self.local[shard]
        loop = asyncio.get_running_loop()
        kept = True
        try:
            under_way = coordinator.ends_under_way()
            if under_way:
                _, pending = await asyncio.wait(under_way, timeout=max(deadline - loop.time(), 0))
                if pending:
                    log.warning(
                        "coordinator shard %d: %d ends not complete at the hand-over; its "
                        "next leader completes them",
                        shard,
                        len(pending),
                    )
            async with asyncio.timeout_at(deadline):
                await coordinator.durable()
                # "": no other broker is live; the shard stays here until this one
                # has left, and is taken over then.
                kept = await self.leaders.hand_over(shard, self.broker_id) in ("", self.broker_id)
        except CoordinatorFencedError:
            kept = False  # another broker took it meanwhile
        except (TimeoutError, MetadataStoreError) as error:
            log.warning(
                "coordinator shard %d not handed over (%s); it is taken over once this "
                "broker has left",
                shard,
                error or "out of time",
            )
        finally:
            if not kept and self.local.get(shard) is coordinator:
                # Its record stays cached (the new leader's, from the CAS): calls
                # after this broker's store closes are still sent there.
                del self.local[shard]
            if self.local.get(shard) is not coordinator:
                # Closed last (close()): an end past the budget still answers its
                # client if it completes before the broker's calls are cut.
                self._handed_over.append(coordinator)
            self._handing.pop(shard).set()

    async def leader_gone(self, gone: str) -> None:
        """Broker `gone` left the cluster: the shards it led whose successor is this
        broker are taken over now, so their decided transactions end within seconds
        whether or not a client asks."""
        await self.ready.wait()
        for shard, leader in (await self.leaders.placed(fresh=True)).items():
            if leader == gone and self.leaders.successor(shard) == self.broker_id:
                try:
                    await self._reach(shard, leader)
                except Exception as error:  # the next call for it tries again
                    log.warning("coordinator shard %d not taken over: %s", shard, error)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for coordinator in [*self.local.values(), *self._handed_over]:
            await coordinator.close()

    # ------------------------------------------------------------ where

    def coordinator_of(self, txn_id: TxnId) -> TransactionCoordinator | None:
        """The local coordinator of the transaction's shard, None if not led here (or
        being handed over: a call for it waits for the new leader)."""
        return self._serving(txn_id.most_bits)

    async def leader_address(self, shard: int) -> str:
        """The gRPC address of the live leader of a shard led elsewhere ("" when it is
        led here); raises TransactionNotFoundError for a shard that does not exist or
        nobody leads, CoordinatorUnavailableError when its leader is down."""
        leader = await self._live_leader(shard)
        return "" if leader is None else leader.grpc_address

    async def _live_leader(self, shard: int) -> BrokerInfo | None:
        """leader_address's broker (None: this one, and the shard is in self.local
        and not being handed over)."""
        while True:
            leader = await self._leader_of(shard)
            if leader != self.broker_id:
                return await self._reach(shard, leader)
            handing = self._handing.get(shard)
            if handing is not None:
                # Answered once it is handed over: by the new leader, or here.
                await handing.wait()
                continue
            # Led here but perhaps not started yet: only a broker that placed it
            # starts it.
            await self._start_local(shard)
            if shard in self.local and shard not in self._handing:
                return None
            self.leaders.forget(shard)  # fenced, or handed over, meanwhile

    async def _leader_of(self, shard: int) -> str:
        """The id of the shard's leader. A stopping broker closes its metadata store
        as it leaves the cluster, before its last calls are answered: one that needs
        the store then is CoordinatorLeavingError, so the client (or the broker that
        asked for it) asks another broker, rather than a MetadataStoreUnavailable it
        would not retry."""
        try:
            return await self.leaders.leader(shard)
        except MetadataStoreError:
            if self._leaving:
                raise CoordinatorLeavingError(shard) from None
            raise

    def _serving(self, shard: int) -> TransactionCoordinator | None:
        """The coordinator of a shard led here and not being handed over."""
        return None if shard in self._handing else self.local.get(shard)

    async def _reach(self, shard: int, leader: str) -> BrokerInfo | None:
        """The live broker leading `shard`, whose record names `leader`; when that
        one is gone, the shard is taken over (by this broker: None), unless this
        broker is stopping."""
        owner = self.leaders.live_broker(leader)
        if owner is not None:
            return owner
        if self._leaving:
            raise CoordinatorUnavailableError(shard, leader)
        leader = await self.leaders.take_over(shard, self.broker_id, leader)
        if leader == self.broker_id:
            await self._start_local(shard)
            return None
        owner = self.leaders.live_broker(leader)
        if owner is None:
            raise CoordinatorUnavailableError(shard, leader)
        return owner

    async def shard_leader(self, shard: int) -> BrokerInfo | None:
        """The live leader of `shard`, None when it is this broker. A shard nobody
        leads yet is taken by this broker, as a named transaction's first open here
        would take it, so every broker answers the same leader from then on (Kafka's
        FindCoordinator). CoordinatorUnavailableError when its leader is down."""
        await self.ready.wait()
        if self._serving(shard) is not None:
            return None
        if self._leaving:
            try:
                leader = await self._leader_of(shard)
            except TransactionNotFoundError:
                raise CoordinatorLeavingError(shard) from None
        else:
            leader = await self.leaders.take(shard, self.broker_id)
        if leader == self.broker_id:
            return await self._live_leader(shard)
        return await self._reach(shard, leader)

    async def deciding(self, txn_id: TxnId) -> TransactionCoordinator:
        """leading(), for a call that changes the transaction (an end, a join): refused
        while this broker is fenced."""
        coordinator = await self.leading(txn_id)
        self.write_gate.admit(f"coordinator shard {txn_id.most_bits}")
        return coordinator

    async def leading(self, txn_id: TxnId) -> TransactionCoordinator:
        """The coordinator of the transaction, which must be led here; otherwise
        CoordinatorNotLeaderError naming its leader (or why there is none)."""
        await self.ready.wait()
        coordinator = self.coordinator_of(txn_id)
        if coordinator is not None:
            return coordinator
        leader = await self._live_leader(txn_id.most_bits)
        if leader is None:
            return self.local[txn_id.most_bits]
        raise CoordinatorNotLeaderError(txn_id.most_bits, leader.grpc_address, leader.http_url)

    async def _where(self, txn_id: TxnId) -> tuple[TransactionCoordinator | None, str]:
        """(the local coordinator of the transaction, "") when its shard is led here,
        perhaps just taken over; else (None, the gRPC address of its live leader).
        TransactionNotFoundError without a leader anywhere (standalone: none)."""
        coordinator = self.coordinator_of(txn_id)
        if coordinator is not None:
            return coordinator, ""
        address = await self.leader_address(txn_id.most_bits)
        if not address:
            return self.local[txn_id.most_bits], ""
        return None, address

    async def _on_leader(
        self,
        txn_id: TxnId,
        here: Callable[[TransactionCoordinator], Awaitable[T]],
        there: Callable[[str], Awaitable[T]],
    ) -> T:
        """`here(coordinator)` when the transaction's shard is led here, else
        `there(address of its leader)`. A leader that cannot be reached, or no longer
        leads the shard, is looked up again with a backoff for up to
        LEADER_RETRY_S: it may be restarting, or another broker taking the shard
        over; a caller answered at once would fail a send a moment later would take."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_RETRY_S
        delay = 0.05
        while True:
            try:
                coordinator, address = await self._where(txn_id)
                if coordinator is None:
                    return await there(address)
            except BrokerError as error:
                if (
                    error.code not in _LEADER_MOVING
                    or loop.time() + delay > deadline
                    or isinstance(error, CoordinatorLeavingError)  # asked again elsewhere
                ):
                    raise
                self.leaders.forget(txn_id.most_bits)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            return await here(coordinator)

    # ------------------------------------------------------------ opening

    async def open(self, timeout_ms: int, name: str, owner: str, client: str) -> OpenedTransaction:
        """A new transaction (or the named one; see the module docstring)."""
        await self.ready.wait()
        self.write_gate.admit("the transaction coordinator")
        if name:
            shard = named_shard(owner, name, self.shard_count)
        else:
            shard = await self._shard_for_new()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_RETRY_S
        delay = 0.05
        while True:
            coordinator, leader = self._serving(shard), None
            try:
                if coordinator is None:
                    # Placed here if nobody leads it (unless stopping); waits out a
                    # hand-over.
                    leader = await self.shard_leader(shard)
                    if leader is None:
                        coordinator = self.local[shard]
                if coordinator is None:
                    assert leader is not None
                    opened = await self.leaders.peers.open_transaction(
                        leader.grpc_address, shard, timeout_ms, name, owner, client
                    )
                    return OpenedTransaction(opened.txn_id, opened.state, leader.grpc_address)
            except BrokerError as error:
                # The shard moved on meanwhile (handed over, taken over): looked up
                # again, as _on_leader does. An open whose answer was lost leaves a
                # transaction that times out, as a client's own retry would.
                if (
                    error.code not in _LEADER_MOVING
                    or loop.time() + delay > deadline
                    or isinstance(error, CoordinatorLeavingError)  # asked again elsewhere
                ):
                    raise
                self.leaders.forget(shard)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            opened = self._open_here(coordinator, timeout_ms, name, owner, client)
            await coordinator.log.flushed()
            return opened

    async def open_on_shard(
        self, shard: int, timeout_ms: int, name: str, owner: str, client: str
    ) -> OpenedTransaction:
        """Open on a shard led here (a peer's OpenTransaction); one handed to this
        broker a moment ago is started first. CoordinatorNotLeaderError when another
        broker leads it, CoordinatorLeavingError while this one hands it over: the
        caller looks its leader up again."""
        self.write_gate.admit(f"coordinator shard {shard}")
        coordinator = self._serving(shard)
        if coordinator is None:
            if self._leaving:
                raise CoordinatorLeavingError(shard)
            await self.ready.wait()
            self.leaders.forget(shard)  # the caller read a record this one may not have
            leader = await self._live_leader(shard)
            if leader is not None:
                raise CoordinatorNotLeaderError(shard, leader.grpc_address, leader.http_url)
            coordinator = self.local[shard]
        opened = self._open_here(coordinator, timeout_ms, name, owner, client)
        await coordinator.log.flushed()
        return opened

    @staticmethod
    def _open_here(
        coordinator: TransactionCoordinator, timeout_ms: int, name: str, owner: str, client: str
    ) -> OpenedTransaction:
        if name:
            meta = coordinator.named_transaction(name, timeout_ms, owner, client)
            return OpenedTransaction(meta.txn_id, meta.state, "")
        txn_id = coordinator.new_transaction(timeout_ms, owner, client)
        return OpenedTransaction(txn_id, TxnState.OPEN, "")

    async def _shard_for_new(self) -> int:
        """A shard led here, in turn; leading none, one nobody leads (taken, unless
        this broker is stopping), else one led elsewhere, in turn."""
        if not self._serving_shards():  # in a cluster: standalone every shard is led here
            # One at a time: concurrent first asks take one shard, not one each.
            async with self._taking:
                if not self._serving_shards():
                    try:
                        placed = await self.leaders.placed()
                    except MetadataStoreError:
                        if self._leaving:  # its store closed as it left the cluster
                            raise CoordinatorLeavingError(0) from None
                        raise
                    for shard in range(self.shard_count):
                        if shard not in placed and not self._leaving:
                            leader = await self.leaders.take(shard, self.broker_id)
                            if leader == self.broker_id:
                                await self._start_local(shard)
                                return shard
                            placed[shard] = leader  # another broker took it meanwhile
                    if not placed:
                        raise CoordinatorLeavingError(0)
                    shards = sorted(placed)
                    return shards[next(self._round_robin) % len(shards)]
        shards = self._serving_shards()
        return shards[next(self._round_robin) % len(shards)]

    def _serving_shards(self) -> list[int]:
        return sorted(shard for shard in self.local if shard not in self._handing)

    # ------------------------------------------------------------ joining

    async def add_topic(self, txn_id: TxnId, topic: str, caller: str | None) -> None:
        """Record that the transaction writes to `topic` (before the write)."""
        coordinator = self.coordinator_of(txn_id)
        if coordinator is None:
            await self.ready.wait()
            coordinator = self.coordinator_of(txn_id)
        if coordinator is not None:
            coordinator.add_topic(txn_id, topic, caller)
            await coordinator.log.flushed()
            return
        key = (txn_id, topic, caller)
        if key in self._joined:
            self._joined.move_to_end(key)
            return

        async def here(coordinator: TransactionCoordinator) -> None:
            coordinator.add_topic(txn_id, topic, caller)
            await coordinator.log.flushed()

        await self._on_leader(
            txn_id,
            here,
            lambda address: self.leaders.peers.add_topic(address, txn_id, topic, caller),
        )
        self._joined[key] = None
        if len(self._joined) > MAX_REMEMBERED_JOINS:
            self._joined.popitem(last=False)

    async def check_ack(self, txn_id: TxnId, caller: str | None, count: int) -> None:
        """Raise what add_ack would refuse, recording nothing."""
        coordinator = self.coordinator_of(txn_id)
        if coordinator is not None:
            coordinator.check_ack(txn_id, caller, count)
            return

        async def here(coordinator: TransactionCoordinator) -> None:
            coordinator.check_ack(txn_id, caller, count)

        await self.ready.wait()
        await self._on_leader(
            txn_id,
            here,
            lambda address: self.leaders.peers.check_ack(address, txn_id, caller, count),
        )

    async def add_ack(
        self,
        txn_id: TxnId,
        topic: str,
        subscription: str,
        message_ids: list[tuple[int, int, int]],
        caller: str | None,
    ) -> None:
        """Record a transactional ack with the transaction's coordinator."""

        async def here(coordinator: TransactionCoordinator) -> None:
            coordinator.add_ack(txn_id, topic, subscription, message_ids, caller)
            await coordinator.log.flushed()

        ack = TxnAck(topic, subscription, message_ids)
        await self._on_leader(
            txn_id, here, lambda address: self.leaders.peers.add_ack(address, txn_id, ack, caller)
        )

    async def state_of(self, txn_id: TxnId) -> tuple[TxnState, int]:
        """(the transaction's state, its shard's low watermark) from its coordinator;
        TransactionNotFoundError if it does not know it."""
        await self.ready.wait()
        coordinator = self.coordinator_of(txn_id)
        if coordinator is not None:
            return coordinator.get(txn_id).state, coordinator.low_watermark

        async def here(coordinator: TransactionCoordinator) -> tuple[TxnState, int]:
            return coordinator.get(txn_id).state, coordinator.low_watermark

        async def there(address: str) -> tuple[TxnState, int]:
            answer = await self.leaders.peers.transaction_state(address, txn_id)
            return answer.state, answer.low_watermark

        return await self._on_leader(txn_id, here, there)

    # ------------------------------------------------------------ reading

    def list_open(self) -> list[TxnMetadata]:
        """The transactions not yet ended of every shard led here."""
        return [meta for shard in sorted(self.local) for meta in self.local[shard].list_open()]

    def get(self, txn_id: TxnId) -> TxnMetadata:
        """A transaction of a shard led here (TransactionNotFoundError otherwise)."""
        coordinator = self.coordinator_of(txn_id)
        if coordinator is None:
            raise TransactionNotFoundError(
                f"transaction {txn_id} is not known to this broker: its coordinator shard "
                f"{txn_id.most_bits} is not led here"
            )
        return coordinator.get(txn_id)

    def low_watermarks(self) -> dict[int, int]:
        return {shard: self.local[shard].low_watermark for shard in sorted(self.local)}

    def stats(self) -> dict:
        """The coordinators' figures summed, each shard's own under `shards`."""
        shards = {str(shard): self.local[shard].stats() for shard in sorted(self.local)}
        summed = ("openTxns", "endedTxns", "committedCount", "abortedCount", "timedOutCount")
        return {
            "shardCount": self.shard_count,
            "ledShards": sorted(self.local),
            **{key: sum(s[key] for s in shards.values()) for key in summed},
            "shards": shards,
        }

    async def for_each_local(
        self, action: Callable[[TransactionCoordinator], Awaitable[None]]
    ) -> None:
        for shard in sorted(self.local):
            await action(self.local[shard])
