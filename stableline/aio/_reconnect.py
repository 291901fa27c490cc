"""Reconnecting after the broker went away: which failures are worth waiting out, and
the backoff between attempts, bounded in total by the client's operation timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from stableline._errors import (
    ERROR_METADATA_KEY,
    BrokerUnavailable,
    NotReady,
    StableLineError,
    from_rpc_error,
)

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


# Statuses gRPC itself gives a stream whose connection broke mid-call (a write in
# flight reads "Internal error from Core"), as opposed to the broker's own errors,
# which always carry their error code in the trailing metadata.
_BROKEN_STREAM = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED)


def stream_failure(error: grpc.aio.AioRpcError) -> StableLineError:
    """The typed error for a stream that ended with `error`."""
    from_broker = any(key == ERROR_METADATA_KEY for key, _ in error.trailing_metadata() or ())
    if not from_broker and error.code() in _BROKEN_STREAM:
        return BrokerUnavailable(f"the connection to the broker broke: {error.details()}")
    return from_rpc_error(error)


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


async def read_until_gone(stream_owner, read: Callable, reopen: Callable, what: str):
    """Read a producer's or consumer's stream until it ends for good: after a transient
    break, reopen it (the client's backoff and time limit) and read on. Returns why it
    ended: the owner closed, a lasting error, or the broker staying away too long."""
    while True:
        failure = await read()
        if stream_owner._closed or not is_transient(failure):
            return failure
        old_call = stream_owner._call
        try:
            await stream_owner._client._with_retries(reopen, what)
        except StableLineError as error:
            return error
        finally:
            old_call.cancel()
