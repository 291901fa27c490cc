"""Taking a replicated topic: the new epoch, the fence, the last ledger recovered.

Any broker that starts serving a replicated topic (one whose record has an ensemble
of more than one broker) does this first, whether the topic's last leader died, was
paused, lost its disk, or is this very broker restarting: its own copy may be
empty or behind, so it trusts the ensemble, as BookKeeper's ledger recovery does.

1. `take`: the topic's record names this broker leader at the next epoch, by
   compare-and-set (ownership.py). Only one broker wins an epoch.
2. Fence every member at that epoch (this broker's own copy too). A member that is
   fenced refuses every write of an older epoch, so the last leader can have
   nothing more confirmed once enough members answer: at least E - Qa + 1, so that
   every ack quorum of the old writer includes one that answered. Fewer: the topic
   is refused (NotEnoughReplicasError, retryable) and nothing is changed. A member
   registered with another data dir than the record knows (its disk was lost) is
   fenced but not counted: an empty answer from it says nothing of what it held.
3. The ledger the record names as open (the last writer's) is recovered: its end is
   the longest copy among those that answered, which holds every confirmed entry
   (and perhaps some never confirmed, which is allowed: their producers heard
   nothing, or a timeout). This broker copies what it lacks of it, makes sure
   `ack_quorum` members hold it all, then records it closed at that end, by
   compare-and-set on the epoch.
4. This broker's copy is cut to, or completed up to, every closed ledger's recorded
   end: no entry past a recorded end is ever served, and none is missing.
5. Every subscription cursor is taken at its newest state among the members that
   answered (by the version each state carries, since a seek moves a cursor back):
   an ack was answered once an ack quorum held it, maybe not on this broker.
6. The topic's ManagedLedger opens on that copy with an EnsembleReplication at the
   new epoch; the transaction buffer replays it before READ_COMMITTED reads are
   served (Topic.start_recovery).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from managed_ledger import Position, newest_states
from managed_ledger.replica import ReplicaLogs, ReplicaState
from stableline.broker.cluster.catch_up_throttle import CatchUpThrottle
from stableline.broker.cluster.ownership import (
    OwnershipRecord,
    RecordChangedError,
    TopicOwnership,
)
from stableline.broker.cluster.replication import EnsembleReplication, NotEnoughReplicasError
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)

FENCE_TIMEOUT_S = 2.0
# Once enough members have answered a fence, how long the others are still waited for.
FENCE_GRACE_S = 0.2
COPY_ENTRIES = 1000
COPY_BYTES = 4 * 1024 * 1024


def fence_needed(ensemble_size: int, ack_quorum: int) -> int:
    """Members that must answer a fence so that no ack quorum of the old writer lies
    wholly among those that did not (BookKeeper's E - Qa + 1)."""
    return ensemble_size - ack_quorum + 1


class LedgerRecovery:
    """Recovers replicated topics for this broker (see the module docstring)."""

    def __init__(
        self,
        ownership: TopicOwnership,
        peers,
        replicas: ReplicaLogs,
        on_fenced: Callable[[TopicName], None] = lambda name: None,
        throttle: CatchUpThrottle | None = None,
    ):
        """`peers`: the PeerClient (its replica calls); `replicas`: this broker's
        copies; `on_fenced(name)`: another broker took a topic this one serves;
        `throttle`: the bound on old entries its writers send members catching up."""
        self.ownership = ownership
        self.peers = peers
        self.replicas = replicas
        self.on_fenced = on_fenced
        self.throttle = throttle
        self._tasks: set[asyncio.Task] = set()

    async def recover(self, name: TopicName) -> EnsembleReplication | None:
        """Take the topic and recover it (None: it is not replicated)."""
        record = await self.ownership.record(name)
        if record is None or not record.replicated:
            return None
        record = await self.ownership.take(name)
        me = self.ownership.broker_id
        epoch = record.epoch
        ack_quorum = _ack_quorum(record)
        storage = name.storage_name
        needed = fence_needed(len(record.ensemble), ack_quorum)
        answers = await self._fence(name, record, needed)
        # A member back on another data dir answers, but holds nothing it is counted on;
        # one being sent its copy (on the data dir it was chosen with) tells all it
        # can have acknowledged, and is fenced, so it counts here.
        counted = [a for a in answers if self.ownership.answers_for_its_copy(record, a)]
        if len(counted) < needed:
            raise NotEnoughReplicasError(
                f"topic {name} cannot be served now: {len(counted)} of its "
                f"{len(record.ensemble)} replicas answered on the data dirs their copies "
                f"are on, {needed} are needed to know its last entry. Retry: it is served "
                f"once enough replicas are back"
            )
        if record.current_ledger >= 0:
            record = await self._recover_open_ledger(name, record, answers)
        await self._match_record(name, record, answers)
        await self._take_newest_cursors(name, record, answers, needed)
        log.info(
            "topic %s: taken at epoch %d; its ledgers end at %s (replicas answering: %s)",
            name,
            epoch,
            record.closed_ledgers,
            sorted(answers),
        )

        async def open_ledger(ledger_id: int, closing: tuple[int, int] | None) -> None:
            def opened(current: OwnershipRecord) -> OwnershipRecord:
                _check_still_ours(name, current, me, epoch)
                closed = dict(current.closed_ledgers)
                if closing is not None:
                    closed[closing[0]] = closing[1]
                return replace(current, current_ledger=ledger_id, closed_ledgers=closed)

            try:
                await self.ownership.change_record(name, opened)
            except RecordChangedError as error:
                self.on_fenced(name)
                raise NotEnoughReplicasError(str(error)) from None

        # Members back on another data dir, or still being sent their copy after they
        # replaced a lost member (rereplication.py): their copies are made again, from
        # the first ledger; once one holds everything, the record counts it again.
        remake = frozenset(
            a
            for a in record.ensemble
            if a != me
            and self.ownership.live_broker(a) is not None
            and not self.ownership.holds_its_copy(record, a)
        )

        def remade(address: str) -> None:
            task = asyncio.create_task(self._count_again(name, epoch, address))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.replicas.unload(storage)
        return EnsembleReplication(
            str(name),
            epoch,
            ack_quorum,
            {address: answers.get(address) for address in record.ensemble if address != me},
            self.peers,
            open_ledger,
            lambda: self.on_fenced(name),
            next_ledger_id=max([record.current_ledger, *record.closed_ledgers]) + 1,
            remake=remake,
            on_remade=remade,
            throttle=self.throttle,
        )

    async def _count_again(self, name: TopicName, epoch: int, address: str) -> None:
        """`address` holds every ledger again: the record knows its copy by the data
        dir it is registered with now."""
        info = self.ownership.live_broker(address)
        if info is None:
            return

        def counted(current: OwnershipRecord) -> OwnershipRecord:
            _check_still_ours(name, current, self.ownership.broker_id, epoch)
            return replace(current, data_dirs={**current.data_dirs, address: info.data_dir_id})

        try:
            await self.ownership.change_record(name, counted)
        except Exception as error:
            log.warning("topic %s: replica %s not counted again: %r", name, address, error)
            return
        log.info("topic %s: replica %s is counted again (its copy was made again)", name, address)

    async def _fence(
        self, name: TopicName, record: OwnershipRecord, needed: int
    ) -> dict[str, ReplicaState]:
        """Fence every member; return once `needed` members counted on have answered
        (and the others had FENCE_GRACE_S more), or at FENCE_TIMEOUT_S. A member that
        did not answer in time is not waited for: with E - Qa + 1 fenced, the old writer
        can have nothing more confirmed whatever the others do (a paused member would
        otherwise hold every failover up for the whole timeout)."""
        me = self.ownership.broker_id
        storage = name.storage_name

        async def fence(address: str) -> tuple[str, ReplicaState]:
            if address == me:
                return address, await self.replicas.fence(storage, record.epoch)
            return address, await self.peers.fence_replica(address, str(name), record.epoch)

        calls = {asyncio.ensure_future(fence(a)): a for a in record.ensemble}
        answers: dict[str, ReplicaState] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FENCE_TIMEOUT_S
        pending = set(calls)
        while pending:
            counted = sum(1 for a in answers if self.ownership.answers_for_its_copy(record, a))
            if counted >= needed:
                deadline = min(deadline, loop.time() + FENCE_GRACE_S)
            timeout = deadline - loop.time()
            if timeout <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for call in done:
                error = call.exception()
                if error is None:
                    address, state = call.result()
                    answers[address] = state
                else:
                    log.warning(
                        "topic %s: replica %s did not take the fence: %r",
                        name,
                        calls[call],
                        error,
                    )
        for call in pending:
            call.cancel()
            log.warning("topic %s: replica %s did not answer the fence in time", name, calls[call])
        return answers

    async def _take_newest_cursors(
        self,
        name: TopicName,
        record: OwnershipRecord,
        answers: dict[str, ReplicaState],
        needed: int,
    ) -> None:
        """Keep, of each cursor, the newest state among the fenced members' copies.

        The last writer answered an ack once `ack_quorum` copies held the cursor, which
        need not include this broker's: reading `needed` counted copies (E - Qa + 1, as
        for the fence) meets every such quorum. They are fenced, so what they hold is
        final. Versions decide, not positions, since a seek moves a cursor back."""
        me = self.ownership.broker_id
        storage = name.storage_name
        mine = self.replicas.cursor_states(storage)
        others = [a for a in answers if a != me and self.ownership.answers_for_its_copy(record, a)]
        results = await asyncio.gather(
            *(self.peers.read_replica_cursors(a, str(name)) for a in others),
            return_exceptions=True,
        )
        copies = []
        for address, result in zip(others, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("topic %s: cursors not read from %s: %r", name, address, result)
            else:
                copies.append(result)
        read = len(copies) + (1 if self.ownership.holds_its_copy(record, me) else 0)
        if read < needed:
            raise NotEnoughReplicasError(
                f"topic {name} cannot be served now: the cursors of {read} of its "
                f"{len(record.ensemble)} replicas were read, {needed} are needed to know "
                f"every acknowledgement. Retry: it is served once enough replicas answer"
            )
        newest = newest_states(mine, *copies)
        newer = {cursor: raw for cursor, raw in newest.items() if raw is not mine.get(cursor)}
        if newer:
            await self.replicas.write_cursors(storage, record.epoch, newer, [])
            log.info(
                "topic %s: %d cursor states taken newer from the other replicas: %s",
                name,
                len(newer),
                sorted(newer),
            )

    async def _recover_open_ledger(
        self, name: TopicName, record: OwnershipRecord, answers: dict[str, ReplicaState]
    ) -> OwnershipRecord:
        me = self.ownership.broker_id
        ledger_id = record.current_ledger
        counts = {a: _count_in(state, ledger_id) for a, state in answers.items()}
        end = max(counts.values())
        source = max(counts, key=lambda a: counts[a])
        await self._complete_local(name, record.epoch, ledger_id, counts[me], end, [source])
        counts[me] = end
        holders = sum(1 for count in counts.values() if count >= end)
        for address, count in counts.items():
            if holders >= _ack_quorum(record):
                break
            if count >= end:
                continue
            try:
                # What the member holds now, not what it answered the fence with: its
                # link would resend from there, below what the member holds and has
                # taken as confirmed, which it refuses.
                answers[address] = await self._push(
                    name, record.epoch, address, ledger_id, count, end
                )
            except Exception as error:
                log.warning(
                    "topic %s: cannot copy ledger %d to %s: %r", name, ledger_id, address, error
                )
                continue
            holders += 1
        if holders < _ack_quorum(record):
            raise NotEnoughReplicasError(
                f"topic {name} cannot be served now: its last ledger's {end} entries are on "
                f"{holders} replicas, and its ack quorum is {_ack_quorum(record)}. Retry"
            )

        def closed(current: OwnershipRecord) -> OwnershipRecord:
            _check_still_ours(name, current, me, record.epoch)
            ledgers = dict(current.closed_ledgers)
            ledgers[ledger_id] = end
            return replace(current, current_ledger=-1, closed_ledgers=ledgers)

        return await self.ownership.change_record(name, closed)

    async def _match_record(
        self, name: TopicName, record: OwnershipRecord, answers: dict[str, ReplicaState]
    ) -> None:
        """This broker's copy holds exactly what the record says of each closed ledger."""
        storage = name.storage_name
        mine = self.replicas.ledgers(storage)
        others = [a for a in answers if a != self.ownership.broker_id]
        for ledger_id, end in sorted(record.closed_ledgers.items()):
            held = mine.get(ledger_id)
            if held is None and ledger_id < min(mine, default=ledger_id + 1):
                # Older than anything here (retention deleted it, or this copy was
                # made after): nothing to match.
                continue
            held = held or 0
            if held > end:
                await self.replicas.close_ledger(storage, record.epoch, ledger_id, end - 1)
            elif held < end:
                await self._complete_local(name, record.epoch, ledger_id, held, end, others)
                await self.replicas.close_ledger(storage, record.epoch, ledger_id, end - 1)

    async def _complete_local(
        self,
        name: TopicName,
        epoch: int,
        ledger_id: int,
        held: int,
        end: int,
        sources: list[str],
    ) -> None:
        """Copy entries held..end-1 of a ledger to this broker's copy from `sources`."""
        storage = name.storage_name
        for source in sources:
            if held >= end:
                return
            if source == self.ownership.broker_id:
                continue
            try:
                while held < end:
                    frames = await self.peers.read_replica(
                        source,
                        str(name),
                        ledger_id,
                        held,
                        min(COPY_ENTRIES, end - held),
                        COPY_BYTES,
                    )
                    if not frames:
                        break
                    await self.replicas.append(
                        storage, epoch, ledger_id, held, frames, Position(ledger_id, held - 1)
                    )
                    held += len(frames)
            except Exception as error:
                log.warning(
                    "topic %s: cannot read ledger %d from %s: %r", name, ledger_id, source, error
                )
        if held < end:
            raise NotEnoughReplicasError(
                f"topic {name} cannot be served now: entries {held}..{end - 1} of its "
                f"ledger {ledger_id} could not be read from the replicas that answered. Retry"
            )

    async def _push(
        self, name: TopicName, epoch: int, address: str, ledger_id: int, first: int, end: int
    ) -> ReplicaState:
        """Copy entries first..end-1 of a ledger to the member; what it holds after."""
        storage = name.storage_name
        assert first < end, (first, end)
        while first < end:
            frames = self.replicas.read(
                storage, ledger_id, first, min(COPY_ENTRIES, end - first), COPY_BYTES
            )
            assert frames, (ledger_id, first, end)
            state = await self.peers.replicate(
                address, str(name), epoch, ledger_id, first, frames, Position(ledger_id, first - 1)
            )
            first += len(frames)
        return state


def _count_in(state: ReplicaState, ledger_id: int) -> int:
    return state.entry_count if state.ledger_id == ledger_id else 0


def _ack_quorum(record: OwnershipRecord) -> int:
    return record.ack_quorum


def _check_still_ours(name: TopicName, record: OwnershipRecord, me: str, epoch: int) -> None:
    if record.leader != me or record.epoch != epoch:
        raise RecordChangedError(
            f"topic {name} was taken by broker {record.leader} at epoch {record.epoch} "
            f"(this broker held epoch {epoch}): look it up again"
        )


__all__ = ["LedgerRecovery", "fence_needed"]
