"""The async reader: no subscription, long-polling Fetch from a start position.

Opening a reader from `earliest` or a message id asks the broker nothing, so in a
cluster the first Fetch may be the call a non-owner refuses: the reader then asks
its client for the owner's connection (`find_owner`) and fetches there. It does the
same when the topic moves (its owner died and another member took it): the read
position is the reader's own, so it goes on where it was, on the new owner.
"""

from __future__ import annotations

import time
from collections import deque

from stableline._aborted_filter import AbortedFilter
from stableline._errors import Timeout, TopicNotFound
from stableline._proto import broker_pb2 as pb
from stableline._types import ISOLATION_LEVEL_PROTO, Message, MessageId, messages_of
from stableline.aio._connection import Connection
from stableline.aio._reconnect import FindOwner, on_following_owner
from stableline.aio.options import ReaderOptions

FETCH_MAX_ENTRIES = 500
# A single Fetch waits at most this long; read_next loops until its own deadline.
FETCH_MAX_WAIT_MS = 1000


class Reader:
    """Reads one topic from a start position with Fetch calls on its connection; made
    by Client.create_reader."""

    def __init__(
        self,
        connection: Connection,
        topic: str,
        options: ReaderOptions,
        find_owner: FindOwner | None = None,
    ):
        self.options = options
        self._connection = connection
        self._find_owner = find_owner
        self._topic = topic
        self._isolation = options.isolation_level
        self._start = options.start_message_id
        self._next = pb.Position(ledger_id=-1, entry_id=-1)
        # Messages of the start entry at or before this batch index are skipped.
        self._skip_through: tuple[int, int, int] | None = None
        self._buffer: deque[Message] = deque()
        self._closed = False
        self._aborted = AbortedFilter()

    async def _open(self) -> None:
        await self._start_at(self._start)

    async def _start_at(self, start: MessageId) -> None:
        """Read next after `start` (exclusive), or from earliest, or after the LAC."""
        self._skip_through = None
        self._next = pb.Position(ledger_id=-1, entry_id=-1)
        if start == MessageId.latest:
            last = await self._connection.last_confirmed(self._topic, missing_ok=True)
            self._next = pb.Position(ledger_id=last.ledger_id, entry_id=last.entry_id + 1)
        elif start != MessageId.earliest:
            self._next = pb.Position(ledger_id=start.ledger_id, entry_id=start.entry_id)
            # Pulsar's reader starts after the given message (exclusive).
            self._skip_through = (start.ledger_id, start.entry_id, start.batch_index)

    def topic(self) -> str:
        return self._topic

    async def _fetch(self, wait_ms: int) -> bool:
        """One Fetch; True when the read position moved (even if every entry was filtered)."""
        request = pb.FetchRequest(
            topic=self._topic,
            start=self._next,
            max_entries=FETCH_MAX_ENTRIES,
            isolation_level=ISOLATION_LEVEL_PROTO[self._isolation],
            max_wait_ms=wait_ms,
        )
        try:
            response = await self._fetch_on_owner(request, wait_ms)
        except TopicNotFound:
            return False  # nothing published yet: the topic appears on first produce
        self._aborted.add(response.aborted)
        for entry in response.entries:
            if self._aborted.is_aborted(entry):
                continue
            skip = -1
            if (
                self._skip_through is not None
                and (entry.ledger_id, entry.entry_id) == self._skip_through[:2]
            ):
                skip = self._skip_through[2] if self._skip_through[2] >= 0 else 2**31
            self._buffer.extend(messages_of(self._topic, entry, skip))
        moved = response.next_position != self._next
        self._next = response.next_position
        return moved

    async def _fetch_on_owner(self, request: pb.FetchRequest, wait_ms: int) -> pb.FetchResponse:
        """One Fetch on the topic's owner, following the topic when its broker says it
        is not the owner, went away, or names an owner that is down (a failover):
        within the client's operation timeout, as a producer's stream follows it."""
        response, self._connection = await on_following_owner(
            self._connection,
            lambda connection: self._fetch_once(connection, request, wait_ms),
            self._find_owner,
            f"reader on {self._topic}",
        )
        return response

    async def _fetch_once(
        self, connection: Connection, request: pb.FetchRequest, wait_ms: int
    ) -> pb.FetchResponse:
        # The broker holds the call up to wait_ms: the deadline allows for that.
        return await connection.unary(
            connection.broker.Fetch, request, connection.timeout_s + wait_ms / 1000
        )

    async def has_message_available(self) -> bool:
        while not self._buffer and await self._fetch(0):
            pass
        return bool(self._buffer)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while not self._buffer:
            if self._closed:
                raise Timeout("reader is closed")
            remaining_ms = FETCH_MAX_WAIT_MS
            if deadline is not None:
                remaining_ms = min(remaining_ms, int((deadline - time.monotonic()) * 1000))
                if remaining_ms <= 0:
                    raise Timeout(f"no message on {self._topic} within {timeout_millis} ms")
            await self._fetch(remaining_ms)
        return self._buffer.popleft()

    async def seek(self, message_id: MessageId) -> None:
        """Read `message_id` next, as a consumer's seek does (the start message id is
        exclusive, a seek is not); MessageId.earliest and .latest as named."""
        if not isinstance(message_id, MessageId):
            raise TypeError(
                f"a reader seeks to a MessageId, not {type(message_id).__name__} "
                "(a consumer also seeks to a publish time)"
            )
        self._buffer.clear()
        await self._start_at(message_id)
        if self._skip_through is not None:
            ledger_id, entry_id, batch_index = self._skip_through
            # Skip only what comes before it in its entry: nothing for a whole entry.
            self._skip_through = (ledger_id, entry_id, batch_index - 1) if batch_index > 0 else None

    async def close(self) -> None:
        self._closed = True
