"""Reconnecting after the broker went away: which failures are worth waiting out, and
the backoff between attempts, bounded in total by the client's operation timeout.
A stream the broker ended because its token expired is reopened too, when the
client's token provider gives a fresh token.

A paused or hung broker breaks nothing: its TCP connection stays up and gRPC would
wait for its keepalive (about 50 s) or a connection attempt's own timeout (20 s).
So every attempt is cut at the operation timeout's deadline, and a stream whose
requests go unanswered that long is given up on (AnswerWatch): no call waits past
operation_timeout_seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from stableline._errors import (
    AuthenticationError,
    BrokerUnavailable,
    NotOwner,
    NotReady,
    StableLineError,
    TopicUnavailable,
)

if TYPE_CHECKING:
    from stableline.aio._connection import Connection

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between reconnection attempts: initial_s, times multiplier each time, at
    most max_s. The total is bounded by the client's operation_timeout_seconds."""

    initial_s: float = 0.05
    # Kafka's reconnect.backoff.max.ms: a broker that took a dead one's topics or
    # shards over is found within a second of its takeover.
    max_s: float = 1.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s < self.initial_s or self.multiplier < 1:
            raise ValueError("Backoff needs 0 < initial_s <= max_s and multiplier >= 1")


def is_transient(error: BaseException) -> bool:
    """A broken connection or a broker still starting: another attempt may succeed."""
    return type(error) in (BrokerUnavailable, NotReady)


def owner_may_have_moved(error: BaseException) -> bool:
    """A failure a fresh lookup of the topic may answer: the broker is gone or not
    ready (another may take its topics over), it no longer owns the topic, or the
    owner it knows is down (it may name that owner until its session lapses)."""
    return is_transient(error) or type(error) in (NotOwner, TopicUnavailable)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    backoff: Backoff,
    budget_s: float,
    what: str,
    retried: Callable[[BaseException], bool] = is_transient,
) -> T:
    """`attempt()` until it succeeds, retrying the failures `retried` allows (transient
    ones) with backoff; after `budget_s` the last failure surfaces as
    BrokerUnavailable saying what was tried."""
    deadline = time.monotonic() + budget_s
    delay = backoff.initial_s
    while True:
        try:
            return await within(deadline, attempt(), what, budget_s)
        except StableLineError as error:
            if not retried(error):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if "operation_timeout_seconds" in str(error):
                    raise  # cut at the deadline: it says so already
                raise BrokerUnavailable(
                    f"{what}: the broker stayed unreachable for {budget_s:g} s "
                    f"(operation_timeout_seconds): {error}"
                ) from error
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * backoff.multiplier, backoff.max_s)


async def within(deadline: float, awaitable: Awaitable[T], what: str, budget_s: float) -> T:
    """`awaitable`, cut at `deadline` (monotonic) with a BrokerUnavailable: a broker
    that accepted the connection and then said nothing is not waited for."""
    try:
        async with asyncio.timeout_at(_loop_time(deadline)):
            return await awaitable
    except TimeoutError:
        raise BrokerUnavailable(
            f"{what}: the broker did not answer within {budget_s:g} s (operation_timeout_seconds)"
        ) from None


def _loop_time(monotonic_deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_deadline - time.monotonic())


def cancelled_by_watch(watch: AnswerWatch) -> bool:
    """A stream's read raised CancelledError: true when the watch cancelled the call
    (the broker was silent), false when the reading task itself is being cancelled."""
    task = asyncio.current_task()
    return watch.silent and (task is None or not task.cancelling())


class AnswerWatch:
    """Whether a stream's broker still answers what it was sent.

    `expect()` when a request that awaits an answer goes out, `answered(more)` when
    an answer comes (`more`: others still await one). A stream with something awaited
    and no answer for `timeout_s` is silent: `on_silent` runs (it cancels the call, so
    its reader sees the stream end) and `silent` stays true. The clock costs one float
    per answer; the timer is only moved when it fires.
    """

    __slots__ = ("_on_silent", "_since", "_timer", "silent", "timeout_s")

    def __init__(self, timeout_s: float, on_silent: Callable[[], None]):
        assert timeout_s > 0
        self.timeout_s = timeout_s
        self.silent = False
        self._on_silent = on_silent
        self._since: float | None = None  # awaiting an answer since (loop time)
        self._timer: asyncio.TimerHandle | None = None

    def expect(self) -> None:
        if self._since is None:
            loop = asyncio.get_running_loop()
            self._since = loop.time()
            if self._timer is None:
                self._timer = loop.call_at(self._since + self.timeout_s, self._check)

    def answered(self, more: bool) -> None:
        self._since = asyncio.get_running_loop().time() if more else None

    def reset(self) -> None:
        """A new stream: nothing is awaited on it yet and it has not been silent."""
        self.stop()
        self.silent = False

    def stop(self) -> None:
        self._since = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._since is None:
            return
        loop = asyncio.get_running_loop()
        due = self._since + self.timeout_s
        if loop.time() < due:
            self._timer = loop.call_at(due, self._check)
            return
        self._since = None
        self.silent = True
        self._on_silent()


# Where to try a topic's stream or call next after it failed on a broker (the
# connection and the failure): the owner a fresh lookup names, or the same broker
# when no other could be named (Client._owner_after).
FindOwner = Callable[["Connection", StableLineError], Awaitable["Connection"]]


async def on_following_owner(
    connection: Connection,
    attempt: Callable[[Connection], Awaitable[T]],
    find_owner: FindOwner | None,
    what: str,
) -> tuple[T, Connection]:
    """`attempt(connection)`, retried with the connection's backoff within the
    operation timeout; (its answer, the connection that gave it). Without
    `find_owner`, every try is on `connection` and only transient failures are
    retried. With it, a try that failed in a way a lookup may answer
    (owner_may_have_moved) sends the next one where `find_owner` says: so a stream
    whose owner died is reopened on the broker that took its topic over."""
    if find_owner is None:
        answer = await connection.with_retries(lambda: attempt(connection), what)
        return answer, connection
    current = connection
    failure: StableLineError | None = None

    async def follow() -> T:
        nonlocal current, failure
        if failure is not None:
            current = await find_owner(current, failure)
            failure = None  # only once a lookup answered: else the next try asks again
        try:
            return await attempt(current)
        except StableLineError as error:
            if owner_may_have_moved(error):
                failure = error
            raise

    answer = await with_retries(
        follow, connection.backoff, connection.timeout_s, what, retried=owner_may_have_moved
    )
    return answer, current


async def read_until_gone(
    connection: Callable[[], Connection],
    read: Callable[[], Awaitable[StableLineError]],
    reopen: Callable[[], Awaitable[None]],
    is_closed: Callable[[], bool],
    what: str,
    stream_token: Callable[[], str | None],
    silent: Callable[[], bool] | None = None,
) -> StableLineError:
    """Read a producer's or consumer's stream until it ends for good: after a transient
    break or one that says the topic moved, or an expired token when the token provider gives a fresh token, reopen it
    and read on. Returns why it ended: the owner closed, a lasting error, or the
    broker staying away too long. `connection()` is the stream's current connection;
    `reopen` replaces the broken call with a new one, with its retries and time limit
    (on_following_owner); `stream_token` is the token the current call was opened
    with; `silent()` says the stream ended because its broker answered nothing for
    the operation timeout (AnswerWatch), which is final."""
    while True:
        failure = await read()
        if is_closed():
            return failure
        current = connection()
        if silent is not None and silent():
            # The broker kept the connection and answered nothing for the whole
            # operation timeout: the time to wait it out is spent.
            return BrokerUnavailable(
                f"{what}: the broker at {current.address} answered nothing for "
                f"{current.timeout_s:g} s (operation_timeout_seconds)"
            )
        if type(failure) is AuthenticationError:
            final = current.refused_for_good(failure, stream_token())
            if final is not None:
                return final
        elif not owner_may_have_moved(failure):
            return failure
        try:
            await reopen()
        except StableLineError as error:
            return error
