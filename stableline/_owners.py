"""Where a topic's calls go: the redirect policy every client face follows (the
asyncio client, so the blocking one, and the Spark source).

A call on a topic is made on the broker believed to own it: the owner a lookup named
before, else the first broker of the service URL. A broker that does not own the
topic refuses with NotOwner; the topic is then looked up on the service URL's
brokers in turn (the first that answers names the owner, one not reached is passed
over) and the call made again on the owner, at most `max_redirects` times, after
which the last answer, NotOwner included, is the caller's. A broker that cannot be
reached is passed over the same way when a lookup may name another: with several
brokers in the service URL (when the policy allows it, `past_unavailable`), or when
it was the owner a lookup named (it may have died, and another broker taken the
topic over). The owner a call was refused or not answered by is forgotten first.

The policy is kept apart from the I/O: Redirects decides, and the two small loops
below (one blocking, one awaiting) carry it out, so both faces follow it alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from stableline._errors import BrokerUnavailable, NotOwner, StableLineError

T = TypeVar("T")
C = TypeVar("C")

# Lookups a call follows before it gives up with NotOwner: an owner changes rarely,
# so more than a couple of NotOwner answers in a row means the brokers disagree.
MAX_REDIRECTS = 3


@dataclass(frozen=True, slots=True)
class RedirectPolicy:
    """How far a call follows redirects."""

    max_redirects: int = MAX_REDIRECTS
    # Whether a broker not reached is passed over for a lookup on the others when
    # several brokers are named (an owner a lookup named is always passed over).
    past_unavailable: bool = True

    def redirects(self, several_seeds: bool) -> Redirects:
        return Redirects(self, several_seeds)


class Redirects:
    """One call's redirects: after each failure, whether to look the topic up and try
    again, or let the failure be the caller's."""

    __slots__ = ("_left", "_past_unavailable")

    def __init__(self, policy: RedirectPolicy, several_seeds: bool):
        self._left = policy.max_redirects
        self._past_unavailable = policy.past_unavailable and several_seeds

    @property
    def last_try(self) -> bool:
        """No redirect is left: what the next try answers is the caller's."""
        return self._left == 0

    def follow(self, error: StableLineError, owner_known: bool) -> bool:
        """Whether `error` sends the call to a lookup (counting one redirect)."""
        if self._left == 0:
            return False
        if isinstance(error, NotOwner):
            self._left -= 1
            return True
        if isinstance(error, BrokerUnavailable) and (self._past_unavailable or owner_known):
            self._left -= 1
            return True
        return False


def first_answer(seeds: Iterable[str], ask: Callable[[str], T]) -> T:
    """`ask(seed)` of each seed in turn until one answers; one not reached
    (BrokerUnavailable) is passed over, and the last such failure raised if none
    answers."""
    failure: BrokerUnavailable | None = None
    for seed in seeds:
        try:
            return ask(seed)
        except BrokerUnavailable as error:
            failure = error
    assert failure is not None, "no seed to ask"
    raise failure


async def first_answer_async(seeds: Iterable[str], ask: Callable[[str], Awaitable[T]]) -> T:
    """first_answer, awaiting each `ask(seed)`."""
    failure: BrokerUnavailable | None = None
    for seed in seeds:
        try:
            return await ask(seed)
        except BrokerUnavailable as error:
            failure = error
    assert failure is not None, "no seed to ask"
    raise failure


def on_owner(
    redirects: Redirects,
    first: C,
    call: Callable[[C], T],
    lookup: Callable[[], C],
    owner_known: bool = False,
) -> tuple[T, C]:
    """`call(connection)` on `first`, then, while `redirects` follows the failure, on
    the owner `lookup()` names. (The answer, the connection that gave it.)"""
    connection = first
    while not redirects.last_try:
        try:
            return call(connection), connection
        except StableLineError as error:
            if not redirects.follow(error, owner_known):
                raise
        connection = lookup()
        owner_known = True
    return call(connection), connection


async def on_owner_async(
    redirects: Redirects,
    first: C,
    call: Callable[[C], Awaitable[T]],
    lookup: Callable[[], Awaitable[C]],
    owner_known: bool = False,
    forget: Callable[[], None] | None = None,
) -> T:
    """on_owner, awaiting; `forget()` drops a cached owner that answered NotOwner or
    could not be reached."""
    connection = first
    while not redirects.last_try:
        try:
            return await call(connection)
        except StableLineError as error:
            if not redirects.follow(error, owner_known):
                raise
            if forget is not None:
                forget()
        connection = await lookup()
        owner_known = True
    return await call(connection)
