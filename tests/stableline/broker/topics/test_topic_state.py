"""A topic's lifecycle in the registry: the table of legal moves (every one
accepted, every other refused), and the registry's topics going through it."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry, _TopicSlot
from stableline.broker.topics.topic_state import (
    IllegalTopicTransition,
    TopicState,
    check_topic_transition,
)
from stableline.topic_name import TopicName

U, C, L, D, X = (
    TopicState.UNLOADED,
    TopicState.CREATING,
    TopicState.LOADING,
    TopicState.LOADED,
    TopicState.UNLOADING,
)
# Written out again on purpose: the table must say exactly this.
LEGAL = {(U, C), (C, U), (U, L), (L, D), (L, U), (D, X), (D, U), (X, U)}
ALL_MOVES = list(itertools.product(TopicState, TopicState))
NAME = TopicName.parse("persistent://public/default/life")


def _ids(move: tuple[TopicState, TopicState]) -> str:
    return f"{move[0].value}->{move[1].value}"


@pytest.mark.parametrize("move", sorted(LEGAL, key=_ids), ids=_ids)
def test_every_legal_move_is_accepted(move):
    old, new = move
    assert old.can_transition_to(new)
    check_topic_transition("t", old, new)


@pytest.mark.parametrize("move", [m for m in ALL_MOVES if m not in LEGAL], ids=_ids)
def test_every_other_move_is_refused(move):
    old, new = move
    assert not old.can_transition_to(new)
    with pytest.raises(IllegalTopicTransition, match=f"from {old.value} to {new.value}"):
        check_topic_transition("t", old, new)


def test_every_state_leads_back_to_unloaded():
    for state in TopicState:
        seen, frontier = {state}, [state]
        while frontier:
            current = frontier.pop()
            for new in TopicState:
                if current.can_transition_to(new) and new not in seen:
                    seen.add(new)
                    frontier.append(new)
        assert U in seen or state is U, state


# ------------------------------------------------------------ the registry


def _hold_fsyncs(registry: TopicRegistry, monkeypatch) -> asyncio.Event:
    """The store's fsyncs wait for the event returned: a creation stays under way."""
    gate = asyncio.Event()
    sync = registry.store.sync_async

    async def held() -> None:
        await gate.wait()
        await sync()

    monkeypatch.setattr(registry.store, "sync_async", held)
    return gate


async def _until(condition) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_a_topic_moves_through_its_lifecycle(registry):
    assert registry.state(NAME) is U
    topic = await registry.get(NAME)
    assert registry.state(NAME) is D
    await topic.wait_recovered()
    assert await registry.unload_idle(0) == 1
    assert registry.state(NAME) is U and registry.exists(NAME)
    await registry.get(NAME, create=False)
    assert registry.state(NAME) is D
    await registry.delete(NAME)
    assert registry.state(NAME) is U and not registry.exists(NAME)


async def test_a_creation_under_way_is_creating_and_taken_but_not_listed(registry, monkeypatch):
    gate = _hold_fsyncs(registry, monkeypatch)
    creating = asyncio.create_task(registry.create(NAME))
    await _until(lambda: registry.state(NAME) is C)
    assert registry.taken(NAME) and not registry.exists(NAME)
    gate.set()
    assert await creating
    assert registry.state(NAME) is U and registry.exists(NAME)


async def test_a_failed_creation_leaves_nothing(registry, monkeypatch):
    async def refused(namespace: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(registry.namespace_policies, "add", refused)
    with pytest.raises(OSError):
        await registry.create(NAME)
    assert registry.state(NAME) is U and not registry.taken(NAME)
    assert registry.topics_in(NAME.namespace_path) == 0


async def test_a_use_during_a_creation_waits_for_it_then_loads(registry, monkeypatch):
    gate = _hold_fsyncs(registry, monkeypatch)
    creating = asyncio.create_task(registry.create(NAME))
    await _until(lambda: registry.state(NAME) is C)
    using = asyncio.create_task(registry.get(NAME, create=False))
    await asyncio.sleep(0.01)
    assert not using.done() and registry.state(NAME) is C
    gate.set()
    assert await creating
    topic = await using
    assert registry.state(NAME) is D and registry.loaded() == [topic]


async def test_a_first_use_is_loading_and_an_admin_create_meanwhile_creates_once(
    registry, monkeypatch
):
    gate = _hold_fsyncs(registry, monkeypatch)
    using = asyncio.create_task(registry.get(NAME))
    await _until(lambda: registry.state(NAME) is L)
    assert registry.taken(NAME) and not registry.exists(NAME)
    creating = asyncio.create_task(registry.create(NAME))
    await asyncio.sleep(0.01)
    assert not creating.done()  # the load creates it: the admin's create waits
    gate.set()
    topic = await using
    assert await creating is False
    assert registry.state(NAME) is D and registry.loaded() == [topic]
    assert registry.topics_in(NAME.namespace_path) == 1


async def test_an_unload_under_way_is_unloading_and_a_use_waits_then_loads_anew(
    registry, monkeypatch
):
    topic = await registry.get(NAME)
    await topic.wait_recovered()
    gate = asyncio.Event()
    close_topic = registry._close_topic

    async def held(key, closing):
        await gate.wait()
        await close_topic(key, closing)

    monkeypatch.setattr(registry, "_close_topic", held)
    unloading = asyncio.create_task(registry.unload_idle(0))
    await _until(lambda: registry.state(NAME) is X)
    assert registry.loaded() == []
    using = asyncio.create_task(registry.get(NAME, create=False))
    await asyncio.sleep(0.01)
    assert not using.done()
    gate.set()
    assert await unloading == 1
    again = await using
    assert again is not topic and registry.state(NAME) is D


async def test_a_failed_load_leaves_the_topic_unloaded(registry, monkeypatch):
    from stableline.broker.topics import registry as registry_module

    async def refused(*args, **kwargs):
        raise OSError("cannot open")

    monkeypatch.setattr(registry_module.ManagedLedger, "open", refused)
    with pytest.raises(OSError):
        await registry.get(NAME)
    assert registry.state(NAME) is U and not registry.exists(NAME)


async def test_close_leaves_every_topic_unloaded(registry):
    await registry.get(NAME)
    await registry.close()
    assert registry.state(NAME) is U and registry.loaded() == []


def test_the_registry_moves_only_through_the_table(registry):
    slot = _TopicSlot()
    with pytest.raises(IllegalTopicTransition, match="cannot move from Unloaded to Loaded"):
        registry._move(str(NAME), slot, D)
    assert slot.state is U and registry.state(NAME) is U  # nothing held
    registry._move(str(NAME), slot, L)
    assert registry.state(NAME) is L
    with pytest.raises(IllegalTopicTransition, match="cannot move from Loading to Unloading"):
        registry._move(str(NAME), slot, X)
    registry._move(str(NAME), slot, U)
    assert registry.state(NAME) is U


# ------------------------------------------------------------ a model, under concurrency

KEYS = [TopicName.parse(f"persistent://public/m{i % 2}/t{i}") for i in range(4)]


async def _step(registry: TopicRegistry, rng, model: set[str], made: set[str]) -> None:
    """One random operation; `model`: the names that exist; `made`: those whose
    create() answered True since they were last deleted."""
    name = rng.choice(KEYS)
    operation = rng.choice(("create", "use", "use-existing", "unload"))
    if operation == "create":
        if await registry.create(name):
            # Made once between deletes, however many create or use it at once.
            assert str(name) not in made, name
            made.add(str(name))
        model.add(str(name))
    elif operation == "use":
        topic = await registry.get(name)
        model.add(str(name))
        assert topic.name == name
    elif operation == "use-existing":
        try:
            await registry.get(name, create=False)
        except TopicNotFoundError:
            assert str(name) not in model
    else:
        await registry.unload_idle(0)


def _check(registry: TopicRegistry, model: set[str]) -> None:
    """At rest: every topic loaded or unloaded, the names and counts as the model says."""
    assert registry.names() == sorted(model)
    loaded = {str(topic.name) for topic in registry.loaded()}
    for name in KEYS:
        state = registry.state(name)
        assert state in (U, D), (name, state)
        assert (state is D) is (str(name) in loaded)
        assert not registry.taken(name) or str(name) in model
    for namespace in ("public/m0", "public/m1"):
        expected = sum(n.startswith(f"persistent://{namespace}/") for n in model)
        assert registry.topics_in(namespace) == expected


@pytest.mark.parametrize("seed", range(4))
async def test_concurrent_creates_uses_unloads_and_deletes_keep_one_state_per_topic(registry, seed):
    rng = random.Random(seed)
    model: set[str] = set()
    made: set[str] = set()
    for _ in range(12):
        # A burst of concurrent operations (every move they make is checked), then
        # at rest the registry must agree with the model.
        await asyncio.gather(*(_step(registry, rng, model, made) for _ in range(rng.randint(1, 6))))
        _check(registry, model)
        if model and rng.random() < 0.3:
            name = rng.choice(sorted(model))
            await registry.delete(TopicName.parse(name))
            model.discard(name)
            made.discard(name)
            _check(registry, model)
    await registry.close()
    assert all(registry.state(name) is U for name in KEYS)
