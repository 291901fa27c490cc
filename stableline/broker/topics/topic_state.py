"""Where a topic is in its life on this broker, and the moves between states.

Owns the one table of legal moves; `TopicRegistry._move` is the only place a
topic's state changes, and a move the table does not list raises
IllegalTopicTransition. The state says what is in memory and what is under way;
whether a topic exists at all is the metadata's (the registry's names), so a
topic that exists and is not loaded is UNLOADED like one that does not exist.

    UNLOADED -> CREATING -> UNLOADED
    UNLOADED -> LOADING  -> LOADED -> UNLOADING -> UNLOADED
                   |          |
                   +----------+--> UNLOADED   (a failed load; a delete, a close)
"""

from __future__ import annotations

import enum

from stableline.broker.errors import INTERNAL, BrokerError


class TopicState(enum.Enum):
    UNLOADED = "Unloaded"
    """Nothing of the topic in memory and nothing under way: the registry holds no
    slot for it. It may exist (listed, loaded by its next use) or not."""

    CREATING = "Creating"
    """An admin's creation is being made durable (its namespace, its key, the
    fsync); not listed until it is. A use of the topic waits for it."""

    LOADING = "Loading"
    """Its ledger, cursors and transaction buffer snapshot are being read (a topic
    used first is created on the way); every request for it waits for the load."""

    LOADED = "Loaded"
    """In memory, serving producers, consumers and reads."""

    UNLOADING = "Unloading"
    """Idle and being closed; a request for it waits, then loads it again."""

    def can_transition_to(self, new: TopicState) -> bool:
        """Whether `self -> new` is a legal move."""
        return new in _MOVES[self]


_MOVES: dict[TopicState, frozenset[TopicState]] = {
    TopicState.UNLOADED: frozenset({TopicState.CREATING, TopicState.LOADING}),
    # Made durable, or failed: either way nothing of it stays in memory.
    TopicState.CREATING: frozenset({TopicState.UNLOADED}),
    TopicState.LOADING: frozenset({TopicState.LOADED, TopicState.UNLOADED}),
    # Idle: closed in the background; deleted, or the registry closes: at once.
    TopicState.LOADED: frozenset({TopicState.UNLOADING, TopicState.UNLOADED}),
    TopicState.UNLOADING: frozenset({TopicState.UNLOADED}),
}


class IllegalTopicTransition(BrokerError, AssertionError):
    """A move the table does not allow: a bug in the registry, never a client's
    mistake."""

    code = INTERNAL  # a bug: answered as any unexpected failure is


def check_topic_transition(topic: str, old: TopicState, new: TopicState) -> None:
    """Raise IllegalTopicTransition unless `old -> new` is a legal move."""
    if not old.can_transition_to(new):
        raise IllegalTopicTransition(f"topic {topic} cannot move from {old.value} to {new.value}")
