"""Re-replication (BookKeeper's autorecovery): a lost member's copies made again elsewhere.

A replicated topic's writer already re-makes the copy of a member back on a lost
disk (replication.py). A member that never comes back, or that an operator is
decommissioning, would leave the topic with fewer than Qw copies for good. Here
each broker, for the replicated topics it leads, replaces such a member:

- Lost: not live for `grace_period_s` (replication_grace_period_s; a member this
  broker never saw live counts from its own start), or draining
  (metadata/draining.py, `admin brokers decommission`), which is replaced at once.
- The replacement is the least loaded live broker outside the ensemble that is not
  draining (TopicOwnership.choose_replacement). None: the topic stays
  under-replicated and is looked at again on the next pass.
- The record's ensemble is changed by compare-and-set at the writer's epoch
  (TopicOwnership.replace_member), then the writer's replication sends the new
  member every ledger it lacks, throttled (catch_up_throttle.py), and every new
  entry; the new member counts toward the ack quorum only once it holds everything
  confirmed, and the record counts its copy (its data dir) only then, so a failover
  meanwhile never takes its partial copy for a whole one.
- A topic led here but not open is opened (its recovery makes its writer) so that
  its copies are made again too, not only those of busy topics.

A topic whose leader is the lost broker is first taken by its successor (failover,
ledger_recovery.py), which then replaces the lost member like any writer. A draining
broker hands the topics it leads to another member of their ensembles
(`move_away`: topic_moves.py's transfer), MOVES_PER_PASS a pass, so their new
leaders replace it in turn; a topic with no other member holding its copy stays.

A topic whose record names a member `leaving` (a broker outside the ensemble is being
sent its copy in its place, ensemble_swaps.py) has its swap's next step taken here by
its writer on each pass, and the writer's links follow the record's ensemble.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from stableline.broker.cluster.ensemble_swaps import next_step, take_next_step
from stableline.broker.cluster.ownership import OwnershipRecord, TopicOwnership
from stableline.broker.cluster.replication import EnsembleReplication
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)

# How often the topics led here are looked at (a pass costs a dict look-up per topic
# while no member is lost, and one read of the draining brokers from the store).
CHECK_INTERVAL_S = 1.0
# Topics a draining broker hands over per pass (each stops its writes for a moment).
MOVES_PER_PASS = 8


class Rereplication:
    """Replaces the lost members of the topics this broker leads; see the module docstring."""

    def __init__(
        self,
        ownership: TopicOwnership,
        writers: Callable[[], dict[str, EnsembleReplication]],
        open_topic: Callable[[TopicName], Awaitable[None]],
        grace_period_s: float,
        check_interval_s: float = CHECK_INTERVAL_S,
        move_away: Callable[[TopicName], Awaitable[str]] | None = None,
    ):
        """`writers()`: the replication of each replicated topic open here, by full
        name; `open_topic(name)`: open it (its recovery makes its writer);
        `move_away(name)`: hand a topic led here to another member (None: the topics a
        draining broker leads stay until it stops)."""
        assert grace_period_s >= 0, grace_period_s
        self.ownership = ownership
        self.writers = writers
        self.open_topic = open_topic
        self.grace_period_s = grace_period_s
        self.check_interval_s = check_interval_s
        self.move_away = move_away
        self._task: asyncio.Task | None = None
        # Members replaced since start, for the metrics.
        self.replaced = 0
        # (topic, member) already warned about having no replacement: said once.
        self._warned: set[tuple[str, str]] = set()

    def start(self) -> None:
        assert self._task is None
        self._task = asyncio.create_task(self._run(), name="rereplication")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the store away: the next pass tries again
                log.warning("re-replication pass failed: %r", error)
            # A period, not a wait for anything: each pass reads the state afresh.
            await asyncio.sleep(self.check_interval_s)

    def lost(self, member: str, now_ms: int) -> bool:
        """Whether `member`'s copies are to be made elsewhere (see the module docstring)."""
        ownership = self.ownership
        if member in ownership.draining:
            return True
        if ownership.live_broker(member) is not None:
            return False
        gone_since = ownership.gone_since_ms(member) or ownership.started_ms
        return now_ms - gone_since >= self.grace_period_s * 1000

    async def check(self) -> int:
        """One pass over the topics led here: how many members were replaced."""
        ownership = self.ownership
        if not ownership.store.session_holds():
            return 0  # fenced: what it leads may be another's by now
        await ownership.refresh_draining()
        me = ownership.broker_id
        now_ms = int(time.time() * 1000)
        replaced = 0
        moves = 0
        draining_here = me in ownership.draining and self.move_away is not None
        writers: dict[str, EnsembleReplication] | None = None
        # Copies placed in this pass, per broker: many topics losing one member spread
        # their new copies instead of all landing on the one least loaded broker.
        chosen: dict[str, int] = {}
        for topic, leader in ownership.leaders().items():
            if leader != me:
                continue
            name = TopicName.parse(topic)
            record = await ownership.record(name)
            if record is None or not record.replicated or record.leader != me:
                continue
            if draining_here and moves < MOVES_PER_PASS and self._has_heir(record, now_ms):
                moves += 1
                await self._move_away(name)
                continue
            lost = [m for m in record.ensemble if m != me and self.lost(m, now_ms)]
            if not lost and not record.leaving and not self._copy_unfinished(record):
                continue
            if writers is None:
                writers = self.writers()
            writer = writers.get(topic)
            if writer is None:
                # Not open here (unloaded, or retired when this broker's session was
                # lost): its recovery makes a writer, which replaces the lost members
                # and finishes the copies of those being made.
                try:
                    await self.open_topic(name)
                except Exception as error:
                    if (topic, "") not in self._warned:
                        self._warned.add((topic, ""))
                        log.warning("topic %s: not opened to re-replicate: %r", name, error)
                continue  # its writer is looked at on the next pass
            if writer.epoch != record.epoch:
                continue  # taken again meanwhile: the next pass sees the new writer
            if record.leaving:
                record = await self._swap_step(name, writer, record)
                lost = [m for m in record.ensemble if m != me and self.lost(m, now_ms)]
            # A member added or taken out by a swap (ensemble_swaps.py): the writer's
            # links follow the record.
            writer.follow(m for m in record.ensemble if m != me)
            for member in lost:
                if await self._replace(name, writer, member, chosen):
                    replaced += 1
        self.replaced += replaced
        return replaced

    async def _swap_step(
        self, name: TopicName, writer: EnsembleReplication, record: OwnershipRecord
    ) -> OwnershipRecord:
        """Take the next step of the topic's ensemble swap, if any: the record then."""
        me = self.ownership.broker_id
        ownership = self.ownership
        preview = next_step(
            record,
            lambda member: ownership.live_broker(member) is not None,
            lambda member: ownership.holds_its_copy(record, member),
        )
        if preview is not None:
            # The member to go stops counting toward the writer's quorum before the
            # record stops naming it: a failover fences only those the record names,
            # so no entry may be confirmed by a member outside them.
            writer.follow(m for m in preview.ensemble if m != me)
        try:
            new = await take_next_step(self.ownership, name, writer.epoch)
        except Exception as error:
            log.warning("topic %s: its ensemble swap not advanced: %r", name, error)
            return record
        if new is None:
            if record.leaving == me and self.move_away is not None and self._swap_done(record):
                # This broker is the member to leave: another member leads, then drops it.
                await self._move_away(name, "this broker leaves its ensemble")
            return record
        log.info(
            "topic %s: ensemble %s -> %s at epoch %d",
            name,
            list(record.ensemble),
            list(new.ensemble),
            writer.epoch,
        )
        return new

    def _swap_done(self, record: OwnershipRecord) -> bool:
        return all(
            self.ownership.holds_its_copy(record, m) for m in record.ensemble if m != record.leaving
        )

    def _copy_unfinished(self, record: OwnershipRecord) -> bool:
        """Whether a live member's copy is still to be made (it replaced another, or is
        back on a lost disk): only a writer makes it."""
        ownership = self.ownership
        return any(
            m != ownership.broker_id
            and ownership.live_broker(m) is not None
            and not ownership.holds_its_copy(record, m)
            for m in record.ensemble
        )

    def _has_heir(self, record: OwnershipRecord, now_ms: int) -> bool:
        """Whether another member holds the topic's copy, live and not draining."""
        me = self.ownership.broker_id
        return any(
            m != me and self.ownership.holds_its_copy(record, m) and not self.lost(m, now_ms)
            for m in record.ensemble
        )

    async def _move_away(self, name: TopicName, why: str = "this broker is draining") -> None:
        assert self.move_away is not None
        try:
            to = await self.move_away(name)
        except Exception as error:
            log.warning("topic %s: not handed over (%s): %r", name, why, error)
            return
        log.info("topic %s: handed over to %s (%s)", name, to, why)

    async def _replace(
        self, name: TopicName, writer: EnsembleReplication, gone: str, chosen: dict[str, int]
    ) -> bool:
        record = await self.ownership.record(name)
        if record is None or gone not in record.ensemble:
            return False
        member = self.ownership.choose_replacement(record.ensemble, chosen)
        if member is None:
            if (str(name), gone) in self._warned:
                return False
            self._warned.add((str(name), gone))
            log.warning(
                "topic %s: member %s is lost, and no live broker outside its ensemble %s "
                "can take its copy: it stays under-replicated",
                name,
                gone,
                list(record.ensemble),
            )
            return False
        try:
            await self.ownership.replace_member(name, writer.epoch, gone, member)
        except Exception as error:
            log.warning("topic %s: member %s not replaced: %r", name, gone, error)
            return False
        writer.replace_member(gone, member)
        chosen[member] = chosen.get(member, 0) + 1
        log.info(
            "topic %s: member %s (%s) replaced by %s at epoch %d",
            name,
            gone,
            "draining" if gone in self.ownership.draining else "lost",
            member,
            writer.epoch,
        )
        return True
