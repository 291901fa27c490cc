"""The states of a consumer group (Kafka's classic protocol) and the moves between them.

Owns the one table of legal moves (Kafka's GroupState.validPreviousStates, read
the other way round):

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable
                     ^    |                 |               |
                     |    +-> Empty         +---------------+--> PreparingRebalance

`GroupCoordinator._move` is the only place a group's state changes, and a move
the table does not list raises IllegalGroupTransition. Dead is never the state of
a group the coordinator holds: it is what DescribeGroups says of one it does not.
"""

from __future__ import annotations

import enum

from stableline.broker.errors import INTERNAL, BrokerError


class GroupState(enum.Enum):
    EMPTY = "Empty"
    """No member (only members awaiting their id, at most): the group is forgotten
    once nothing is pending."""
    PREPARING_REBALANCE = "PreparingRebalance"
    """Members (re)join; their JoinGroups wait until every known member has joined
    or the rebalance timeout passes."""
    COMPLETING_REBALANCE = "CompletingRebalance"
    """The generation is made and told; waiting for the leader's assignment."""
    STABLE = "Stable"
    """Every member has its assignment; heartbeats keep the members."""
    DEAD = "Dead"
    """What DescribeGroups says of a group this coordinator does not know."""

    def can_transition_to(self, new: GroupState) -> bool:
        """Whether `self -> new` is a legal move of a group the coordinator holds."""
        return new in _MOVES[self]


_MOVES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    # The join phase ends with a generation, or with nobody left.
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    # The leader's SyncGroup makes it Stable; a member that leaves, joins anew or
    # times out sends it back to rebalance.
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(),
}


class IllegalGroupTransition(BrokerError, AssertionError):
    """A move the table does not allow: a bug in the coordinator, never a client's
    mistake (those are answered with Kafka's error codes)."""

    code = INTERNAL  # a bug: answered as any unexpected failure is


def check_group_transition(group_id: str, old: GroupState, new: GroupState) -> None:
    """Raise IllegalGroupTransition unless `old -> new` is a legal move."""
    if not old.can_transition_to(new):
        raise IllegalGroupTransition(
            f"group {group_id!r} cannot move from {old.value} to {new.value}"
        )
