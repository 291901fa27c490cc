"""The redirect policy the asyncio client and the Spark source share."""

from __future__ import annotations

import pytest

from stableline._errors import BrokerUnavailable, NotOwner, Timeout
from stableline._owners import (
    MAX_REDIRECTS,
    RedirectPolicy,
    first_answer,
    first_answer_async,
    on_owner,
    on_owner_async,
)


def _answers(*outcomes):
    """A call answering each outcome in turn (an exception is raised)."""
    made = []

    def call(connection):
        made.append(connection)
        outcome = outcomes[len(made) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return call, made


def test_a_not_owner_is_followed_once_to_the_owner_a_lookup_names():
    call, made = _answers(NotOwner("x"), "answer")
    redirects = RedirectPolicy(max_redirects=1, past_unavailable=False).redirects(False)
    assert on_owner(redirects, "first", call, lambda: "owner") == ("answer", "owner")
    assert made == ["first", "owner"]


def test_past_the_redirects_the_last_not_owner_is_the_caller_s():
    call, made = _answers(*[NotOwner("x")] * (MAX_REDIRECTS + 1))
    with pytest.raises(NotOwner):
        on_owner(RedirectPolicy().redirects(False), "first", call, lambda: "owner")
    assert len(made) == MAX_REDIRECTS + 1


def test_an_unreachable_first_broker_is_passed_over_only_with_several_seeds():
    call, made = _answers(BrokerUnavailable("down"), "answer")
    assert on_owner(RedirectPolicy().redirects(True), "first", call, lambda: "owner") == (
        "answer",
        "owner",
    )
    assert made == ["first", "owner"]
    call, _ = _answers(BrokerUnavailable("down"), "answer")
    with pytest.raises(BrokerUnavailable):
        on_owner(RedirectPolicy().redirects(False), "first", call, lambda: "owner")
    # A known owner away may have been replaced (a replicated topic fails over): it is
    # passed over for a lookup too, within the same redirect bound.
    call, made = _answers(BrokerUnavailable("down"), "answer")
    assert on_owner(
        RedirectPolicy().redirects(True), "first", call, lambda: "o", owner_known=True
    ) == ("answer", "o")
    assert made == ["first", "o"]


def test_other_errors_are_never_redirected():
    call, _made = _answers(Timeout("slow"))
    with pytest.raises(Timeout):
        on_owner(RedirectPolicy().redirects(True), "first", call, lambda: "owner")


async def test_the_awaiting_loop_follows_the_same_policy_and_forgets_a_stale_owner():
    forgotten = []
    call, made = _answers(NotOwner("x"), NotOwner("y"), "answer")

    async def acall(connection):
        return call(connection)

    async def lookup():
        return f"owner{len(made)}"

    answer = await on_owner_async(
        RedirectPolicy().redirects(False),
        "cached",
        acall,
        lookup,
        True,
        lambda: forgotten.append(1),
    )
    assert (answer, made, forgotten) == ("answer", ["cached", "owner1", "owner2"], [1, 1])


async def test_the_first_seed_that_answers_names_the_owner():
    def ask(seed):
        if seed != "c":
            raise BrokerUnavailable(seed)
        return "owner"

    async def aask(seed):
        return ask(seed)

    assert first_answer(["a", "b", "c"], ask) == "owner"
    assert await first_answer_async(["a", "c"], aask) == "owner"
    with pytest.raises(BrokerUnavailable, match="b"):
        first_answer(["a", "b"], ask)
