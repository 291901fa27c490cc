"""Moving a topic to another broker: unload, transfer, and the hand-over of every
topic a stopping broker leads (Pulsar's `topics unload`, Kafka's reassignment of a
partition's leader within its replicas).

A replicated topic (an ensemble of more than one) moves by a hand-over from its
owner A to another member B of its ensemble, live on the data dir its copy is on:
1. A admits no new write to the topic (Topic.stop_writes: TopicMovingError, on which
   a producer's stream ends unanswered and its client looks the topic up again and
   sends again), and waits until every write it admitted is done and answered: no
   accepted send fails.
2. A writes every cursor and waits until the ack quorum holds them, so B opens each
   subscription where it was.
3. A names B the leader in the topic's record, by compare-and-set on the epoch A
   leads at: from then on a call for the topic at A is answered NotOwner naming B.
4. A unloads the topic: its streams end and their clients follow the record to B.
B's records watch sees the record name it (ownership.py `on_handed`) and takes the
topic at once, as it takes a gone leader's (the next epoch, the ensemble fenced, the
open ledger recovered, the transaction buffer rebuilt), so clients arriving find it
served. Should step 1 or 2 not finish within HAND_OVER_STEP_TIMEOUT_S (a member
away), the topic takes writes again here and the move is refused, retryable.

A topic of one copy cannot move (that copy is on its owner's disk): `transfer`
without a target (an unload) closes it here and its next use loads it again, as
Pulsar's unload does on one broker; with another broker named it is refused with
TopicNotMovableError. So is a move to a broker outside the topic's ensemble or not
live on its copy's data dir (making copies elsewhere is re-replication's business).

Without a target, a replicated topic goes to the least-loaded other member that
holds its copy (fewest topics led, then the lowest id); with none, it is unloaded
here as a topic of one copy.

`hand_over_all` (a stopping broker, before it leaves the cluster) hands every
replicated topic this broker leads to another member, HAND_OVER_CONCURRENCY at a
time; what is not done when the caller's time is up fails over as after a crash.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from prometheus_client import Counter, Histogram

from stableline.broker.cluster.ownership import (
    NotOwnerError,
    OwnershipRecord,
    RecordChangedError,
    TopicOwnership,
)
from stableline.broker.errors import BrokerError
from stableline.broker.topics.latency import LATENCY_BUCKETS_S
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.topic_state import TopicState
from stableline.broker.topics.write_gate import TopicMovingError
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)

# How long the writes in flight, then the cursors, may take before a hand-over gives
# up and the topic takes writes here again (a replicated write waits at most 5 s
# for its quorum: replication.REPLICATE_TIMEOUT_S).
HAND_OVER_STEP_TIMEOUT_S = 6.0
# Topics handed over at once by a stopping broker.
HAND_OVER_CONCURRENCY = 16

# Process-wide, as the latency histograms are (topics/latency.py); /metrics shows them.
TOPIC_MOVES = Counter(
    "stableline_topic_moves",
    "Topics this broker moved: handed_over to another broker, unloaded here (one copy, "
    "or no other member), failed (the topic stayed, or was taken meanwhile)",
    ["result"],
    registry=None,
)
HAND_OVER_SECONDS = Histogram(
    "stableline_topic_hand_over_seconds",
    "Per topic handed over: from its writes stopped here to its record naming the next "
    "broker and its close here",
    buckets=LATENCY_BUCKETS_S,
    registry=None,
)


class TopicNotMovableError(BrokerError):
    """The topic cannot move to the broker asked for; the message says why."""

    code = "TopicNotMovable"


@dataclass(frozen=True, slots=True)
class MovePlan:
    """Where a topic served here goes: `target` is another broker (a hand-over) or
    this one (`reload`: closed here, loaded again on its next use)."""

    target: str
    reload: bool


def plan_move(
    name: TopicName,
    record: OwnershipRecord,
    me: str,
    to: str | None,
    holds_copy: Callable[[str], bool],
    led_by: Callable[[str], int],
) -> MovePlan:
    """Where topic `name`, served here (`me`) under `record`, moves when asked to go
    to `to` (None: anywhere, an unload). `holds_copy(member)`: it is live on the data
    dir its copy is on; `led_by(broker)`: how many topics it leads."""
    if to == me:
        return MovePlan(me, reload=False)
    if not record.replicated:
        if to is None:
            return MovePlan(me, reload=True)
        raise TopicNotMovableError(
            f"topic {name} cannot move to broker {to}: it keeps one copy, on this "
            f"broker's disk (its namespace's persistence is 1/1/1), so no other broker "
            f"holds its data; unload it instead, or give its namespace an ensemble of "
            f"more than one (admin namespaces set-persistence) for topics placed from now on"
        )
    if to is None:
        candidates = [m for m in record.ensemble if m != me and holds_copy(m)]
        if not candidates:
            return MovePlan(me, reload=True)
        return MovePlan(min(candidates, key=lambda m: (led_by(m), m)), reload=False)
    if to not in record.ensemble:
        raise TopicNotMovableError(
            f"topic {name} cannot move to broker {to}: it is not a member of the topic's "
            f"ensemble {list(record.ensemble)}, the brokers that hold its copies"
        )
    if not holds_copy(to):
        raise TopicNotMovableError(
            f"topic {name} cannot move to broker {to}: that member is not live on the "
            f"data dir its copy is on (down, or back with a lost disk); pick another "
            f"member of {list(record.ensemble)}"
        )
    return MovePlan(to, reload=False)


class HandOverFailedError(BrokerError):
    """A hand-over could not finish in time (a write or the cursors waited for a member
    away): the topic takes writes here again; retry."""

    code = "TopicUnavailable"


async def loaded_topic(registry: TopicRegistry, name: TopicName) -> Topic | None:
    """The topic if it is loaded here (waiting for a load under way), else None."""
    if registry.state(name) is TopicState.UNLOADED:
        return None
    try:
        return await registry.get(name, create=False)
    except TopicNotFoundError:
        return None


async def unload_here(registry: TopicRegistry, name: TopicName) -> None:
    """Close the topic here once the writes it admitted are answered (none is admitted
    meanwhile); its clients reconnect, and its next use loads it again."""
    topic = await loaded_topic(registry, name)
    if topic is None:
        return
    because = f"topic {name} is being unloaded"
    topic.stop_writes(because)
    try:
        async with asyncio.timeout(HAND_OVER_STEP_TIMEOUT_S):
            await topic.writes_done()
    except TimeoutError:
        log.warning("topic %s: unloaded with writes still in flight", name)
    topic.end_streams(TopicMovingError(f"{because}: look it up again"))
    await registry.unload(name)
    TOPIC_MOVES.labels("unloaded").inc()
    log.info("topic %s: unloaded", name)


class TopicMoves:
    """Unload and transfer of the topics this broker serves (see the module docstring)."""

    def __init__(self, ownership: TopicOwnership, registry: TopicRegistry):
        self.ownership = ownership
        self.registry = registry
        # Moves under way, by topic: a second ask for one joins it.
        self._moving: dict[str, asyncio.Task[str]] = {}

    async def transfer(self, name: TopicName, to: str | None = None) -> str:
        """Move topic `name`, served here, to broker `to` (None: unload it, to the least
        loaded other member of its ensemble); returns the id of the broker that serves
        it now. NotOwnerError when another broker serves it; TopicNotFoundError when it
        does not exist; TopicNotMovableError as plan_move."""
        key = str(name)
        under_way = self._moving.get(key)
        if under_way is None:
            under_way = asyncio.ensure_future(self._transfer(name, to))
            self._moving[key] = under_way
            under_way.add_done_callback(lambda _: self._moving.pop(key, None))
        return await asyncio.shield(under_way)

    async def _transfer(self, name: TopicName, to: str | None) -> str:
        ownership = self.ownership
        await ownership.wait_started()
        me = ownership.broker_id
        record = await ownership.record(name)
        if record is None:
            raise TopicNotFoundError(f"topic {name} does not exist")
        if ownership.serving_id(record) != me:
            raise NotOwnerError(name, ownership.owner_of(name, record))
        plan = plan_move(
            name,
            record,
            me,
            to,
            lambda member: ownership.holds_its_copy(record, member),
            ownership.led_by,
        )
        if plan.target == me:
            if plan.reload:
                await self._reload(name)
            return me
        try:
            await self._hand_over(name, record, plan.target)
        except Exception:
            TOPIC_MOVES.labels("failed").inc()
            raise
        TOPIC_MOVES.labels("handed_over").inc()
        return plan.target

    async def _reload(self, name: TopicName) -> None:
        await unload_here(self.registry, name)

    async def _hand_over(self, name: TopicName, record: OwnershipRecord, target: str) -> None:
        started = time.monotonic()
        topic = await loaded_topic(self.registry, name)
        because = f"topic {name} is moving to broker {target}"
        if topic is not None:
            topic.stop_writes(because)
            try:
                async with asyncio.timeout(HAND_OVER_STEP_TIMEOUT_S):
                    await topic.writes_done()
                    await topic.ledger.write_all_cursors()
            except Exception as error:  # TimeoutError, or the cursors refused
                topic.resume_writes()
                raise HandOverFailedError(
                    f"topic {name} was not moved to broker {target}: its writes in flight "
                    f"or its cursors did not reach enough replicas in time ({error!r}); it "
                    f"is served here as before: retry"
                ) from None
        # The epoch this broker writes at (a cached record could lag a new take).
        replication = None if topic is None else topic.ledger.replication
        epoch = record.epoch if replication is None else replication.epoch
        me = self.ownership.broker_id

        def hand_over(current: OwnershipRecord) -> OwnershipRecord:
            if current.leader != me or current.epoch != epoch:
                raise RecordChangedError(
                    f"topic {name} was taken by broker {current.leader} (epoch "
                    f"{current.epoch}) while it was being moved to {target}"
                )
            return replace(current, leader=target, since_ms=int(time.time() * 1000))

        try:
            await self.ownership.change_record(name, hand_over)
        except RecordChangedError:
            # Not this broker's any more: it lets go as on any takeover.
            if topic is not None:
                topic.end_streams(TopicMovingError(f"{because}: look it up again"))
                await self.registry.unload(name)
            raise
        except BaseException:
            if topic is not None:
                topic.resume_writes()
            raise
        if topic is not None:
            topic.end_streams(TopicMovingError(f"topic {name} moved to broker {target}"))
            await self.registry.unload(name)
        took = time.monotonic() - started
        HAND_OVER_SECONDS.observe(took)
        log.info("topic %s: handed over to broker %s in %.0f ms", name, target, took * 1000)

    async def hand_over_all(self) -> int:
        """Hand every replicated topic led here to another live member of its ensemble
        (a stopping broker); returns how many were handed over. The caller bounds the
        time (asyncio.timeout): what is left fails over as after a crash."""
        if not self.ownership.started:
            return 0  # never joined: it leads nothing
        me = self.ownership.broker_id
        led = [topic for topic, leader in self.ownership.leaders().items() if leader == me]
        room = asyncio.Semaphore(HAND_OVER_CONCURRENCY)

        async def hand_over(topic: str) -> bool:
            name = TopicName.parse(topic)
            async with room:
                try:
                    record = await self.ownership.record(name)
                    if record is None or not record.replicated:
                        return False
                    if not any(
                        m != me and self.ownership.holds_its_copy(record, m)
                        for m in record.ensemble
                    ):
                        return False  # no member to take it: it fails over once one is back
                    return await self.transfer(name) != me
                except Exception as error:
                    log.warning("topic %s not handed over: %s", name, error)
                    return False

        try:
            moved = sum(await asyncio.gather(*(hand_over(topic) for topic in led)))
        finally:
            # Out of time (cancelled): moves still under way stop with the broker.
            for task in list(self._moving.values()):
                task.cancel()
        log.info("handed %d of %d topics led here to other brokers", moved, len(led))
        return moved


async def move_topic(
    registry: TopicRegistry, moves: TopicMoves | None, name: TopicName, to: str | None
) -> str:
    """What the admin faces call: TopicMoves.transfer in a cluster (`moves`); standalone
    (None), an unload closes the topic here ("" for this broker) and a transfer is
    refused, there being no other broker."""
    if moves is not None:
        return await moves.transfer(name, to)
    if to:
        raise TopicNotMovableError(
            f"topic {name} cannot move to broker {to}: this broker runs standalone (the "
            f"embedded metadata store), with no other broker"
        )
    if not registry.exists(name):
        raise TopicNotFoundError(f"topic {name} does not exist")
    await unload_here(registry, name)
    return ""
