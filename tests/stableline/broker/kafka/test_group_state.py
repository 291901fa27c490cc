"""The consumer group state table: every legal move is accepted, every other
raises, and the coordinator's moves go through it."""

from __future__ import annotations

import itertools

import pytest

from stableline.broker.kafka.coordinator.group_coordinator import GroupCoordinator, _Group
from stableline.broker.kafka.coordinator.group_state import (
    GroupState,
    IllegalGroupTransition,
    check_group_transition,
)

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
