"""Topic ownership in a cluster: which broker serves each topic, placed once, checked on use.

Active only with a shared metadata store (`--metadata-store etcd://...`); with the
embedded store the registry asks a StandalonePlacement (topics/placement.py) instead
and nothing here runs.

A topic's record (`/stableline/ownership/{cluster}/topics/{tenant}/{ns}/{topic}`, see
stableline.metadata) names its leader, an epoch, an ensemble (the leader first) and
the write and ack quorums of its namespace's persistence policy when it was placed
(a record written before ensembles were chosen reads as 1 and 1). It is persistent:
a dead leader's ledgers stay on its disk, so the record outlives its session, and
liveness is read from the brokers' registrations.

Promises:
- A record is created once, by compare-and-set (`expected_version=-1`): of brokers
  placing one topic at once exactly one record wins and every broker then obeys it.
  Placement picks the least-loaded live broker by the topics each leads (counted
  from the records, which every broker reads at start and follows by the watch)
  and the load score each last reported (ensemble.py's placement_order); its
  ensemble is that leader and the next least-loaded live brokers, E of them by the
  namespace's persistence policy (else the broker's default; a creation may name
  another, Kafka's replication factor), and fewer than E live brokers is
  NotEnoughBrokersError (ensemble.py). A topic whose files are on this broker and
  that has no record (made before the broker joined the cluster) is placed here,
  with its data, this broker leading its ensemble. A replicated topic's record
  changes by compare-and-set (`change_record`): a takeover (`take`), its ledgers, a
  hand-over to another member (cluster/topic_moves.py), a member replaced
  (`replace_member`, at the leader's epoch: a lost or draining member gives way to
  a live broker outside the ensemble, whose copy is not counted on until it holds
  everything); a record is deleted with its topic (`forget`). A draining broker
  (being decommissioned) is chosen by no placement.
- The records watch tells this broker when a record it follows changes leader:
  another broker took a topic (`on_taken`), or a record now names this broker the
  leader of a topic another led (`on_handed`: a hand-over, which it takes at once).
- `check(name)` answers from a cache kept current by watches on the ownership and
  broker prefixes, so a call for a topic this broker owns costs one dict look-up
  after its first use; it raises NotOwnerError when another live broker owns the
  topic and TopicUnavailableError when its owner is not live.
- With the metadata store unreachable, topics already placed keep being served: the
  cached records answer, and a topic whose files are on this broker is its own
  (only a leader makes a topic's files). What needs the store fails at once (or
  within the store's operation timeout, for an etcd that does not answer) with
  OwnershipUnavailableError, a TopicUnavailableError: a placement is refused without
  asking the store unless the session is CONNECTED (a SUSPENDED or LOST broker takes
  no new ownership), a record it cannot read is refused as the store failed.
  Whether this broker may write to what it owns is the write gate's (topics/write_gate.py).
- A lookup (`serving_broker`) of a replicated topic never names this broker while
  its session no longer holds (it is fenced: another broker may have taken the
  topic): it names the broker the record in the store names, read afresh within
  LOOKUP_READ_TIMEOUT_S, or refuses with FencedLookupError (code BrokerUnavailable),
  on which a client asks the next broker of its service URL at once. A lost session
  also forgets the cached records of replicated topics: changes made meanwhile are
  read afresh on their next use, and until then a call for one while the session
  does not hold (`check`) is answered the same way, NotOwnerError naming the other
  broker or FencedLookupError, at once rather than after the store's operation
  timeout. (A topic of one copy cannot move: its owner is named, fenced or not.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from stableline.broker.cluster.ensemble import choose_ensemble
from stableline.broker.errors import BrokerError
from stableline.broker.topics.persistence import (
    SINGLE_COPY,
    NotEnoughBrokersError,
    PersistencePolicy,
)
from stableline.broker.topics.placement import Claim, Placement
from stableline.metadata import (
    AlreadyExists,
    BadVersion,
    BrokerInfo,
    ClusterMetadataStore,
    MetadataStoreUnavailable,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
    SessionState,
    Watch,
    WatchOverflow,
    list_brokers,
)
from stableline.metadata.draining import list_draining
from stableline.metadata.layout import ROOT, brokers_dir, check_cluster_name
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)


# A record's data dir of a member that replaced another and is still being sent its
# copy: it names no registration's dir, so the member is not counted on (fence,
# successor) until it holds everything and the writer records its real dir.
COPYING_PREFIX = "copying:"

# How long a fenced broker's lookup waits to read a topic's record (its store may be
# the very thing it cannot reach; the client asks another broker after that).
LOOKUP_READ_TIMEOUT_S = 0.5


def ownership_dir(cluster: str) -> str:
    return f"{ROOT}/ownership/{check_cluster_name(cluster)}/topics"


def ownership_path(cluster: str, name: TopicName) -> str:
    return f"{ownership_dir(cluster)}/{name.tenant}/{name.namespace}/{name.local_name}"


@dataclass(frozen=True, slots=True)
class OwnershipRecord:
    """Who serves one topic: its leader, the epoch of that leadership, the ensemble
    (distinct broker ids, the leader among them) and the quorums its ledgers are
    written with (1 <= ack_quorum <= write_quorum <= len(ensemble))."""

    leader: str  # broker id (its advertised gRPC address)
    epoch: int
    ensemble: tuple[str, ...]
    since_ms: int
    write_quorum: int = 1
    ack_quorum: int = 1
    # Replicated topics (an ensemble of more than one) only: the ledger its writer has
    # open (-1: none), and how many entries each closed ledger ends with. No copy of
    # a ledger counts past its recorded end (a refused write's entries may lie there).
    current_ledger: int = -1
    closed_ledgers: dict[int, int] = field(default_factory=dict, hash=False)
    # Member -> the data dir id its copy is on (its registration's when it was placed
    # or last caught up): a member registered with another holds no copy that counts.
    data_dirs: dict[str, str] = field(default_factory=dict, hash=False)
    # A member to leave the ensemble once every other member holds its copy: a broker
    # outside the ensemble is being sent its copy in its place (ensemble_swaps.py), the
    # ensemble one larger meanwhile. "": none.
    leaving: str = ""

    def __post_init__(self) -> None:
        assert self.leader in self.ensemble, self
        assert not self.leaving or self.leaving in self.ensemble, self
        assert len(set(self.ensemble)) == len(self.ensemble), self
        assert self.epoch >= 0, self
        assert 1 <= self.ack_quorum <= self.write_quorum <= len(self.ensemble), self

    @property
    def persistence(self) -> PersistencePolicy:
        """The policy the record was placed with."""
        return PersistencePolicy(len(self.ensemble), self.write_quorum, self.ack_quorum)

    @property
    def replicated(self) -> bool:
        return len(self.ensemble) > 1

    def to_json(self) -> bytes:
        value: dict[str, object] = {
            "leader": self.leader,
            "epoch": self.epoch,
            "ensemble": list(self.ensemble),
            "since_ms": self.since_ms,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
        }
        if self.replicated:
            value["current_ledger"] = self.current_ledger
            value["closed_ledgers"] = {str(k): v for k, v in self.closed_ledgers.items()}
            value["data_dirs"] = dict(self.data_dirs)
            if self.leaving:
                value["leaving"] = self.leaving
        return json.dumps(value, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> OwnershipRecord:
        """A record as written; one from before quorums were recorded (one copy, the
        leader's) reads as write and ack quorum 1."""
        value = json.loads(raw)
        return cls(
            value["leader"],
            value["epoch"],
            tuple(value["ensemble"]),
            value["since_ms"],
            value.get("write_quorum", 1),
            value.get("ack_quorum", 1),
            value.get("current_ledger", -1),
            {int(k): v for k, v in value.get("closed_ledgers", {}).items()},
            dict(value.get("data_dirs", {})),
            value.get("leaving", ""),
        )


class RecordChangedError(BrokerError):
    """The topic's record no longer says what this broker's change expected (another
    broker took the topic, or its epoch moved): look the topic up again."""

    code = "TopicFenced"


class NotOwnerError(BrokerError):
    """Another live broker owns the topic; the client asks it instead."""

    code = "NotOwner"

    def __init__(self, topic: TopicName, owner: BrokerInfo):
        self.owner = owner
        super().__init__(
            f"topic {topic} is owned by broker {owner.grpc_address}, not this one: "
            f"look the topic up and connect to {owner.grpc_address}"
        )


class TopicUnavailableError(BrokerError):
    """The topic's owner is not live; retry once it is back."""

    code = "TopicUnavailable"

    def __init__(self, topic: TopicName, owner: str, gone_since_ms: int | None):
        self.owner = owner
        since = (
            "its registration was never seen by this broker"
            if gone_since_ms is None
            else "not live since "
            + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(gone_since_ms / 1000))
        )
        super().__init__(
            f"topic {topic} is unavailable: its owner, broker {owner}, is down ({since}); "
            f"its data is on that broker's disk and comes back with it"
        )


class OwnershipUnavailableError(TopicUnavailableError):
    """The topic's record cannot be read or written now (the metadata store is
    unreachable or this broker's session is not CONNECTED); retry once it is back."""

    def __init__(self, topic: TopicName, why: str):
        self.owner = ""
        Exception.__init__(
            self,
            f"topic {topic} is unavailable: {why}; topics already placed are served as "
            f"before, and this one can be served once the metadata store is back: retry",
        )


class FencedLookupError(BrokerError):
    """This broker's cluster session is lost and it cannot read who serves the topic
    now: ask another broker (the client does, at once)."""

    code = "BrokerUnavailable"

    def __init__(self, topic: TopicName, broker_id: str, why: str):
        super().__init__(
            f"broker {broker_id} cannot name the owner of topic {topic}: its cluster "
            f"metadata session is lost (another broker may have taken the topic) and "
            f"{why}; ask another broker of the cluster"
        )


class TopicOwnership:
    """This broker's view of the cluster's topic ownership (see the module docstring);
    the cluster's TopicPlacement (topics/placement.py)."""

    def __init__(
        self,
        store: ClusterMetadataStore,
        cluster: str,
        persistence_of: Callable[[str], PersistencePolicy] = lambda namespace: SINGLE_COPY,
    ):
        """`persistence_of(namespace)`: the policy a topic of that namespace is placed
        with (the namespace's, else the broker's default)."""
        self.store = store
        self.cluster = cluster
        self.persistence_of = persistence_of
        # This broker's id, known once its gRPC port is bound (start()); until then
        # calls for topics not on this broker's disk wait.
        self.broker_id = ""
        self._started = asyncio.Event()
        self._records: dict[str, OwnershipRecord] = {}
        # Replicated topics whose cached record a lost session made unsure: until it
        # is read again, a call for one while the session does not hold is answered
        # from a bounded read, never from this broker's old belief (check()).
        self._unsure: set[str] = set()
        self._live: dict[str, BrokerInfo] = {}
        # Broker id -> when this broker saw it leave (ms); for TopicUnavailable.
        self._gone_since: dict[str, int] = {}
        self._tasks: list[asyncio.Task] = []
        # Topic (full name, as every key here) -> its leader, for every record seen;
        # and topics led per broker.
        self._leader_of: dict[str, str] = {}
        self._led: dict[str, int] = {}
        # Takes and recovers replicated topics (ledger_recovery.py); set in a cluster
        # once this broker's copies and peers are known.
        self.recovery = None
        # Called with a topic whose record now names another broker (a takeover).
        self.on_taken: Callable[[TopicName], None] = lambda name: None
        # Called with a replicated topic this broker is to take, its leader gone.
        self.on_successor: Callable[[TopicName], None] = lambda name: None
        # Called with a topic whose record now names this broker leader where another
        # was (a hand-over to it, or its own takeover).
        self.on_handed: Callable[[TopicName], None] = lambda name: None
        # Called with a broker that (re)joined, perhaps on another data dir.
        self.on_member_back: Callable[[BrokerInfo], None] = lambda info: None
        # Called with a topic whose record changed (another broker's change, or this one's).
        self.on_changed: Callable[[TopicName], None] = lambda name: None
        # Called with the id of a broker that left the cluster (its lease lapsed).
        self.on_gone: Callable[[str], None] = lambda broker_id: None
        # Brokers being decommissioned (metadata/draining.py): no placement or
        # ensemble change chooses them. Kept current by refresh_draining().
        self.draining: frozenset[str] = frozenset()
        # When start() ran: a member never seen live counts as gone since then.
        self.started_ms = 0

    async def start(self, broker_id: str) -> None:
        """As broker `broker_id`: watch the ownership and broker prefixes, read the
        live brokers and count the records; calls waiting for it go on."""
        assert broker_id and not self._started.is_set()
        self.broker_id = broker_id
        self.started_ms = int(time.time() * 1000)
        self.store.add_session_listener(self._on_session_event)
        records = await self.store.watch(ownership_dir(self.cluster))
        brokers = await self.store.watch(brokers_dir(self.cluster))
        self._tasks = [
            asyncio.create_task(self._follow_records(records), name="ownership-records"),
            asyncio.create_task(self._follow_brokers(brokers), name="ownership-brokers"),
        ]
        await self._read_brokers()
        await self._count_records()
        self._started.set()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            # Another broker may take this one's replicated topics while it is away,
            # and the watch may not tell it before it serves again: read those records
            # afresh. (A topic of one copy never moves: its record stays true.)
            for topic, record in list(self._records.items()):
                if record.replicated:
                    del self._records[topic]
                    self._unsure.add(topic)

    async def _count_records(self) -> None:
        root = ownership_dir(self.cluster)
        for tenant in await self.store.children(root):
            for namespace in await self.store.children(f"{root}/{tenant}"):
                for topic in await self.store.children(f"{root}/{tenant}/{namespace}"):
                    await self._count(f"persistent://{tenant}/{namespace}/{topic}")

    async def _count(self, topic: str) -> None:
        """Count the record of `topic` (its full name) once."""
        if topic in self._leader_of:
            return
        result = await self.store.get(ownership_path(self.cluster, TopicName.parse(topic)))
        if result is not None and topic not in self._leader_of:
            self._counted(topic, OwnershipRecord.from_json(result.value).leader)

    def _counted(self, topic: str, leader: str) -> None:
        self._leader_of[topic] = leader
        self._led[leader] = self._led.get(leader, 0) + 1

    def _uncounted(self, topic: str) -> None:
        leader = self._leader_of.pop(topic, None)
        if leader is not None:
            self._led[leader] -= 1

    def leaders(self) -> dict[str, str]:
        """Every topic whose record this broker has seen (full name) -> its leader's id."""
        return dict(self._leader_of)

    def led_by(self, broker_id: str) -> int:
        """How many topics' records name `broker_id` as their leader."""
        return self._led.get(broker_id, 0)

    def live_brokers(self) -> list[BrokerInfo]:
        """The cluster's live brokers, as this broker last read them."""
        return list(self._live.values())

    def gone_since_ms(self, broker_id: str) -> int | None:
        """When this broker saw `broker_id` leave (ms), None if it never did."""
        return self._gone_since.get(broker_id)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _read_brokers(self) -> None:
        live = {info.broker_id: info for info in await list_brokers(self.store, self.cluster)}
        back = [
            info
            for broker_id, info in live.items()
            if broker_id != self.broker_id
            and (
                broker_id not in self._live or self._live[broker_id].data_dir_id != info.data_dir_id
            )
        ]
        now_ms = int(time.time() * 1000)
        for broker_id in self._live.keys() - live.keys():
            self._gone_since.setdefault(broker_id, now_ms)
        for broker_id in live:
            self._gone_since.pop(broker_id, None)
        self._live = live
        for info in back:
            self.on_member_back(info)

    async def _follow_records(self, watch: Watch) -> None:
        prefix = ownership_dir(self.cluster) + "/"
        while True:
            try:
                async for notification in watch:
                    topic = "persistent://" + notification.path[len(prefix) :]
                    self._records.pop(topic, None)
                    if notification.type is NotificationType.MODIFIED:
                        # Its leader may have changed (a takeover): count it again.
                        before = self._leader_of.get(topic)
                        self._uncounted(topic)
                        await self._count(topic)
                        leader = self._leader_of.get(topic)
                        if leader is not None and leader != self.broker_id:
                            self.on_taken(TopicName.parse(topic))
                        elif leader is not None and before not in (None, self.broker_id):
                            self.on_handed(TopicName.parse(topic))
                        self.on_changed(TopicName.parse(topic))
                    elif notification.type is NotificationType.CREATED:
                        await self._count(topic)
                    elif notification.type is NotificationType.DELETED:
                        self._uncounted(topic)
                return  # the store closed
            except WatchOverflow:
                # Changes were missed: watch again, then forget every cached record
                # (each is read again on its next use).
                log.warning("ownership watch fell behind; re-reading records on use")
                watch = await self.store.watch(ownership_dir(self.cluster))
                self._records.clear()

    async def _follow_brokers(self, watch: Watch) -> None:
        while True:
            try:
                async for notification in watch:
                    assert isinstance(notification, Notification)
                    gone = None
                    if notification.type is NotificationType.DELETED:
                        gone = notification.path.rpartition("/")[2]
                        self._gone_since.setdefault(gone, int(time.time() * 1000))
                    await self._read_brokers()
                    if gone is not None:
                        self.on_gone(gone)
                        await self._succeed(gone)
                return  # the store closed
            except WatchOverflow:
                watch = await self.store.watch(brokers_dir(self.cluster))
                await self._read_brokers()

    async def _succeed(self, gone: str) -> None:
        """`gone` left the cluster: the replicated topics it led whose next server is
        this broker are taken now (on_successor), not on their first use, so they are
        served again as soon as they can be."""
        for topic, leader in list(self._leader_of.items()):
            if leader != gone:
                continue
            name = TopicName.parse(topic)
            try:
                record = await self.record(name)
            except OwnershipUnavailableError:
                return
            if (
                record is not None
                and record.replicated
                and self.serving_id(record) == self.broker_id
            ):
                self.on_successor(name)

    @property
    def started(self) -> bool:
        """Whether start() has run."""
        return self._started.is_set()

    async def wait_started(self) -> None:
        """Return once start() has run (this broker's id and the live brokers are known)."""
        await self._started.wait()

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return self._live.get(broker_id)

    async def record(self, name: TopicName) -> OwnershipRecord | None:
        """The topic's record (cached), None if it has none; OwnershipUnavailableError
        when it is not cached and the store cannot be read."""
        key = str(name)
        record = self._records.get(key)
        if record is None:
            try:
                result = await self.store.get(ownership_path(self.cluster, name))
            except MetadataStoreUnavailable as error:
                raise OwnershipUnavailableError(
                    name, f"its ownership record cannot be read: {error}"
                ) from None
            if result is None:
                return None
            record = OwnershipRecord.from_json(result.value)
            self._records[key] = record
            self._unsure.discard(key)
        return record

    async def place(self, name: TopicName, here: bool = False) -> OwnershipRecord:
        """The topic's record, creating it on the least-loaded live broker (on this
        one when `here`) if it has none."""
        return (await self.place_new(name, here))[0]

    async def place_new(
        self, name: TopicName, here: bool = False, policy: PersistencePolicy | None = None
    ) -> tuple[OwnershipRecord, bool]:
        """(the topic's record, whether this call created it). A new record gets an
        ensemble by `policy`, by default its namespace's (else the broker default)."""
        await self._started.wait()
        record = await self.record(name)
        if record is not None:
            return record, False
        state = self.store.session_state
        if state is not SessionState.CONNECTED or not self.store.session_holds():
            raise OwnershipUnavailableError(
                name,
                f"it has no owner yet, and this broker places none while its session with "
                f"the metadata store {self.store.description} is {state.value}",
            )
        policy = policy or self.persistence_of(name.namespace_path)
        ensemble = self.choose_ensemble(
            f"topic {name}", name.namespace_path, policy, self.broker_id if here else None
        )
        leader = ensemble[0]
        record = OwnershipRecord(
            leader,
            0,
            ensemble,
            int(time.time() * 1000),
            policy.write_quorum,
            policy.ack_quorum,
            data_dirs=self._data_dirs(ensemble) if len(ensemble) > 1 else {},
        )
        try:
            await self.store.put(ownership_path(self.cluster, name), record.to_json(), -1)
        except MetadataStoreUnavailable as error:
            raise OwnershipUnavailableError(
                name, f"it has no owner yet and cannot be placed: {error}"
            ) from None
        except AlreadyExists:
            self._records.pop(str(name), None)
            record = await self.record(name)
            assert record is not None
            return record, False
        if str(name) not in self._leader_of:
            self._counted(str(name), leader)
        log.info("placed topic %s on broker %s", name, leader)
        self._records[str(name)] = record
        return record, True

    def choose_ensemble(
        self, what: str, namespace: str, policy: PersistencePolicy, leader: str | None = None
    ) -> tuple[str, ...]:
        """The ensemble of something placed now under `policy`, the leader first
        (`leader`, or the least loaded live broker); NotEnoughBrokersError naming
        `what` and `namespace` when fewer brokers are live than it asks for."""
        # Before any registration is read (a cluster's first broker) it is alone.
        live = (self._live.keys() or {self.broker_id}) - self.draining
        traffic = {
            broker_id: float(info.load.get("loadScore", 0.0))
            for broker_id, info in self._live.items()
        }
        ensemble = choose_ensemble(live, self._led, policy.ensemble_size, leader, traffic)
        if ensemble is None:
            raise NotEnoughBrokersError(what, namespace, len(live), policy)
        return ensemble

    async def forget(self, name: TopicName) -> None:
        """Delete the topic's record (its topic was deleted on this broker, its leader)."""
        self._records.pop(str(name), None)
        with contextlib.suppress(NotFound):
            await self.store.delete(ownership_path(self.cluster, name))

    # ------------------------------------------------------------ replicated topics

    async def change_record(
        self,
        name: TopicName,
        change: Callable[[OwnershipRecord], OwnershipRecord | None],
    ) -> OwnershipRecord:
        """Apply `change` to the topic's current record by compare-and-set, reading it
        again while another broker's change wins the race. `change` returns the new
        record, or raises (RecordChangedError) when the record is no longer one it may
        change. The store's failures come out as OwnershipUnavailableError."""
        path = ownership_path(self.cluster, name)
        while True:
            try:
                result = await self.store.get(path)
                if result is None:
                    raise RecordChangedError(f"topic {name} has no ownership record any more")
                new = change(OwnershipRecord.from_json(result.value))
                assert new is not None
                await self.store.put(path, new.to_json(), result.stat.version)
            except BadVersion:
                continue
            except MetadataStoreUnavailable as error:
                raise OwnershipUnavailableError(
                    name, f"its ownership record cannot be changed: {error}"
                ) from None
            self._records[str(name)] = new
            return new

    async def refresh_draining(self) -> frozenset[str]:
        """Read which brokers are being decommissioned (`draining`)."""
        self.draining = frozenset(await list_draining(self.store, self.cluster))
        return self.draining

    def choose_replacement(
        self, ensemble: tuple[str, ...], chosen: Mapping[str, int] | None = None
    ) -> str | None:
        """The live broker, not draining and not in `ensemble`, to hold a copy in place
        of a lost member: the least loaded (fewest topics led plus `chosen`, the copies
        the caller has just placed on it, then the lowest id); None when there is none."""
        candidates = self._live.keys() - set(ensemble) - self.draining
        if not candidates:
            return None
        chosen = chosen or {}
        return min(
            candidates,
            key=lambda broker: (self._led.get(broker, 0) + chosen.get(broker, 0), broker),
        )

    async def replace_member(
        self, name: TopicName, epoch: int, gone: str, member: str
    ) -> OwnershipRecord:
        """Name `member` in the topic's ensemble instead of `gone`, by compare-and-set
        at `epoch` with this broker its leader (RecordChangedError otherwise). Its copy
        is not counted on (COPYING_PREFIX) until it holds everything and its writer
        records its data dir."""

        def replaced(record: OwnershipRecord) -> OwnershipRecord:
            if record.leader != self.broker_id or record.epoch != epoch:
                raise RecordChangedError(
                    f"topic {name} is led by broker {record.leader} at epoch {record.epoch}, "
                    f"not by this one at epoch {epoch}"
                )
            if gone not in record.ensemble or member in record.ensemble:
                raise RecordChangedError(
                    f"topic {name}: its ensemble {list(record.ensemble)} changed meanwhile"
                )
            info = self._live.get(member)
            dirs = {m: d for m, d in record.data_dirs.items() if m != gone}
            dirs[member] = COPYING_PREFIX + (info.data_dir_id if info is not None else "")
            return replace(
                record,
                ensemble=tuple(member if m == gone else m for m in record.ensemble),
                data_dirs=dirs,
            )

        return await self.change_record(name, replaced)

    async def take(self, name: TopicName) -> OwnershipRecord:
        """Make this broker the topic's leader at the next epoch (a member of its
        ensemble, whose leader is this broker or not live): the epoch every member
        is fenced with before this broker serves the topic."""

        def take(record: OwnershipRecord) -> OwnershipRecord:
            if self.broker_id not in record.ensemble:
                raise RecordChangedError(
                    f"topic {name}: broker {self.broker_id} is not in its ensemble "
                    f"{list(record.ensemble)}"
                )
            serving = self.serving_id(record)
            if serving != self.broker_id:
                raise RecordChangedError(
                    f"topic {name} is served by broker {serving} (epoch {record.epoch}), "
                    f"not this one"
                    + (
                        ""
                        if self.holds_its_copy(record, self.broker_id)
                        else ": this broker's data dir is not the one its copy was on"
                    )
                )
            return replace(
                record,
                leader=self.broker_id,
                epoch=record.epoch + 1,
                since_ms=int(time.time() * 1000),
            )

        return await self.change_record(name, take)

    # ------------------------------------------------------------ TopicPlacement

    async def is_placed(self, name: TopicName) -> bool:
        return await self.record(name) is not None

    async def needs_placing(self, name: TopicName) -> bool:
        return await self.record(name) is None

    async def claim(self, name: TopicName, persistence: PersistencePolicy | None = None) -> Claim:
        record, new = await self.place_new(name, policy=persistence)
        return Claim(here=self.serving_id(record) == self.broker_id, new=new)

    def placed_names(self, prefix: str = "") -> set[str]:
        return {topic for topic in self._leader_of if topic.startswith(prefix)}

    async def placement_of(self, name: TopicName, place: bool) -> Placement | None:
        record = await self.record(name)
        if record is None:
            if not place:
                return None
            record = await self.place(name)
        serving = self.serving_id(record)
        return Placement(
            serving,
            record.epoch,
            serving == self.broker_id,
            record.ensemble,
            record.persistence,
        )

    async def serving_broker(self, name: TopicName) -> BrokerInfo | None:
        cached = self._records.get(str(name))
        if not self.store.session_holds() and (cached is None or cached.replicated):
            return await self._serving_while_fenced(name)
        record = await self.place(name)
        if self.serving_id(record) == self.broker_id:
            return None
        return self.owner_of(name, record)

    async def _serving_while_fenced(self, name: TopicName) -> BrokerInfo | None:
        """serving_broker while this broker's session does not hold: the other broker
        the topic's record names, read afresh; never this one (FencedLookupError)."""
        path = ownership_path(self.cluster, name)
        try:
            async with asyncio.timeout(LOOKUP_READ_TIMEOUT_S):
                result = await self.store.get(path)
        except (MetadataStoreUnavailable, TimeoutError) as error:
            why = f"its record cannot be read ({str(error) or 'no answer in time'})"
            raise FencedLookupError(name, self.broker_id, why) from None
        if result is None:
            raise FencedLookupError(name, self.broker_id, "the topic has no owner yet")
        record = OwnershipRecord.from_json(result.value)
        serving = self.serving_id(record)
        if not record.replicated:
            # Its one copy is on its leader's disk: no other broker can serve it.
            return None if serving == self.broker_id else self.owner_of(name, record)
        owner = self._live.get(serving)
        if serving == self.broker_id or owner is None:
            raise FencedLookupError(
                name,
                self.broker_id,
                f"its record names broker {record.leader} at epoch {record.epoch}, not "
                f"known live here",
            )
        return owner

    def _data_dirs(self, members: tuple[str, ...]) -> dict[str, str]:
        """Each member's registered data dir id (those not known left out)."""
        dirs = {}
        for member in members:
            info = self._live.get(member)
            if info is not None and info.data_dir_id:
                dirs[member] = info.data_dir_id
        return dirs

    def holds_its_copy(self, record: OwnershipRecord, member: str) -> bool:
        """Whether `member` is live on the data dir the record knows it by (a record
        that knows none for it takes it as it is)."""
        info = self._live.get(member)
        if info is None:
            return False
        known = record.data_dirs.get(member)
        return not known or info.data_dir_id == known

    def answers_for_its_copy(self, record: OwnershipRecord, member: str) -> bool:
        """Whether `member`'s answer to a fence tells what it acknowledged: it holds its
        copy (holds_its_copy), or it is being sent one on the data dir it is still
        registered with (a new member's partial copy is what the writer sent it, all
        it can have acknowledged; one back on another data dir says nothing)."""
        if self.holds_its_copy(record, member):
            return True
        info = self._live.get(member)
        known = record.data_dirs.get(member, "")
        return (
            info is not None
            and bool(info.data_dir_id)
            and known == COPYING_PREFIX + info.data_dir_id
        )

    def serving_id(self, record: OwnershipRecord) -> str:
        """The broker that serves (or is to serve) the topic: its leader while that is
        live (on the data dir the record knows, when replicated) or this broker; else,
        for a replicated topic, the first member of its ensemble live on its known data
        dir (in the ensemble's order, so every broker names the same one), which takes
        it on its first use; else the leader (not live)."""
        leader = record.leader
        if not record.replicated:
            return leader
        if self.holds_its_copy(record, leader):
            return leader
        for member in record.ensemble:
            if member != leader and self.holds_its_copy(record, member):
                return member
        return leader

    def owner_of(self, name: TopicName, record: OwnershipRecord) -> BrokerInfo:
        """The live registration of the broker serving the topic (serving_id), which is
        another broker; TopicUnavailableError if it is not live."""
        serving = self.serving_id(record)
        owner = self._live.get(serving)
        if owner is None:
            raise TopicUnavailableError(name, record.leader, self._gone_since.get(record.leader))
        return owner

    async def recover(self, name: TopicName):
        """TopicPlacement.recover: see ledger_recovery.py."""
        await self._started.wait()
        if self.recovery is None:
            return None
        return await self.recovery.recover(name)

    async def check(self, name: TopicName, create: bool, on_disk: bool) -> bool:
        """Whether this broker owns `name` (True), or it has no record and `create`
        is False (False: the caller's own not-found handling applies). Raises
        NotOwnerError or TopicUnavailableError when another broker owns it.

        `on_disk`: the topic's files are on this broker. In a cluster a broker makes
        files only for topics it leads, so before start() (the broker's recovery
        loads such topics) those are served, and calls for any other wait."""
        if not self._started.is_set():
            if on_disk:
                return True
            await self._started.wait()
        key = str(name)
        if (key in self._unsure or key not in self._records) and not self.store.session_holds():
            # Fenced, it may have been taken meanwhile: never served here on the old
            # belief, nor held up by a store this broker may not reach (a record not
            # cached would be read, or placed, with the store's own timeout).
            owner = await self._serving_while_fenced(name)
            if owner is None:
                return True
            raise NotOwnerError(name, owner)
        try:
            record = await (self.place(name, here=on_disk) if create else self.record(name))
        except OwnershipUnavailableError:
            if on_disk:
                return True  # its files are here: this broker leads it
            raise
        if record is None:
            return False
        if self.serving_id(record) == self.broker_id:
            return True
        raise NotOwnerError(name, self.owner_of(name, record))
