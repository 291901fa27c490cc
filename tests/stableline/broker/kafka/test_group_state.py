"""The consumer group state table: every legal move is accepted, every other
raises, and the coordinator's moves go through it."""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass

import pytest

from stableline.broker.kafka.coordinator.group_coordinator import (
    GroupCoordinator,
    GroupLimits,
    JoinRequest,
    _Group,
)
from stableline.broker.kafka.coordinator.group_state import (
    GroupState,
    IllegalGroupTransition,
    check_group_transition,
)
from stableline.broker.kafka.protocol.messages import ErrorCode

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)
# Written out again on purpose: Kafka's validPreviousStates, less Dead (never held).
LEGAL = {(E, P), (P, C), (P, E), (C, S), (C, P), (S, P)}
ALL_MOVES = list(itertools.product(GroupState, GroupState))


def _ids(move: tuple[GroupState, GroupState]) -> str:
    return f"{move[0].value}->{move[1].value}"


@pytest.mark.parametrize("move", sorted(LEGAL, key=_ids), ids=_ids)
def test_every_legal_move_is_accepted(move):
    old, new = move
    assert old.can_transition_to(new)
    check_group_transition("g", old, new)


@pytest.mark.parametrize("move", [m for m in ALL_MOVES if m not in LEGAL], ids=_ids)
def test_every_other_move_is_refused(move):
    old, new = move
    assert not old.can_transition_to(new)
    with pytest.raises(IllegalGroupTransition, match=f"from {old.value} to {new.value}"):
        check_group_transition("g", old, new)


def test_dead_is_never_entered_nor_left():
    assert not any(state.can_transition_to(D) for state in GroupState)
    assert not any(D.can_transition_to(state) for state in GroupState)


def test_stable_is_reached_only_by_completing_a_rebalance():
    assert [old for old in GroupState if old.can_transition_to(S)] == [C]


def test_the_coordinator_moves_only_through_the_table():
    group = _Group("g")
    assert group.state is E
    with pytest.raises(IllegalGroupTransition, match="'g' cannot move from Empty to Stable"):
        GroupCoordinator._move(group, S)
    assert group.state is E  # unchanged by a refused move
    for new in (P, C, S, P, E):
        GroupCoordinator._move(group, new)
        assert group.state is new


# ------------------------------------------------------------ a random walk of clients


@dataclass
class _Client:
    member_id: str = ""
    generation: int = -1


async def _act(coordinator: GroupCoordinator, rng: random.Random, client: _Client, pool) -> None:
    """One random request of one client, as a Kafka consumer could send it."""
    action = rng.choice(("join", "join", "sync", "heartbeat", "leave"))
    if action == "join":
        result = await coordinator.join(_join_request(client.member_id))
        if result.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            client.member_id = result.member_id
            client.generation = result.generation_id
        elif result.error is ErrorCode.UNKNOWN_MEMBER_ID:
            client.member_id, client.generation = "", -1
    elif action == "sync" and client.member_id:
        everyone = {other.member_id: b"part" for other in pool if other.member_id}
        await coordinator.sync("g", client.generation, client.member_id, None, everyone)
    elif action == "heartbeat" and client.member_id:
        coordinator.heartbeat("g", client.generation, client.member_id, None)
    elif action == "leave" and client.member_id:
        coordinator.leave("g", [(client.member_id, None)])
        client.member_id, client.generation = "", -1


def _join_request(member_id: str) -> JoinRequest:
    return JoinRequest(
        "g", member_id, None, "client", "/127.0.0.1", 150, 100, "consumer", (("range", b""),)
    )


@pytest.mark.parametrize("seed", range(3))
async def test_random_joins_syncs_heartbeats_leaves_and_expiries_move_only_legally(
    monkeypatch, seed
):
    moves: list[tuple[GroupState, GroupState]] = []
    move = GroupCoordinator._move

    def recorded(group: _Group, new: GroupState) -> None:
        moves.append((group.state, new))
        move(group, new)

    # Timers move groups too: what they raise would only reach the loop's handler.
    monkeypatch.setattr(GroupCoordinator, "_move", staticmethod(recorded))
    loop = asyncio.get_running_loop()
    raised: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: raised.append(context))
    coordinator = GroupCoordinator(
        GroupLimits(initial_rebalance_delay_ms=0, min_session_timeout_ms=50)
    )
    rng = random.Random(seed)
    pool = [_Client() for _ in range(4)]
    requests = []
    try:
        for _ in range(80):
            client = rng.choice(pool)
            requests.append(asyncio.create_task(_act(coordinator, rng, client, pool)))
            await asyncio.sleep(rng.uniform(0, 0.02))
        await asyncio.sleep(0.3)  # sessions and rebalances time out
    finally:
        coordinator.close()
        outcomes = await asyncio.gather(*requests, return_exceptions=True)
        loop.set_exception_handler(None)
    assert [o for o in outcomes if isinstance(o, BaseException)] == []
    assert raised == []
    assert moves and all(old.can_transition_to(new) for old, new in moves)
    assert (E, P) in moves
