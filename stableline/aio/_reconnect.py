"""Reconnecting after the broker went away: which failures are worth waiting out, and
the backoff between attempts, bounded in total by the client's operation timeout.
A stream the broker ended because its token expired is reopened too, when the
client's token provider gives a fresh token."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from stableline._errors import AuthenticationError, BrokerUnavailable, NotReady, StableLineError

if TYPE_CHECKING:
    from stableline.aio._connection import Connection

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between reconnection attempts: initial_s, times multiplier each time, at
    most max_s. The total is bounded by the client's operation_timeout_seconds."""

    initial_s: float = 0.05
    max_s: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s < self.initial_s or self.multiplier < 1:
            raise ValueError("Backoff needs 0 < initial_s <= max_s and multiplier >= 1")


def is_transient(error: BaseException) -> bool:
    """A broken connection or a broker still starting: another attempt may succeed."""
    return type(error) in (BrokerUnavailable, NotReady)


async def with_retries(
    attempt: Callable[[], Awaitable[T]], backoff: Backoff, budget_s: float, what: str
) -> T:
    """`attempt()` until it succeeds, retrying transient failures with backoff; after
    `budget_s` the last failure surfaces as BrokerUnavailable saying what was tried."""
    deadline = time.monotonic() + budget_s
    delay = backoff.initial_s
    while True:
        try:
            return await attempt()
        except StableLineError as error:
            if not is_transient(error):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerUnavailable(
                    f"{what}: the broker stayed unreachable for {budget_s:g} s ({error})"
                ) from error
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * backoff.multiplier, backoff.max_s)


async def read_until_gone(
    connection: Connection,
    read: Callable[[], Awaitable[StableLineError]],
    reopen: Callable[[], Awaitable[None]],
    is_closed: Callable[[], bool],
    what: str,
    stream_token: Callable[[], str | None],
) -> StableLineError:
    """Read a producer's or consumer's stream until it ends for good: after a transient
    break, or an expired token when the token provider gives a fresh one, reopen it
    (the connection's backoff and time limit) and read on. Returns why it ended: the
    owner closed, a lasting error, or the broker staying away too long. `reopen`
    replaces the broken call with a new one; `stream_token` is the token the current
    call was opened with."""
    while True:
        failure = await read()
        if is_closed():
            return failure
        if type(failure) is AuthenticationError:
            final = connection.refused_for_good(failure, stream_token())
            if final is not None:
                return final
        elif not is_transient(failure):
            return failure
        try:
            await connection.with_retries(reopen, what)
        except StableLineError as error:
            return error
