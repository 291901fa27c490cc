"""Send admission from other threads: a producer's sends handed over to its loop in
batches, with back-pressure on the sending thread.

A ThreadSender is made on the producer's loop and used from any thread. send()
costs the calling thread an append: messages wait in a deque and the loop is woken
once for all that arrive before it runs (one wake-up a batch, not one a message).
Callbacks are kept a list per producer batch and run on the loop, in send order,
when the batch's entry is durable or failed.

Promises: at most max_pending_messages sends are handed over and not yet settled
(their callback run); past that, with block_if_queue_full, the sending thread waits
for room, else the message is refused with ProducerQueueIsFull (told to its callback,
or raised when it has none, so a refused message is never lost unseen). A send from
the loop's own thread never waits: it is refused when the queue is full.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable

from stableline._errors import ProducerQueueIsFull, StableLineError
from stableline._types import MessageId, PartitionedMessageId
from stableline.aio._partitioned_producer import PartitionedProducer
from stableline.aio._producer import Producer

_log = logging.getLogger("stableline")
_new_tuple = tuple.__new__  # makes a MessageId in C, skipping its __new__ in Python
# How long a thread waiting for room sleeps between looks at whether the loop closed.
_ROOM_WAIT_S = 1.0

Callback = Callable[[StableLineError | None, MessageId | None], None]


def _call(callback: Callback, error: StableLineError | None, message_id) -> None:
    try:
        callback(error, message_id)
    except Exception:
        _log.exception("send_async callback %r raised", callback)


class ThreadSender:
    """Sends through `producer` from any thread; made on the producer's loop."""

    def __init__(
        self,
        producer: Producer | PartitionedProducer,
        txn_of: Callable[[object], object] | None = None,
    ):
        """`txn_of` turns a transaction given to send into the producer's own (for a
        face whose transactions wrap the asyncio ones); it runs on the loop, so send
        costs the calling thread nothing more."""
        self._producer = producer
        self._txn_of = txn_of
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        options = producer.options
        # Messages handed over by send, not yet given to the producer:
        # (content, callback, properties, partition_key, txn); content None stands
        # for a message refused at once (the queue was full), its callback to be told.
        self._handed: deque[tuple] = deque()
        self._wake_pending = False  # a hand_over is scheduled and has not started
        # Sends are numbered; those whose callback has run are counted. The
        # difference is the queue, at most max_pending_messages.
        self._max_pending = options.max_pending_messages
        self._block = options.block_if_queue_full
        self._admitted = itertools.count(1)
        self._settled = 0  # written on the loop thread only
        self._room = threading.Condition(threading.Lock())

    def send(
        self,
        content: bytes,
        callback: Callback | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> None:
        """From any thread: queue one message; callback(error, message_id) runs on the
        loop once it is durable or failed (None: fire and forget). Past
        max_pending_messages unsettled, the caller waits for room (block_if_queue_full)
        or the callback gets ProducerQueueIsFull; with no callback to tell, this call
        raises it."""
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable or None, not {type(callback).__name__}")
        number = next(self._admitted)
        refused = False
        if number - self._settled > self._max_pending:
            if not self._block or threading.get_ident() == self._loop_thread:
                refused = True
                content = None  # the loop counts it settled and tells the callback
            else:
                self._wait_for_room(number)
        self._handed.append((content, callback, properties, partition_key, txn))
        if not self._wake_pending:
            self._wake_pending = True
            self._loop.call_soon_threadsafe(self.hand_over)
        if refused and callback is None:
            raise ProducerQueueIsFull(
                f"producer for {self._producer.topic} holds {self._max_pending} messages not "
                "yet acknowledged, its max_pending_messages, and this send has no callback "
                "to tell: create it with block_if_queue_full=True, or flush() now and then"
            )

    def _wait_for_room(self, number: int) -> None:
        """Block the calling thread until send `number` is within max_pending_messages
        of the sends whose callbacks have run."""
        with self._room:
            while number - self._settled > self._max_pending:
                if self._loop.is_closed():
                    raise StableLineError(f"producer for {self._producer.topic} is closed")
                self._room.wait(timeout=_ROOM_WAIT_S)

    def hand_over(self) -> None:
        """On the loop: give the producer every message handed over so far (a send
        made on the loop after send() calls goes after them)."""
        self._wake_pending = False  # before taking: a later append wakes the loop again
        handed = self._handed
        producer = self._producer
        send = producer._send_admitted if self._block else producer.send_nowait
        txn_of = self._txn_of
        current = None
        waiting: list = []
        append = waiting.append
        take = handed.popleft
        while handed:
            content, callback, properties, partition_key, txn = take()
            try:
                if content is None:
                    raise producer._queue_full_error()
                if txn is not None and txn_of is not None:
                    txn = txn_of(txn)
                receipt = send(content, properties, partition_key, txn)
                batch_future, index = receipt
            except (StableLineError, TypeError, ValueError) as error:
                self._count_settled(1)
                if callback is not None:
                    _call(callback, error, None)
                continue
            if batch_future is not current:
                current = batch_future
                waiting = []
                append = waiting.append
                # A partitioned topic's receipt names its partition; the ids carry it.
                partition = getattr(receipt, "partition", -1)
                batch_future.add_done_callback(functools.partial(self._settle, waiting, partition))
            append((callback, index))

    def _count_settled(self, count: int) -> None:
        """`count` more sends are settled (durable or failed): wake senders waiting for room."""
        self._settled += count
        if self._block:
            with self._room:
                self._room.notify_all()

    def _settle(self, waiting: list, partition: int, batch_future: asyncio.Future) -> None:
        """A batch is durable or failed: run its messages' callbacks in send order."""
        if batch_future.cancelled():
            error = StableLineError("send cancelled")
        else:
            error = batch_future.exception()
        if error is None:
            ledger_id, entry_id = batch_future.result()
            for callback, index in waiting:
                if callback is not None:
                    try:
                        callback(
                            None,
                            _new_tuple(MessageId, (ledger_id, entry_id, index))
                            if partition < 0
                            else PartitionedMessageId(ledger_id, entry_id, index, partition),
                        )
                    except Exception:
                        _log.exception("send_async callback %r raised", callback)
        else:
            for callback, _index in waiting:
                if callback is not None:
                    _call(callback, error, None)
        self._count_settled(len(waiting))

    async def flush(self) -> None:
        """Wait until every message handed over so far is durable (or failed) and its
        callback has run."""
        self.hand_over()
        await self._producer.flush()

    async def close(self) -> None:
        """Close the producer after what was handed over is sent."""
        self.hand_over()
        await self._producer.close()
