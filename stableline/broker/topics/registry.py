"""The broker's topics: known from the metadata store, loaded on first use, unloaded
when idle.

Promises:
- Every topic ever created and not deleted is listed (names(), exists()) from the
  metadata store, loaded or not; start-up reads the names and loads nothing else,
  so the broker is healthy in about the same time whatever the number of topics.
- A topic is loaded by the first request that names it: its ledger metadata and
  cursors, and its transaction buffer's snapshot, before anyone sees it; the log
  after the snapshot is replayed in the background (Topic.start_recovery).
  READ_COMMITTED reads wait for that replay (get_stable, at most
  `topic_recovery_wait_s`), so they never see a stable position earlier than the
  one readers saw before a restart, a crash included.
- A topic that may hold transactions the coordinator must settle is loaded at
  start, in the background: every topic loaded by a run that did not close it
  cleanly (a crash), and every topic closed with transactions still open. Its
  `recover:` mark is written when it is loaded and made durable by the ledger
  list's fsync that precedes the run's first append to it; a clean close of an
  idle topic removes it.
- An idle topic (Topic.idle) unused for `inactive_topic_unload_s` is closed and
  forgotten, so it costs its name in memory and no open file; the next request
  loads it again. A load waits for an unload of the same topic under way.
- Ledger files of every topic share one LedgerFiles cache of
  `max_open_ledger_files` descriptors.
- Each topic is in one TopicState (topics/topic_state.py: unloaded, creating,
  loading, loaded, unloading), kept in one slot per topic with something in memory
  or under way, and changed only by `_move`, which checks the table. A request for
  a topic being created, loaded or unloaded waits for that to finish.

Namespaces and their policies are the registry's `namespace_policies`
(topics/namespace_policies.py): a topic's creation makes its namespace exist there. In a
cluster they are the cluster's, shared by its brokers.

In a cluster (the registry's `placement` is the cluster's ownership) the broker that places a topic on first use or by
an admin's create checks its name (creation checks, the namespace's room) before
its ownership record is written; the owner named by the record then makes it
without checking again. A topic whose files are on this broker and that has no
record (made before the broker joined the cluster) is placed on this broker. A
deleted topic's record is deleted with it, so the name can be placed afresh.

Every topic loaded shares the broker's write gate (topics/write_gate.py); when it closes,
the producer and consumer streams of every loaded topic are ended. A replicated topic
sees the gate pinned at the moment its load began: once the gate closes it writes no
more (nor sends anything to its replicas: `on_retired` stops its replication at
once, so its unload waits for no member), and it is unloaded; a request that finds it still
loaded unloads it and loads it again (taken at a new epoch), whatever the gate did
meanwhile.

A namespace holds at most `max_topics_per_namespace` topics (0: unlimited, as
Pulsar's default): one more, created by an admin or on first use, is refused with
TooManyTopicsError and nothing is written. The count per namespace is kept in
memory (built from the names at start), so the check is O(1) per creation.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dispatcher import DispatchLimits
from managed_ledger import LedgerFiles, LocalStore, ManagedLedger
from managed_ledger.cache import SharedEntryCache
from managed_ledger.ledger_files import max_open_files
from managed_ledger.memory import entry_cache_budget, pending_write_budget
from managed_ledger.write_budget import PendingWriteBudget
from stableline.broker.config import BrokerConfig
from stableline.broker.errors import BrokerError, code_of
from stableline.broker.topics.database import BROKER_DB
from stableline.broker.topics.namespace_policies import EmbeddedNamespacePolicies, NamespacePolicies
from stableline.broker.topics.persistence import PersistencePolicy, default_persistence
from stableline.broker.topics.placement import StandalonePlacement, TopicPlacement
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.topic_state import TopicState, check_topic_transition
from stableline.broker.topics.write_gate import BrokerFencedError, WriteGate
from stableline.topic_name import TopicName
from txnbuffer import SnapshotPolicy
from txnbuffer.failpoint import Failpoint

log = logging.getLogger(__name__)

_TOPIC_PREFIX = "topic:"
# Codes of a load refused because another broker serves the topic now.
_SERVED_ELSEWHERE = frozenset({"TopicFenced", "NotOwner"})
# Loaded by a run and not (yet) closed idle: load at the next start (see above).
_RECOVER_PREFIX = "recover:"
# Topics loaded at once by the start's background recovery.
START_LOAD_CONCURRENCY = 8
# Idle topics closed at once (their ledgers' seals share fsyncs of the store).
UNLOAD_CONCURRENCY = 64
# After a collection of unloaded topics' garbage that took T, the next waits 10 T.
COLLECT_COST_FACTOR = 10


@functools.cache
def _libc_name() -> str | None:
    # Looked up once: find_library runs ldconfig in a subprocess on each call.
    return ctypes.util.find_library("c")


def _release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim), so
    memory freed by unloading shows in the broker's RSS; a no-op elsewhere."""
    name = _libc_name()
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)


def _namespace_of(stored_name: str) -> str:
    """TopicName.parse(stored_name).namespace_path, without checking again at every
    start a name that was checked when its topic was created (str(TopicName))."""
    tenant_namespace, _, _local = stored_name.removeprefix("persistent://").rpartition("/")
    return tenant_namespace


@dataclass(slots=True, eq=False)
class _TopicSlot:
    """What the registry holds of one topic that is not UNLOADED."""

    state: TopicState = TopicState.UNLOADED
    # What a request for the topic waits for: the creation (CREATING), the load,
    # whose result is the topic (LOADING), the close (UNLOADING).
    pending: asyncio.Future[Any] | None = None
    topic: Topic | None = None  # LOADED, UNLOADING
    last_used: float = 0.0  # time.monotonic() of the last request that got it


class TopicNotFoundError(BrokerError, LookupError):
    code = "TopicNotFound"


class TooManyTopicsError(BrokerError):
    """The namespace holds `max_topics_per_namespace` topics already."""

    code = "TooManyTopics"


class TopicRegistry:
    def __init__(
        self,
        config: BrokerConfig,
        store: LocalStore,
        namespace_policies: NamespacePolicies | None = None,
        write_gate: WriteGate | None = None,
        placement: TopicPlacement | None = None,
        failpoint: Failpoint | None = None,
    ):
        """`namespace_policies`: the cluster's; by default this broker's own, in `store`.
        `write_gate`: whether this broker may write to its topics (in a cluster,
        Membership's). `placement`: which broker serves each topic (in a cluster, the
        ownership records); by default this one serves every topic. `failpoint`:
        where tests hold the broker (stableline.broker.failpoints)."""
        self.config = config
        self.store = store
        self.write_gate = write_gate or WriteGate()
        self.write_gate.on_close(self._end_streams)
        self.files = LedgerFiles(max_open_files(config.ledger))
        # One entry cache and one pending-write budget for every topic of the broker.
        self.entry_cache = SharedEntryCache(entry_cache_budget(config.ledger))
        self.write_budget = PendingWriteBudget(pending_write_budget(config.ledger))
        # Every topic not UNLOADED: its state, what is under way, the topic loaded.
        self._slots: dict[str, _TopicSlot] = {}
        # Given to every topic loaded from now on (see Topic.on_recovered, failpoints).
        self.on_recovered: Callable[[Topic], Awaitable[None]] | None = None
        # Called with every topic loaded, before anyone can use it (the broker holds
        # again the acks of transactions not ended).
        self.on_loaded: Callable[[Topic], None] | None = None
        self.failpoint = failpoint
        # Called with a replicated topic retired (the gate closed after it was taken):
        # its replication is to stop calling members at once (the cluster's).
        self.on_retired: Callable[[Topic], None] = lambda topic: None
        # Called after a topic is deleted, to drop what else belongs to it (its grants).
        self.on_deleted: list[Callable[[TopicName], Awaitable[None]]] = []
        # Called before a topic is created; one raises to refuse the name (a
        # partitioned topic's base name, stableline.broker.topics.partitioned).
        self.creation_checks: list[Callable[[TopicName], None]] = []
        self.placement: TopicPlacement = placement or StandalonePlacement()
        self.dispatch_limits = DispatchLimits(
            max_unacked_per_consumer=config.max_unacked_messages_per_consumer,
            max_unacked_per_subscription=config.max_unacked_messages_per_subscription,
            max_consumers=config.max_consumers_per_subscription,
        )
        # The topics that exist: the store's topic keys, read once and kept in step.
        # What exists is the store's; what is in memory is the slots' (TopicState).
        self._known: set[str] = {
            key[len(_TOPIC_PREFIX) :] for key, _ in store.scan_prefix(BROKER_DB, _TOPIC_PREFIX)
        }
        # Topics per namespace, counting creations under way (see create()).
        self._topics_in: dict[str, int] = {}
        for key in self._known:
            namespace = _namespace_of(key)
            self._topics_in[namespace] = self._topics_in.get(namespace, 0) + 1
        # Topics written before namespaces were recorded still make theirs exist.
        if namespace_policies is None:
            namespace_policies = EmbeddedNamespacePolicies(store, self._topics_in)
        self.namespace_policies = namespace_policies
        # For namespaces without a persistence policy (config, resolved by its store).
        self.default_persistence = default_persistence(config)
        # The store's recover marks (see the module docstring), kept in step too.
        self._marked: set[str] = {
            key[len(_RECOVER_PREFIX) :] for key, _ in store.scan_prefix(BROKER_DB, _RECOVER_PREFIX)
        }
        self._background: list[asyncio.Task] = []
        self.unloaded_total = 0
        # Unloaded topics not collected yet, and when the next collection may run.
        self._garbage = False
        self._collect_after = 0.0

    def _directory(self, name: TopicName) -> Path:
        return self.ledger_directory(name.storage_name)

    def ledger_directory(self, storage_name: str) -> Path:
        """Where the ledger of the topic of that storage name keeps its files (a
        replica's copy of it too, managed_ledger/replica.py)."""
        return self.config.ledgers_dir / storage_name

    def names(self, namespace: str | None = None) -> list[str]:
        names = sorted(self._known)
        if namespace:
            prefix = f"persistent://{namespace}/"
            names = [n for n in names if n.startswith(prefix)]
        return names

    def cluster_names(self, namespace: str | None = None) -> list[str]:
        """names(), and in a cluster every topic another broker owns (from the
        ownership records this broker follows): what a namespace holds cluster-wide."""
        prefix = f"persistent://{namespace}/" if namespace else ""
        return sorted(set(self.names(namespace)) | self.placement.placed_names(prefix))

    def persistence_of(self, namespace: str) -> PersistencePolicy:
        """The persistence policy a topic of `namespace` is placed with now."""
        return self.namespace_policies.persistence(namespace) or self.default_persistence

    def namespace_exists(self, namespace: str) -> bool:
        """True for public/default and for every namespace a topic was ever created in."""
        return self.namespace_policies.exists(namespace)

    def count(self) -> int:
        return len(self._known)

    def loaded(self) -> list[Topic]:
        return [
            slot.topic
            for slot in self._slots.values()
            if slot.state is TopicState.LOADED and slot.topic is not None
        ]

    def state(self, name: TopicName) -> TopicState:
        slot = self._slots.get(str(name))
        return TopicState.UNLOADED if slot is None else slot.state

    def _move(self, key: str, slot: _TopicSlot, new: TopicState) -> None:
        """The one place a topic's state changes; an illegal move raises
        (topics/topic_state.py). A slot is held from its move out of UNLOADED to
        its move back."""
        check_topic_transition(key, slot.state, new)
        if slot.state is TopicState.UNLOADED:
            assert key not in self._slots, (key, self._slots[key].state)
            self._slots[key] = slot
        slot.state = new
        if new is TopicState.UNLOADED and self._slots.get(key) is slot:
            del self._slots[key]

    def exists(self, name: TopicName) -> bool:
        return str(name) in self._known

    def taken(self, name: TopicName) -> bool:
        """True when the topic exists or its creation (or first load) is under way."""
        key = str(name)
        slot = self._slots.get(key)
        under_way = slot is not None and slot.state in (TopicState.CREATING, TopicState.LOADING)
        return key in self._known or under_way

    async def taken_in_cluster(self, name: TopicName) -> bool:
        """taken(), or in a cluster placed on any broker (it has an ownership record)."""
        if self.taken(name):
            return True
        return await self.placement.is_placed(name)

    def topics_in(self, namespace: str) -> int:
        """How many topics `namespace` holds (creations under way included)."""
        return self._topics_in.get(namespace, 0)

    def _check_room(self, name: TopicName) -> None:
        """Raises TooManyTopicsError unless the namespace may hold one more topic, or
        what a creation check raises."""
        for check in self.creation_checks:
            check(name)
        limit = self.config.max_topics_per_namespace
        namespace = name.namespace_path
        if limit and self.topics_in(namespace) >= limit:
            raise TooManyTopicsError(
                f"namespace {namespace} holds {limit} topics, its max_topics_per_namespace: "
                f"delete a topic or raise max_topics_per_namespace in the broker config"
            )

    async def create(
        self, name: TopicName, placed: bool = False, persistence: PersistencePolicy | None = None
    ) -> bool:
        """Create the topic without loading it (the first use loads it); durable when
        this returns. False when it existed already. Raises TooManyTopicsError when
        its namespace is full. `placed`: its ownership record names this broker, and
        the checks were made where it was placed. `persistence`: the policy it is
        placed by, if this call places it (default: its namespace's)."""
        return await self._create(name, placed, persistence=persistence)

    async def _create(
        self,
        name: TopicName,
        placed: bool,
        loading: _TopicSlot | None = None,
        persistence: PersistencePolicy | None = None,
    ) -> bool:
        """create(); `loading`: the slot of the load that creates the topic on its
        first use (the creation is part of that load, the topic stays LOADING)."""
        key = str(name)
        if key in self._known:
            return False
        if not placed and await self.placement.needs_placing(name):
            self._check_room(name)  # this broker places it: it checks the name
            placed = True
        # In a cluster placed by compare-and-set; the owner creates its files on
        # first use.
        # The namespace's policy unless the caller chose one: standalone too, where a
        # policy asking for more than this broker's one copy is refused, not ignored.
        claim = await self.placement.claim(
            name, persistence or self.persistence_of(name.namespace_path)
        )
        if not claim.here:
            return claim.new
        while True:
            if key in self._known:
                return False  # made while this call waited
            slot = self._slots.get(key)
            if slot is None or slot is loading or slot.state is not TopicState.LOADING:
                break
            # Its first use is loading it and creates it on the way: that creation is
            # this one (a load that fails leaves the creation to this call).
            assert slot.pending is not None
            with contextlib.suppress(Exception):
                await asyncio.shield(slot.pending)
        if slot is not None and slot.state is TopicState.CREATING:
            await self.store.sync_async()  # durable with the creation under way
            return False
        if slot is not None:
            # Part of a load (or a topic loaded and not yet listed): it keeps its state.
            await self._write_creation(name, placed)
            return True
        created: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        slot = _TopicSlot(pending=created)
        self._move(key, slot, TopicState.CREATING)
        try:
            await self._write_creation(name, placed)
        finally:
            self._move(key, slot, TopicState.UNLOADED)
            created.set_result(None)  # made or not: who waits looks again
        return True

    async def _write_creation(self, name: TopicName, placed: bool) -> None:
        """Make the topic exist, durably: its namespace, then its key, then an fsync."""
        key = str(name)
        if not placed:
            self._check_room(name)
        # Counted before the fsync: concurrent creations cannot overrun the limit.
        self._topics_in[name.namespace_path] = self.topics_in(name.namespace_path) + 1
        try:
            # The namespace first: a crash before the topic's key leaves it existing
            # and empty, never a topic in a namespace that does not exist.
            await self.namespace_policies.add(name.namespace_path)
            self.store.put(BROKER_DB, _TOPIC_PREFIX + key, b"")
            await self.store.sync_async()  # concurrent creations share one fsync
        except BaseException:
            self._topics_in[name.namespace_path] -= 1
            raise
        self._known.add(key)
        log.debug("created topic %s", key)

    async def get(self, name: TopicName, create: bool = True) -> Topic:
        key = str(name)
        known = key in self._known
        if create and not known and await self.placement.needs_placing(name):
            # A first use places it: this broker checks the name before the record.
            self._check_room(name)
        if await self.placement.check(name, create or known, known) and not known:
            # Its record says this broker serves it: the broker that placed it
            # checked the name (a partition's base, the namespace's room).
            await self.create(name, placed=True)
        while True:
            slot = self._slots.get(key)
            state = TopicState.UNLOADED if slot is None else slot.state
            if state is TopicState.LOADED:
                assert slot is not None and slot.topic is not None
                if slot.topic.retired:
                    # Served here before the gate last closed: taken again first.
                    await self._close_slot(key, slot)
                    continue
                slot.last_used = time.monotonic()
                return slot.topic
            if state is TopicState.CREATING:
                assert slot is not None and slot.pending is not None
                await asyncio.shield(slot.pending)
                continue
            if key not in self._known:
                if not create:
                    raise TopicNotFoundError(f"topic {key} does not exist")
                self._check_room(name)  # before its ledger is opened
            if state is not TopicState.UNLOADING:
                break
            assert slot is not None and slot.pending is not None
            await asyncio.shield(slot.pending)
        if slot is None:
            slot = _TopicSlot()
            self._move(key, slot, TopicState.LOADING)
            slot.pending = asyncio.create_task(self._load(name, slot), name=f"load:{key}")
        assert slot.state is TopicState.LOADING and slot.pending is not None
        topic = await asyncio.shield(slot.pending)
        slot.last_used = time.monotonic()
        return topic

    async def get_stable(self, name: TopicName) -> Topic:
        """The topic once its recovery has replayed its log (Topic.wait_stable), for
        READ_COMMITTED reads; TransactionBufferNotReadyError after
        `topic_recovery_wait_s`."""
        topic = await self.get(name, create=False)
        await topic.wait_stable(self.config.topic_recovery_wait_s)
        return topic

    async def _load(self, name: TopicName, slot: _TopicSlot) -> Topic:
        key = str(name)
        # Before the topic is taken: a close of the gate from here on retires it.
        generation = self.write_gate.generation
        try:
            replication = await self.placement.recover(name)
            ledger = await ManagedLedger.open(
                name.storage_name,
                self._directory(name),
                self.store,
                self.config.ledger,
                self.files,
                self.entry_cache,
                self.write_budget,
                replication,
            )
            await self._create(name, placed=False, loading=slot)
            if key not in self._marked:
                # Durable before this run appends to the topic: the append's new ledger
                # file is listed with an fsync of the store first (ManagedLedger).
                self.store.put(BROKER_DB, _RECOVER_PREFIX + key, b"")
                self._marked.add(key)
            topic = Topic(
                name,
                ledger,
                SnapshotPolicy(
                    self.config.txn_snapshot_every_changes, self.config.txn_snapshot_interval_s
                ),
                self.dispatch_limits,
                self.write_gate
                if replication is None
                else self.write_gate.pinned(generation, name),
            )
            topic.on_recovered = self.on_recovered
            topic.buffer.failpoint = self.failpoint
            if self.on_loaded is not None:
                self.on_loaded(topic)
        except BaseException:
            self._move(key, slot, TopicState.UNLOADED)
            raise
        slot.topic = topic
        self._move(key, slot, TopicState.LOADED)
        topic.start_recovery()
        if topic.retired:
            # The gate closed while it was being taken: as for a topic loaded then.
            self._retire(topic)
        return topic

    def _end_streams(self, error: BrokerFencedError) -> None:
        for topic in self.loaded():
            topic.end_streams(error)
            if topic.ledger.replication is not None:
                # Another broker may take it while this one is away: it is taken again
                # (a new epoch, the ensemble fenced) before this broker serves it again.
                self._retire(topic)

    def _retire(self, topic: Topic) -> None:
        """Stop a replicated topic's replication now, so nothing more goes to its
        members at this epoch and its unload waits for none of them (one may be
        away), and unload it."""
        self.on_retired(topic)
        self._background.append(
            asyncio.create_task(self.unload(topic.name), name=f"unload:{topic.name}")
        )

    # ------------------------------------------------------------ start and unload

    def start(self) -> None:
        """Load in the background the topics the last run may have left transactions
        in (see the module docstring); unload idle topics from now on."""
        pending = sorted(self._marked & self._known)
        if pending:
            log.info(
                "loading %d of %d topics in the background: the last run left them "
                "open or with transactions to settle",
                len(pending),
                len(self._known),
            )
            self._background.append(
                asyncio.create_task(self._load_marked(pending), name="load-marked-topics")
            )
        if self.config.inactive_topic_unload_s > 0:
            self._background.append(
                asyncio.create_task(self._unload_idle_forever(), name="unload-idle-topics")
            )

    async def _load_marked(self, names: list[str]) -> None:
        queue = iter(names)

        async def worker() -> None:
            for key in queue:
                try:
                    topic = await self.get(TopicName.parse(key), create=False)
                    await topic.wait_recovered()
                except TopicNotFoundError:
                    pass  # deleted meanwhile
                except Exception as error:
                    if code_of(error) in _SERVED_ELSEWHERE:
                        # A replicated topic another broker took while this one was away.
                        log.info("topic %s is served by another broker now: %s", key, error)
                    else:
                        log.error("cannot load topic %s: %s", key, error)

        await asyncio.gather(*(worker() for _ in range(START_LOAD_CONCURRENCY)))
        log.info("background loading of %d topics done", len(names))

    async def _unload_idle_forever(self) -> None:
        idle_s = self.config.inactive_topic_unload_s
        while True:
            await asyncio.sleep(min(idle_s / 2, 10.0))
            await self.unload_idle(idle_s)

    async def unload_idle(self, idle_s: float) -> int:
        """Close every topic idle and unused for `idle_s`; returns how many."""
        deadline = time.monotonic() - idle_s
        idle = [
            key
            for key, slot in self._slots.items()
            if slot.state is TopicState.LOADED
            and slot.last_used <= deadline
            and slot.topic is not None
            and slot.topic.idle
        ]
        unloaded = 0
        for first in range(0, len(idle), UNLOAD_CONCURRENCY):
            chunk = idle[first : first + UNLOAD_CONCURRENCY]
            results = await asyncio.gather(*(self._unload(key, deadline) for key in chunk))
            unloaded += sum(results)
        if unloaded:
            log.info("unloaded %d idle topics (%d loaded)", unloaded, len(self.loaded()))
            self._garbage = True
        if self._garbage and time.monotonic() >= self._collect_after:
            # A topic's objects reference each other (listeners, views): only the
            # cycle collector frees them, and only then can the heap shrink. A full
            # collection walks every object of the broker and holds the loop
            # meanwhile, so it runs at most 1/COLLECT_COST_FACTOR of the time.
            started = time.monotonic()
            gc.collect()
            _release_free_heap()
            took = time.monotonic() - started
            self._collect_after = time.monotonic() + took * COLLECT_COST_FACTOR
            self._garbage = False
            log.debug("collected unloaded topics' garbage in %.1f ms", took * 1000)
        return unloaded

    async def _unload(self, key: str, deadline: float) -> bool:
        slot = self._slots.get(key)
        if (
            slot is None
            or slot.state is not TopicState.LOADED
            or slot.last_used > deadline  # used since the scan
            or slot.topic is None
            or not slot.topic.idle
        ):
            return False
        return await self._close_slot(key, slot)

    async def unload(self, name: TopicName) -> bool:
        """Close the topic now, busy or not (another broker took it): its streams end
        and its clients look it up again. False when it was not loaded."""
        key = str(name)
        slot = self._slots.get(key)
        if slot is None or slot.state is not TopicState.LOADED or slot.topic is None:
            return False
        return await self._close_slot(key, slot)

    async def _close_slot(self, key: str, slot: _TopicSlot) -> bool:
        """Close a loaded slot's topic, through UNLOADING to UNLOADED."""
        assert slot.topic is not None
        self._move(key, slot, TopicState.UNLOADING)
        slot.pending = asyncio.create_task(self._close_topic(key, slot.topic), name=f"unload:{key}")
        try:
            await asyncio.shield(slot.pending)
        finally:
            self._move(key, slot, TopicState.UNLOADED)
        self.unloaded_total += 1
        return True

    async def _close_topic(self, key: str, topic: Topic) -> None:
        clean = topic.idle
        await topic.close()
        if clean and key in self._marked:
            # Closed with its snapshot and nothing open: the next start need not load it.
            self.store.delete(BROKER_DB, _RECOVER_PREFIX + key)
            self._marked.discard(key)

    async def delete(self, name: TopicName) -> None:
        topic = await self.get(name, create=False)
        key = str(name)
        await topic.delete()
        slot = self._slots.get(key)
        if slot is not None and slot.state is TopicState.LOADED:
            self._move(key, slot, TopicState.UNLOADED)
        if key in self._known:
            self._known.discard(key)
            self._topics_in[name.namespace_path] -= 1
        self._marked.discard(key)
        self.store.write_many(BROKER_DB, {}, [_TOPIC_PREFIX + key, _RECOVER_PREFIX + key])
        await self.placement.forget(name)
        for forget in self.on_deleted:
            await forget(name)

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._background.clear()
        loads = [s.pending for s in self._slots.values() if s.state is TopicState.LOADING]
        for load in loads:
            if load is not None:
                with contextlib.suppress(Exception):
                    await load
        # Concurrently, in chunks: each close seals a ledger file, and the metadata
        # store's fsync is shared by the closes under way.
        loaded = [
            (key, slot.topic)
            for key, slot in self._slots.items()
            if slot.state is TopicState.LOADED and slot.topic is not None
        ]
        for first in range(0, len(loaded), UNLOAD_CONCURRENCY):
            chunk = loaded[first : first + UNLOAD_CONCURRENCY]
            await asyncio.gather(*(self._close_topic(key, topic) for key, topic in chunk))
        for key, slot in list(self._slots.items()):
            if slot.state is TopicState.LOADED:
                self._move(key, slot, TopicState.UNLOADED)
        self.files.close_all()
