"""Acknowledgment grouping, as Pulsar's: acks wait ack_grouping_time_ms (or until
ack_grouping_max_size of them) and go as one request.

An AckGrouping is made on its consumer's loop; add() may be called from any thread
and costs the caller an append (a received Message is appended as its entry and
index, one extend: atomic, so the pairs stay whole whatever threads ack). The loop
takes the group when its timer fires or it is full and sends it; the group is cut
into runs of one entry each, so the ack costs per entry (a run that is a whole entry
goes as one id). Promises: confirm() returns once every ack added before it was
answered by the broker; a refused ack is logged (one bad id refuses only itself);
when a stream is replaced, the acks not yet sent go with the reopen, ahead of the
redelivery, so what was acknowledged is not given out again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
import threading
from collections import deque
from itertools import groupby, repeat, starmap
from typing import TYPE_CHECKING

from stableline._errors import InvalidMessageId, StableLineError, from_code
from stableline._types import Message, MessageId, Messages

if TYPE_CHECKING:
    from stableline.aio._consumer import Consumer
    from stableline.aio._multi_consumer import MultiTopicConsumer

_log = logging.getLogger("stableline")


def _runs_of(flat: list) -> Messages:
    """Acknowledged messages, kept as entry, index, entry, index... (their Messages
    are not held), as runs of one entry each, as batch_receive gives them. Grouped
    in C (groupby by identity, slices): the loop thread spends no Python step per
    message. A run that counts as many indexes as its entry has is made of distinct
    ones, or the ack would name the whole entry for a message acknowledged twice."""
    entries, indexes = flat[::2], flat[1::2]
    runs = []
    start = 0
    for entry, same in groupby(entries):
        end = start + len(list(same))
        run = indexes[start:end]
        if len(run) == entry.num_messages and len(set(run)) != len(run):
            run = sorted(set(run))
        runs.append((entry, run))
        start = end
    return Messages(runs)


def _id_text(item: Message | MessageId) -> str:
    return str(item.message_id() if isinstance(item, Message) else item)


class AckGrouping:
    """The grouped acks of one consumer (of one topic, or of several)."""

    def __init__(
        self,
        consumer: Consumer | MultiTopicConsumer,
        time_ms: int,
        max_size: int,
        several: bool,
    ):
        self._consumer = consumer
        self._loop = asyncio.get_running_loop()
        self._several = several
        # Received Messages as two items each (entry, index), and anything else.
        self._acks: deque = deque()
        self._others: deque[Message | MessageId] = deque()
        self._time_s = time_ms / 1000
        self._max_size = max_size
        # add() stays an append until _acks holds _wake_at items (two a message): 1
        # while no timer is armed (the first ack arms it), room for max_size acks
        # while one is, past any size while a full group waits to be taken. Written
        # under _lock; read by the caller without it (the loop resets it before it
        # takes the acks, so an ack appended after a take always sees the reset: no
        # group is left without a timer).
        self._lock = threading.Lock()
        self._wake_at = 1
        self._timer_armed = False
        self._full_pending = False
        self._requests: set[asyncio.Task] = set()
        # Groups taken whose request is not yet made (token -> group): a reopen
        # sends them ahead of the redelivery instead.
        self._unsent: dict[int, Messages | list] = {}
        self._tokens = itertools.count()
        consumer.add_reopen_listener(self._on_reopen)

    def add(self, message: Message | MessageId | list | Messages) -> None:
        """From any thread: group this ack (a message, an id, or a list of them)."""
        if type(message) is Message:
            acks = self._acks
            acks.extend(message)  # entry, index: the Message itself is not kept
            if len(acks) >= self._wake_at:
                self._grew()
            return
        others = self._others
        consumer_of = self._consumer._consumer_of if self._several else None
        if isinstance(message, MessageId | Message):
            if consumer_of is not None:
                consumer_of(message)  # a MessageId names no topic: raises
            others.append(message)
        elif isinstance(message, list | Messages):
            for item in message:
                if not isinstance(item, Message | MessageId):
                    raise TypeError(f"expected a Message or MessageId, not {type(item).__name__}")
                if consumer_of is not None and type(item) is not Message:
                    consumer_of(item)
            others.extend(message)
        else:
            raise TypeError(f"expected a Message or MessageId, not {type(message).__name__}")
        self._grew()

    def _grew(self) -> None:
        """The group reached _wake_at, or took other acks than Messages: arm the
        timer, or have a full group sent; the next wake-up comes when the Messages
        and the others together make max_size."""
        with self._lock:
            others = len(self._others)
            if not self._timer_armed:
                self._timer_armed = True
                self._loop.call_soon_threadsafe(self._arm_timer)
            if self._full_pending:
                return  # the wake-up is past any size until the loop takes the group
            if len(self._acks) // 2 + others >= self._max_size:
                self._full_pending = True
                self._wake_at = sys.maxsize
                self._loop.call_soon_threadsafe(self._send_full)
            else:
                self._wake_at = 2 * (self._max_size - others)

    def _arm_timer(self) -> None:
        self._loop.call_later(self._time_s, self._send_timed)

    def _send_timed(self) -> None:
        with self._lock:  # before taking: a later ack arms a new timer
            self._timer_armed = False
            self._wake_at = 1
        self._send()

    def _send_full(self) -> None:
        with self._lock:
            self._full_pending = False
            self._wake_at = 2 * self._max_size if self._timer_armed else 1
        self._send()

    def _send(self) -> None:
        """On the loop: send every grouped ack as one request. Appends that come
        after a deque's len() was read wait for the next group."""
        group = self._take()
        if group:
            self._start(group)

    def _take(self) -> Messages | list:
        """On the loop: every grouped ack, taken."""
        acks = self._acks
        flat = list(starmap(acks.popleft, repeat((), len(acks))))
        assert len(flat) % 2 == 0, "an ack is appended as entry and index in one extend"
        group: Messages | list = _runs_of(flat)
        others = self._others
        if others:
            group = [*group, *starmap(others.popleft, repeat((), len(others)))]
        return group

    def _start(self, group: Messages | list) -> None:
        token = next(self._tokens)
        self._unsent[token] = group
        task = self._loop.create_task(self._send_group(token))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _send_group(self, token: int) -> None:
        group = self._unsent.pop(token, None)
        if group is None:
            return  # a reopen sent it first
        try:
            await self._consumer.acknowledge(group)
        except InvalidMessageId:
            # The request is all or nothing: ack one by one so that one bad id in the
            # group refuses only itself.
            for item in group:
                try:
                    await self._consumer.acknowledge(item)
                except StableLineError as error:
                    _log.warning("acknowledgment of %s refused: %s", _id_text(item), error)
        except StableLineError as error:
            _log.warning("acknowledgment of %d messages failed: %s", len(group), error)

    async def confirm(self) -> None:
        """On the loop: send the grouped acks now and wait for the broker's answers."""
        self._send()
        if self._requests:
            await asyncio.gather(*self._requests, return_exceptions=True)

    def _on_reopen(self, topic: str) -> None:
        """On the loop, when a stream is replaced (before the broker redelivers):
        grouped acks not yet sent go with the reopen, ahead of the redelivery."""
        groups = [*self._unsent.values(), self._take()]
        self._unsent.clear()
        outer = self._consumer
        consumer = outer._consumers.get(topic) if self._several else outer
        for group in groups:
            if not group:
                continue
            if consumer is None:
                self._start(group)
                continue
            mine: Messages | list = group
            if self._several:
                items = list(group)
                mine = [i for i in items if outer._consumer_of(i) is consumer]
                if len(mine) != len(items):
                    self._start([i for i in items if outer._consumer_of(i) is not consumer])
            if mine:
                task = self._loop.create_task(_answered(consumer._ack_with_reopen(mine), len(mine)))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)


async def _answered(answer: asyncio.Future, count: int) -> None:
    done = await answer
    if done.error_code:
        error = from_code(done.error_code, done.error_message)
        _log.warning("acknowledgment of %d messages failed: %s", count, error)
