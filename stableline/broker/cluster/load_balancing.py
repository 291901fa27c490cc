"""The balancer at work: on one broker of the cluster at a time, every report
interval, the brokers' load reports go into the decision (balancer.py) and its
moves are made by transferring topics.

Promises:
- One broker runs it: the one holding the key `/stableline/load-balancer/{cluster}`,
  an ephemeral key created only where none exists (etcd's compare-and-set under the
  holder's lease decides; no election of our own). The key goes with its holder's
  session, and another broker creates it at its next interval. A broker runs the
  decision only while its own session holds; one that takes the key over starts
  with a fresh decision (its first moves come `consecutive_reports` intervals later).
- The decision is fed what the brokers last wrote to their registrations (their
  load scores, busiest topics and when each report was made, so a report is
  counted once however often it is read; observability/load_report.py), each topic with
  its ensemble from its ownership record (the members live on the data dir their
  copy is on: the only ones a move may go to); a topic whose record no longer names
  the reporting broker as its server (moved or taken since its report) is left out.
- A move is `TopicMover.transfer(topic, to=target)`, made wherever the topic is
  served (ForwardingMover: here, or asked of its server); one that fails is logged
  and counts against the per-minute cap all the same (what fails now is not retried
  at once). With no mover the decisions are only logged.
- A copy move (`Move.leaving` set: the best target holds no copy of the topic) is
  the record's compare-and-set made here (ensemble_swaps.start_copy); the topic's
  writer makes the copy and takes the swap's next steps, and a later decision
  transfers the topic once its copy is whole. Draining brokers are sent no copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from stableline.broker.cluster.balancer import Balancer, BalancerSettings, Move, TopicLoad
from stableline.broker.cluster.ensemble_swaps import start_copy
from stableline.broker.cluster.ownership import TopicOwnership
from stableline.broker.errors import BrokerError
from stableline.broker.topics.registry import TopicNotFoundError
from stableline.metadata import (
    AlreadyExists,
    BrokerInfo,
    ClusterMetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailable,
)
from stableline.metadata.layout import ROOT, check_cluster_name
from stableline.topic_name import InvalidTopicNameError, TopicName

log = logging.getLogger(__name__)


class TopicMover(Protocol):
    """Moves a topic to another broker (its ensemble's member `to`, or one chosen);
    returns the broker that serves it then."""

    async def transfer(self, name: TopicName, to: str | None = None) -> str: ...


# Moves a topic at the broker serving it, another one (a peer call): the broker
# serving it afterwards.
RemoteTransfer = Callable[[BrokerInfo, TopicName, str | None], Awaitable[str]]


class ForwardingMover:
    """A TopicMover for the balancer, which runs on one broker and moves topics served
    anywhere: a topic served here is moved by this broker's own mover, one served by
    another broker is moved there (`remote`, a peer call)."""

    def __init__(self, ownership: TopicOwnership, local: TopicMover, remote: RemoteTransfer):
        self._ownership = ownership
        self._local = local
        self._remote = remote

    async def transfer(self, name: TopicName, to: str | None = None) -> str:
        record = await self._ownership.record(name)
        if record is None:
            raise TopicNotFoundError(f"topic {name} does not exist")
        if self._ownership.serving_id(record) == self._ownership.broker_id:
            return await self._local.transfer(name, to)
        owner = self._ownership.owner_of(name, record)  # TopicUnavailableError if gone
        return await self._remote(owner, name, to)


def balancer_path(cluster: str) -> str:
    return f"{ROOT}/load-balancer/{check_cluster_name(cluster)}"


class LoadBalancing:
    def __init__(
        self,
        store: ClusterMetadataStore,
        cluster: str,
        ownership: TopicOwnership,
        mover: TopicMover | None,
        settings: BalancerSettings,
        interval_s: float,
    ):
        self._store = store
        self._path = balancer_path(cluster)
        self._ownership = ownership
        self._mover = mover
        self._settings = settings
        self._interval_s = interval_s
        self._balancer: Balancer | None = None  # while this broker runs it
        self._task: asyncio.Task | None = None
        # Rounds decided here (tests wait on it).
        self.rounds = 0
        # What this run writes in the key (start): unique, so a key a previous run
        # of this broker left is not taken for its own.
        self._token = b""

    def start(self) -> None:
        assert self._task is None and self._ownership.broker_id
        self._token = f"{self._ownership.broker_id} {uuid.uuid4().hex}".encode()
        self._task = asyncio.create_task(self._run(), name="load-balancer")

    @property
    def running_here(self) -> bool:
        return self._balancer is not None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._balancer is not None:
            # Let another broker take it at once rather than when the session ends.
            with contextlib.suppress(MetadataStoreError):
                result = await self._store.get(self._path)
                if result is not None and result.value == self._token:
                    await self._store.delete(self._path, result.stat.version)
            self._balancer = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                if await self._hold():
                    await self._round()
            except MetadataStoreUnavailable as error:
                log.debug("load balancer skipped a round: %s", error)
            except Exception:
                log.exception("load balancer round failed")

    async def _hold(self) -> bool:
        """Whether this broker runs the balancer now (taking the key if it is free)."""
        if not self._store.session_holds():
            self._balancer = None
            return False
        result = await self._store.get(self._path)
        held = result is not None and result.value == self._token
        if result is None:
            with contextlib.suppress(AlreadyExists):
                await self._store.put(self._path, self._token, -1, ephemeral=True)
                held = True
        if not held:
            self._balancer = None
        elif self._balancer is None:
            log.info("this broker runs the cluster's load balancer now")
            self._balancer = Balancer(self._settings)
        return held

    async def _round(self) -> None:
        assert self._balancer is not None
        scores: dict[str, float] = {}
        report_ids: dict[str, float] = {}
        topics: list[TopicLoad] = []
        for info in self._ownership.live_brokers():
            scores[info.broker_id] = float(info.load.get("loadScore", 0.0))
            report_ids[info.broker_id] = float(info.load.get("reportedAtMs", 0.0))
            for topic, score in info.topic_loads.items():
                loaded = await self._topic_load(topic, info.broker_id, score)
                if loaded is not None:
                    topics.append(loaded)
        moves = self._balancer.decide(
            scores, topics, time.monotonic(), report_ids, self._ownership.draining
        )
        for move in moves:
            await self._make(move)
        self.rounds += 1

    async def _topic_load(self, topic: str, reporter: str, score: float) -> TopicLoad | None:
        try:
            name = TopicName.parse(topic)
            record = await self._ownership.record(name)
        except (InvalidTopicNameError, MetadataStoreError, BrokerError) as error:
            # A name no broker would report, or a record that cannot be read now.
            log.debug("load balancer: topic %s left out: %s", topic, error)
            return None
        if record is None or self._ownership.serving_id(record) != reporter:
            return None
        # A move goes only to a member live on the data dir its copy is on.
        members = tuple(
            member
            for member in record.ensemble
            if member == reporter or self._ownership.holds_its_copy(record, member)
        )
        return TopicLoad(topic, reporter, members, float(score), swapping=bool(record.leaving))

    async def _make(self, move: Move) -> None:
        what = (
            f"topic {move.topic} ({move.score:.0f} units/s) from broker {move.source} "
            f"to {move.target}"
        )
        if move.leaving:
            await self._start_copy(move)
            return
        if self._mover is None:
            log.info("load balancer would move %s (topic moves are not available)", what)
            return
        log.info("load balancer moves %s", what)
        try:
            await self._mover.transfer(TopicName.parse(move.topic), move.target)
        except Exception as error:
            log.warning("load balancer could not move %s: %s", what, error)

    async def _start_copy(self, move: Move) -> None:
        what = (
            f"topic {move.topic} ({move.score:.0f} units/s, led by {move.source}): a copy "
            f"to broker {move.target} in place of member {move.leaving}"
        )
        log.info("load balancer starts %s", what)
        try:
            await start_copy(
                self._ownership, TopicName.parse(move.topic), move.target, move.leaving
            )
        except Exception as error:
            log.warning("load balancer could not start %s: %s", what, error)
