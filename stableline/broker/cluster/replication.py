"""The writer's replication of one topic to the other brokers of its ensemble.

`EnsembleReplication` is the ManagedLedger's Replication (managed_ledger/replication.py)
in a cluster: one per topic per epoch, made by the topic's recovery
(ledger_recovery.py) once this broker has fenced the ensemble at that epoch.

- One `FollowerLink` per other member sends it, in order, every batch the writer
  writes (the batch's own frames, no copy), with the topic's epoch and the LAC.
  A member that is behind (it missed batches while it was away, or a resend cut
  its tail) is first sent what it lacks, read back from the writer's own files:
  a returning member catches up by itself and counts again.
- A batch is confirmed once `ack_quorum - 1` members hold it (the writer's own copy
  is the last one). When fewer members can hold it than that, it is refused at once
  with NotEnoughReplicasError, which the client retries (Kafka's
  NOT_ENOUGH_REPLICAS): no unclean quorum, ever.
- A member that answers the topic was fenced at a higher epoch means another broker
  has taken the topic: every batch is refused from then on, and `on_fenced` lets
  the broker stop serving it.
- New ledgers are made the topic's current ledger in its record by compare-and-set
  on the epoch (`open_ledger`): a writer whose epoch has passed cannot start one.
- Transaction-buffer snapshots go to every member in the background, best effort,
  one `SnapshotSender` each (snapshot_sender.py); a member back from away gets the
  whole snapshot with its cursors.
- Retired (`retire`: the broker's write gate closed, so the topic is taken again
  before it is served here again), it calls no member again: what waits fails and
  every later write, cursor or trim is refused at once, so the topic's unload never
  waits for a member away, and no member hears this epoch after the gate reopens.
  (`close`, the ledger's, stops the links only: its cursors' last states still go.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from managed_ledger import Position, SnapshotCopy
from managed_ledger.replica import (
    ReplicaError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaState,
)
from managed_ledger.replication import ReplicationError
from stableline.broker.cluster.catch_up_throttle import CatchUpThrottle
from stableline.broker.cluster.peers import ReplicaPeers
from stableline.broker.cluster.snapshot_sender import SnapshotSender
from stableline.broker.errors import BrokerError

log = logging.getLogger(__name__)

# How long a batch waits for its quorum before it is refused (the producer retries).
REPLICATE_TIMEOUT_S = 5.0
# A member that failed is tried again after this long, then twice as long, up to the max.
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
# At most this many bytes of old entries go in one catch-up call.
CATCH_UP_BYTES = 4 * 1024 * 1024


class NotEnoughReplicasError(ReplicationError, BrokerError):
    """Fewer members of the topic's ensemble hold the write than its ack quorum:
    nothing was kept; retry (writes resume once enough members are back)."""

    code = "NotEnoughReplicas"


class ReplicaFencedOutError(ReplicationError, BrokerError):
    """Another broker took the topic (a member was fenced at a higher epoch)."""

    code = "TopicFenced"


@dataclass(slots=True)
class _Batch:
    ledger_id: int
    first_entry_id: int
    frames: list[bytes]
    last_add_confirmed: Position
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def end(self) -> int:
        return self.first_entry_id + len(self.frames)


class FollowerLink:
    """Sends one member every batch, in order; see the module docstring."""

    def __init__(
        self,
        address: str,
        topic: str,
        epoch: int,
        held: ReplicaState | None,
        peers: ReplicaPeers,
        read_frames: Callable[[int, int, int], list[bytes]],
        confirmed: Callable[[], Position],
        ledger_ids: Callable[[], list[int]],
        on_fenced: Callable[[ReplicaFencedError], None],
        on_remade: Callable[[str], None] | None = None,
        send_cursors: Callable[[str], Awaitable[None]] = lambda address: _nothing(),
        throttle: CatchUpThrottle | None = None,
    ):
        """`on_remade(address)`: called once, when a member whose copy is being made
        again (its disk was lost, or it replaced another member) holds everything
        confirmed; `throttle`: the broker's bound on old entries sent (none: unbound)."""
        self.address = address
        self._topic = topic
        self._epoch = epoch
        self._peers = peers
        self._read_frames = read_frames
        self._confirmed = confirmed
        self._ledger_ids = ledger_ids
        self._send_cursors = send_cursors
        self._on_fenced = on_fenced
        self._on_remade = on_remade
        self._throttle = throttle
        # Bytes of old entries, read back from the files, sent to the member.
        self.catch_up_bytes = 0
        # What the member holds: (ledger, entries in it); None until known.
        self.held: tuple[int, int] | None = None
        if held is not None:
            self.held = (held.ledger_id, held.entry_count)
        self._queue: deque[_Batch] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.up = True
        self._backoff_s = RETRY_BACKOFF_S

    def send(self, batch: _Batch) -> asyncio.Future:
        """Queue `batch`; the future is done (True) once the member holds it, or
        (False) when this link cannot deliver it now (the member is away: it is sent
        what it lacks from the files once it answers again)."""
        # A batch at entry ids already queued replaces them: the writer refused those.
        while self._queue and (
            self._queue[-1].ledger_id == batch.ledger_id
            and self._queue[-1].first_entry_id >= batch.first_entry_id
        ):
            dropped = self._queue.pop()
            if not dropped.done.done():
                dropped.done.set_result(False)
        mine = _Batch(batch.ledger_id, batch.first_entry_id, batch.frames, batch.last_add_confirmed)
        if not self.up:
            mine.done.set_result(False)
            return mine.done
        self._queue.append(mine)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(), name=f"replicate:{self._topic}:{self.address}"
            )
        return mine.done

    @property
    def remaking(self) -> bool:
        """Its copy is being made again (its disk was lost) and it holds not all yet."""
        return self._on_remade is not None

    def _holds_confirmed(self) -> bool:
        confirmed = self._confirmed()
        held = self.held
        return held is not None and (
            held[0] > confirmed.ledger_id
            or (held[0] == confirmed.ledger_id and held[1] > confirmed.entry_id)
            or (confirmed.entry_id < 0 and held[0] >= confirmed.ledger_id)
        )

    def start_catching_up(self) -> None:
        """Treat the member as away until it holds what is confirmed (a member that
        did not answer the fence, or whose copy is unknown)."""
        self.up = False
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(), name=f"replicate:{self._topic}:{self.address}"
            )

    def missed_cursors(self) -> None:
        """A cursor write to the member failed: it is away until it answers again, and
        then sent every cursor (a cursor is otherwise written again only with its next
        change, which may never come)."""
        if self.up and self._task is not None:
            self.up = False
            self._wake.set()

    def remake(self, on_remade: Callable[[str], None]) -> None:
        """Forget what the member held: it is asked, then sent every ledger it lacks."""
        self.held = None
        self._on_remade = on_remade
        self.start_catching_up()

    def rewind(self, ledger_id: int, entry_id: int) -> None:
        """The writer refused entries from `entry_id` on: whatever the member kept of
        them is overwritten by the next batch, which it must be sent whole."""
        held = self.held
        if held is not None and held[0] == ledger_id and held[1] > entry_id:
            self.held = (ledger_id, entry_id)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for batch in self._queue:
            if not batch.done.done():
                batch.done.set_result(False)
        self._queue.clear()

    async def _run(self) -> None:
        while True:
            # A member being remade that took the last batch may still lack what was
            # confirmed while it caught up: with no batch to come (a quiet topic) it is
            # brought up to that from the files, or it would never count as remade.
            finishing = (
                self.up and self.remaking and not self._queue and not self._holds_confirmed()
            )
            if self.up and not self._queue and not finishing:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.up and not finishing:
                batch = self._queue[0]
            else:
                # Away: bring it up to what is confirmed, from the files, until it answers.
                confirmed = self._confirmed()
                batch = _Batch(confirmed.ledger_id, confirmed.entry_id + 1, [], confirmed)
            try:
                await self._deliver(batch)
            except ReplicaFencedError as error:
                self._on_fenced(error)
                self.close()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # unreachable, refused: try again later
                if self.up:
                    log.warning("%s: replica %s is away: %s", self._topic, self.address, error)
                self.up = False
                for queued in self._queue:
                    if not queued.done.done():
                        queued.done.set_result(False)
                self._queue.clear()
                # A retry's backoff, not a wait for anything: nothing hurries it.
                await asyncio.sleep(self._backoff_s)
                self._backoff_s = min(self._backoff_s * 2, RETRY_BACKOFF_MAX_S)
                continue
            if not self.up:
                # Cursors written while it was away never reached it: all of them now,
                # before it counts again (a subscription it lacks would not hold back
                # retention, were it to take the topic).
                try:
                    await self._send_cursors(self.address)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    log.warning("%s: cursors not sent to %s: %r", self._topic, self.address, error)
                    await asyncio.sleep(self._backoff_s)
                    continue
                log.info("%s: replica %s is back and caught up", self._topic, self.address)
                self.up = True
            if self.remaking and self._holds_confirmed():
                log.info("%s: replica %s holds every ledger again", self._topic, self.address)
                assert self._on_remade is not None
                self._on_remade(self.address)
                self._on_remade = None
            self._backoff_s = RETRY_BACKOFF_S
            if self._queue and self._queue[0] is batch:
                self._queue.popleft()
            if not batch.done.done():
                batch.done.set_result(True)

    async def _deliver(self, batch: _Batch) -> None:
        """Make the member hold `batch` and everything before it."""
        asked_again = False
        while True:
            try:
                if self.held is None:
                    # Not known (it did not answer the fence): ask it, at this epoch.
                    state = await self._peers.fence_replica(self.address, self._topic, self._epoch)
                    self.held = (state.ledger_id, state.entry_count)
                held = self.held
                if held[0] < 0:
                    # It holds nothing (a new member, or one whose disk was lost): every
                    # ledger the writer has goes to it, from the first.
                    self.held = (self._next_ledger_after(-1, batch.ledger_id), 0)
                    continue
                if held[0] > batch.ledger_id:
                    # It holds a ledger the writer opened and has not confirmed into yet.
                    if batch.frames:
                        raise ReplicaError(f"replica {self.address} is ahead of the writer")
                    return
                if held[0] < batch.ledger_id:
                    # It is behind in an older ledger: finish that one, then the next.
                    frames = self._read_frames(held[0], held[1], held[1] + 1_000_000)
                    frames = _within(frames, CATCH_UP_BYTES)
                    if not frames:
                        self.held = (self._next_ledger_after(held[0], batch.ledger_id), 0)
                        continue
                    await self._catch_up(held[0], held[1], frames, batch.last_add_confirmed)
                    continue
                start = held[1]
                if start < batch.first_entry_id:
                    frames = _within(
                        self._read_frames(batch.ledger_id, start, batch.first_entry_id - 1),
                        CATCH_UP_BYTES,
                    )
                    if not frames:
                        raise ReplicaError(
                            f"entries {start}..{batch.first_entry_id - 1} of ledger "
                            f"{batch.ledger_id} cannot be read back for replica {self.address}"
                        )
                    await self._catch_up(batch.ledger_id, start, frames, batch.last_add_confirmed)
                    continue
                if batch.frames:
                    await self._call(
                        batch.ledger_id,
                        batch.first_entry_id,
                        batch.frames,
                        batch.last_add_confirmed,
                    )
                return
            except ReplicaError:
                if self.held is not None or asked_again:
                    raise
                # Refused for what it holds: ask it (the loop's first step), once.
                asked_again = True

    def ledgers_behind(self) -> int:
        """The writer's ledgers the member does not hold all of yet (0 once it is up:
        what it lacks then is only what is being sent)."""
        if self.up:
            return 0
        held = self.held
        ledgers = self._ledger_ids()
        if held is None or held[0] < 0:
            return len(ledgers)
        return sum(1 for ledger_id in ledgers if ledger_id >= held[0])

    async def _catch_up(
        self, ledger_id: int, first_entry_id: int, frames: list[bytes], lac: Position
    ) -> None:
        """Send old entries read back from the files, within the broker's rate."""
        size = sum(len(frame) for frame in frames)
        if self._throttle is not None:
            await self._throttle.acquire(size)
        await self._call(ledger_id, first_entry_id, frames, lac)
        self.catch_up_bytes += size

    def _next_ledger_after(self, ledger_id: int, upto: int) -> int:
        """The writer's first ledger after `ledger_id` (`upto` when none is before it)."""
        following = [i for i in self._ledger_ids() if ledger_id < i < upto]
        return min(following, default=upto)

    async def _call(
        self, ledger_id: int, first_entry_id: int, frames: list[bytes], lac: Position
    ) -> None:
        try:
            state = await self._peers.replicate(
                self.address,
                self._topic,
                self._epoch,
                ledger_id,
                first_entry_id,
                frames,
                lac,
                timeout_s=REPLICATE_TIMEOUT_S,
            )
        except ReplicaGapError as gap:
            self.held = (ledger_id, gap.held)
            return
        except ReplicaFencedError:
            raise
        except ReplicaError:
            # Refused for what it holds (the writer's idea of it was wrong): the next
            # try asks it again, rather than resend what it refuses for good.
            self.held = None
            raise
        self.held = (state.ledger_id, state.entry_count)


def _within(frames: list[bytes], max_bytes: int) -> list[bytes]:
    """The first frames whose bytes stay within max_bytes (at least one)."""
    total = 0
    for index, frame in enumerate(frames):
        total += len(frame)
        if total > max_bytes and index > 0:
            return frames[:index]
    return frames


class EnsembleReplication:
    """The Replication of one topic at one epoch; see the module docstring."""

    def __init__(
        self,
        topic: str,
        epoch: int,
        ack_quorum: int,
        followers: dict[str, ReplicaState | None],
        peers: ReplicaPeers,
        open_ledger: Callable[[int, tuple[int, int] | None], Awaitable[None]],
        on_fenced: Callable[[], None] = lambda: None,
        next_ledger_id: int = 0,
        remake: frozenset[str] = frozenset(),
        on_remade: Callable[[str], None] = lambda address: None,
        throttle: CatchUpThrottle | None = None,
    ):
        """`followers`: each other member's address and what it held when fenced
        (None: it did not answer); `open_ledger(ledger_id)`: the record's
        compare-and-set, recording where `closing` ends (raises ReplicationError once
        the epoch has passed); `remake`: members whose copies are made again from the
        first ledger (their disks were lost), `on_remade(address)` once one holds all."""
        assert 1 <= ack_quorum <= len(followers) + 1, (ack_quorum, followers)
        self.topic = topic
        self.epoch = epoch
        self.ack_quorum = ack_quorum
        self.next_ledger_id = next_ledger_id
        self._on_remade = on_remade
        self._throttle = throttle
        self._open_ledger = open_ledger
        self._on_fenced = on_fenced
        self._peers = peers
        self._fenced: ReplicaFencedError | None = None
        self._retired = False
        self._read_frames: Callable[[int, int, int], list[bytes]] = _no_frames
        self._confirmed_position: Callable[[], Position] = lambda: Position(-1, -1)
        self._list_ledgers: Callable[[], list[int]] = list
        self._cursor_states: Callable[[], dict[str, bytes]] = dict
        self._whole_snapshot: Callable[[], SnapshotCopy | None] = lambda: None
        self._trims: set[asyncio.Future] = set()
        self.links = [
            self._link(address, held, on_remade if address in remake else None)
            for address, held in followers.items()
        ]
        self.snapshot_senders = {
            address: SnapshotSender(
                address, topic, epoch, peers, self._snapshot_whole, self._fenced_by
            )
            for address in followers
        }

    def _link(
        self,
        address: str,
        held: ReplicaState | None,
        on_remade: Callable[[str], None] | None,
    ) -> FollowerLink:
        return FollowerLink(
            address,
            self.topic,
            self.epoch,
            held,
            self._peers,
            self._frames,
            self._confirmed,
            self._ledger_ids,
            self._fenced_by,
            on_remade,
            self._send_all_cursors,
            self._throttle,
        )

    def attach(
        self,
        read_frames: Callable[[int, int, int], list[bytes]],
        confirmed: Callable[[], Position],
        ledger_ids: Callable[[], list[int]],
        cursor_states: Callable[[], dict[str, bytes]],
        whole_snapshot: Callable[[], SnapshotCopy | None],
    ) -> None:
        """Where lagging members' entries are read back from (the ledger's `frames`),
        how far the log is confirmed (its `last_confirmed`), which ledgers it has, and
        its cursors' states and transaction-buffer snapshot (sent whole to a member
        back from away)."""
        self._read_frames = read_frames
        self._confirmed_position = confirmed
        self._list_ledgers = ledger_ids
        self._cursor_states = cursor_states
        self._whole_snapshot = whole_snapshot
        for link in self.links:
            if not link.up or link.held is None:
                link.start_catching_up()

    def _confirmed(self) -> Position:
        return self._confirmed_position()

    def _ledger_ids(self) -> list[int]:
        return self._list_ledgers()

    def _snapshot_whole(self) -> SnapshotCopy | None:
        return self._whole_snapshot()

    async def _send_all_cursors(self, address: str) -> None:
        """What a member back from away missed besides entries: every cursor, the
        ledgers retention deleted meanwhile, and the transaction-buffer snapshot
        (whole, in the background: it is not needed for the member to count)."""
        states = self._cursor_states()
        if states:
            await self._peers.replicate_cursors(address, self.topic, self.epoch, states, [])
        ledgers = self._ledger_ids()
        if ledgers:
            await self._peers.trim_replica(address, self.topic, self.epoch, min(ledgers))
        sender = self.snapshot_senders.get(address)
        if sender is not None:
            sender.send_whole()

    def replicate_snapshot(self, copy: SnapshotCopy) -> None:
        """Send a snapshot written here to every member, in the background (a member
        away gets it whole on its return)."""
        if self._retired or self._fenced is not None:
            return
        for link in self.links:
            if link.up:
                self.snapshot_senders[link.address].offer(copy)

    def trimmed(self, below_ledger_id: int) -> None:
        if self._retired:
            return  # told when the next writer brings the member up to date
        for link in self.links:
            if link.up:
                task = asyncio.ensure_future(
                    self._peers.trim_replica(link.address, self.topic, self.epoch, below_ledger_id)
                )
                self._trims.add(task)
                task.add_done_callback(self._trim_done)

    def _trim_done(self, task: asyncio.Future) -> None:
        self._trims.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Told again when the member next comes back from away.
            log.warning(
                "%s: a replica did not delete old ledgers: %r", self.topic, task.exception()
            )

    def _frames(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        return self._read_frames(ledger_id, first, last)

    def _fenced_by(self, error: ReplicaFencedError) -> None:
        if self._fenced is None:
            self._fenced = error
            log.warning("%s: no longer its writer at epoch %d: %s", self.topic, self.epoch, error)
            self._on_fenced()

    def _check_not_fenced(self) -> None:
        if self._retired:
            raise ReplicaFencedOutError(
                f"topic {self.topic}: its writer at epoch {self.epoch} was retired (this "
                f"broker's write gate closed): look it up again and retry"
            )
        if self._fenced is not None:
            raise ReplicaFencedOutError(
                f"topic {self.topic} was taken by another broker ({self._fenced}): "
                f"look it up again and retry"
            )

    @property
    def members_up(self) -> int:
        """Members (this broker included) that took the last batch sent to them."""
        return 1 + sum(1 for link in self.links if link.up)

    def remake(self, address: str) -> None:
        """`address` is back on another data dir: its copy is made again from the first
        ledger, and `on_remade(address)` called once it holds everything confirmed."""
        for link in self.links:
            if link.address == address and not link.remaking:
                log.info(
                    "%s: replica %s is back on another data dir; making its copy again",
                    self.topic,
                    address,
                )
                link.remake(self._on_remade)

    def replace_member(self, gone: str, member: str) -> None:
        """The record's ensemble now names `member` instead of `gone` (at this epoch):
        `gone` is called no more, and `member` is sent every ledger it lacks, counting
        toward the quorum only once it holds everything confirmed (`on_remade`)."""
        assert member not in self.members, (member, self.members)
        for index, link in enumerate(self.links):
            if link.address != gone:
                continue
            link.close()
            self.snapshot_senders.pop(gone).close()
            new = self._link(member, None, self._on_remade)
            self.links[index] = new
            self.snapshot_senders[member] = SnapshotSender(
                member, self.topic, self.epoch, self._peers, self._snapshot_whole, self._fenced_by
            )
            if not self._retired and self._fenced is None:
                new.start_catching_up()
            log.info("%s: replica %s replaces %s; making its copy", self.topic, member, gone)
            return

    def follow(self, members: Iterable[str]) -> None:
        """The record's ensemble (at this epoch) now names `members` besides this
        broker (ensemble_swaps.py): one no longer named is called no more, and one
        new is sent every ledger it lacks, counting toward the quorum only once it
        holds everything confirmed (`on_remade`)."""
        wanted = list(members)
        for link in list(self.links):
            if link.address in wanted:
                continue
            link.close()
            self.links.remove(link)
            self.snapshot_senders.pop(link.address).close()
            log.info("%s: replica %s left the ensemble", self.topic, link.address)
        known = set(self.members)
        for address in wanted:
            if address in known:
                continue
            new = self._link(address, None, self._on_remade)
            self.links.append(new)
            self.snapshot_senders[address] = SnapshotSender(
                address, self.topic, self.epoch, self._peers, self._snapshot_whole, self._fenced_by
            )
            if not self._retired and self._fenced is None:
                new.start_catching_up()
            log.info("%s: replica %s joined the ensemble; making its copy", self.topic, address)

    @property
    def members(self) -> list[str]:
        """The other members' addresses (this broker, the writer, not among them)."""
        return [link.address for link in self.links]

    def describe(self) -> dict:
        """The writer's view of its copies: a member is up while it takes what it is
        sent; one away (or being made again) leaves the topic under-replicated, and
        `ledgersBehind` / `catchUpBytes` say how far its catching up has come."""
        return {
            "epoch": self.epoch,
            "ackQuorum": self.ack_quorum,
            "membersUp": self.members_up,
            "underReplicated": self.members_up < len(self.links) + 1,
            "ledgersBehind": self.ledgers_behind(),
            "replicas": {
                link.address: {
                    "up": link.up,
                    "held": None if link.held is None else list(link.held),
                    "beingRemade": link.remaking,
                    "ledgersBehind": link.ledgers_behind(),
                    "catchUpBytes": link.catch_up_bytes,
                    "snapshotsSent": self.snapshot_senders[link.address].sent,
                }
                for link in self.links
            },
        }

    def ledgers_behind(self) -> int:
        """Copies of ledgers the members lack (summed over the members)."""
        return sum(link.ledgers_behind() for link in self.links)

    async def open_ledger(self, ledger_id: int, closing: tuple[int, int] | None) -> None:
        self._check_not_fenced()
        await self._open_ledger(ledger_id, closing)

    async def replicate(
        self,
        ledger_id: int,
        first_entry_id: int,
        frames: list[bytes],
        last_add_confirmed: Position,
    ) -> None:
        self._check_not_fenced()
        needed = self.ack_quorum - 1
        if needed == 0:
            # Sent all the same, so the members keep up; nobody waits for them.
            for link in self.links:
                link.send(_Batch(ledger_id, first_entry_id, frames, last_add_confirmed))
            return
        if self.members_up < self.ack_quorum:
            self._refuse(
                f"{self.members_up} of its {len(self.links) + 1} replicas are up", sent=False
            )
        batch = _Batch(ledger_id, first_entry_id, frames, last_add_confirmed)
        pending = {link.send(batch) for link in self.links}
        # The links it went to: one taken out meanwhile (follow) fails its batch, and
        # must not count twice against the quorum.
        sent_to = len(pending)
        held = 0
        failed = 0
        try:
            async with asyncio.timeout(REPLICATE_TIMEOUT_S):
                while held < needed:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for future in done:
                        if future.result():
                            held += 1
                        else:
                            failed += 1
                    self._check_not_fenced()
                    if sent_to - failed < needed:
                        self._refuse(
                            f"only {sent_to - failed + 1} of its "
                            f"{sent_to + 1} replicas can take writes"
                        )
        except NotEnoughReplicasError:
            for link in self.links:
                link.rewind(ledger_id, first_entry_id)
            raise
        except TimeoutError:
            for link in self.links:
                link.rewind(ledger_id, first_entry_id)
            self._refuse(
                f"{held + 1} of its {len(self.links) + 1} replicas confirmed the write "
                f"within {REPLICATE_TIMEOUT_S:g} s"
            )

    async def replicate_cursors(self, states: dict[str, bytes], deleted: list[str]) -> None:
        """Send cursor states to every member; return once `ack_quorum - 1` hold them."""
        self._check_not_fenced()
        needed = self.ack_quorum - 1
        calls = [
            asyncio.ensure_future(
                self._peers.replicate_cursors(link.address, self.topic, self.epoch, states, deleted)
            )
            for link in self.links
        ]
        for link, call in zip(self.links, calls, strict=True):
            # Those still under way when the quorum answers end unwatched.
            call.add_done_callback(_unwatched_call_done)
            call.add_done_callback(functools.partial(_cursor_call_done, link))
        if needed == 0:
            return
        held = 0
        failed = 0
        pending = set(calls)
        try:
            async with asyncio.timeout(REPLICATE_TIMEOUT_S):
                while held < needed:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for call in done:
                        error = call.exception()
                        if error is None:
                            held += 1
                        elif isinstance(error, ReplicaFencedError):
                            self._fenced_by(error)
                            self._check_not_fenced()
                        else:
                            failed += 1
                    if len(calls) - failed < needed:
                        self._refuse(f"only {len(calls) - failed + 1} replicas took the cursors")
        except TimeoutError:
            self._refuse(f"{held + 1} replicas confirmed the cursors in time")

    def _refuse(self, why: str, sent: bool = True) -> None:
        error = NotEnoughReplicasError(
            f"topic {self.topic} cannot take writes now: {why}, and its ack quorum is "
            f"{self.ack_quorum}; nothing of this write was kept. Retry: writes resume by "
            f"themselves once enough replicas are back"
        )
        error.may_be_held = sent
        raise error

    def retire(self) -> None:
        """Call no member again; refuse what waits and every later call (see the
        module docstring)."""
        self._retired = True
        self.close()
        for sender in self.snapshot_senders.values():
            sender.close()

    def close(self) -> None:
        for link in self.links:
            link.close()


def _cursor_call_done(link: FollowerLink, call: asyncio.Future) -> None:
    if call.cancelled():
        return
    error = call.exception()
    if error is not None and not isinstance(error, ReplicaFencedError):
        link.missed_cursors()


def _unwatched_call_done(call: asyncio.Future) -> None:
    if not call.cancelled() and call.exception() is not None:
        log.debug("a replica call ended in %r", call.exception())


def _no_frames(ledger_id: int, first: int, last: int) -> list[bytes]:
    return []


async def _nothing() -> None:
    return None
