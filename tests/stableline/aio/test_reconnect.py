"""with_retries: transient failures are retried with growing waits, others surface at
once, and the budget bounds the total."""

from __future__ import annotations

import time

import pytest

from stableline._errors import BrokerUnavailable, NotReady, TopicNotFound
from stableline.aio._reconnect import Backoff, is_transient, with_retries


async def test_transient_failures_are_retried_until_the_attempt_succeeds():
    failures = [BrokerUnavailable("down"), NotReady("recovering")]

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "up"

    assert await with_retries(attempt, Backoff(initial_s=0.001), 5.0, "open") == "up"
    assert failures == []


async def test_other_failures_surface_at_once():
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise TopicNotFound("no such topic")

    with pytest.raises(TopicNotFound):
        await with_retries(attempt, Backoff(initial_s=0.001), 5.0, "open")
    assert calls == 1


async def test_past_the_budget_the_failure_is_broker_unavailable_saying_what_was_tried():
    started = time.monotonic()

    async def attempt() -> None:
        raise BrokerUnavailable("connection refused")

    with pytest.raises(BrokerUnavailable, match=r"producer p on t: .*0\.3 s.*connection refused"):
        await with_retries(attempt, Backoff(initial_s=0.01, max_s=0.05), 0.3, "producer p on t")
    assert 0.3 <= time.monotonic() - started < 2.0


def test_only_a_broken_connection_or_a_starting_broker_is_transient():
    assert is_transient(BrokerUnavailable("x")) and is_transient(NotReady("x"))
    assert not is_transient(TopicNotFound("x"))


def test_a_backoff_must_grow_from_a_positive_start():
    with pytest.raises(ValueError):
        Backoff(initial_s=0)
    with pytest.raises(ValueError):
        Backoff(initial_s=2, max_s=1)
