"""Where topics are served: the one thing the registry and the faces ask about it.

Standalone, this broker serves every topic and nothing is recorded anywhere else:
`StandalonePlacement` answers without a metadata store. In a cluster the cluster's
`TopicOwnership` (stableline.broker.cluster.ownership) answers from the ownership
records. Callers ask a `TopicPlacement` and never whether they run in a cluster.

Promises of every placement:
- A placement *record* exists only in a cluster; `is_placed`, `needs_placing` and
  `placed_names` speak of records, so standalone they are False and empty, and the
  registry's own list of topics (and its own checks as it creates one) is the whole
  truth.
- `claim` says whether this broker serves a topic it is about to create (True
  standalone); `check` raises when another broker serves a topic (never standalone).
- Nothing here reads or writes a topic's data: a placement only names brokers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from managed_ledger.replication import Replication
from stableline.broker.topics.persistence import (
    SINGLE_COPY,
    NotEnoughBrokersError,
    PersistencePolicy,
)
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a creation's claim on a topic."""

    here: bool  # this broker serves the topic: it makes its files
    new: bool  # this claim placed it (no broker had it before)


@dataclass(frozen=True, slots=True)
class Placement:
    """Which broker serves one topic, as its record says."""

    leader: str  # the broker's id (its advertised gRPC address)
    epoch: int
    here: bool  # the leader is this broker
    # The brokers holding its ledgers, the leader first, and the policy it was placed with.
    ensemble: tuple[str, ...] = ()
    persistence: PersistencePolicy = SINGLE_COPY


class TopicPlacement(Protocol):
    """Which broker serves each topic (see the module docstring)."""

    async def is_placed(self, name: TopicName) -> bool:
        """Whether the topic has a placement record (on any broker)."""
        ...

    async def needs_placing(self, name: TopicName) -> bool:
        """Whether placing the topic falls to this broker now (it has no record): the
        broker then checks the name before it places it."""
        ...

    async def claim(self, name: TopicName, persistence: PersistencePolicy | None = None) -> Claim:
        """Place the topic if it has no record yet; whether this broker serves it.
        `persistence`: the policy to place it by rather than its namespace's (Kafka's
        CreateTopics replication factor); NotEnoughBrokersError when fewer brokers
        are live than the policy asks."""
        ...

    async def check(self, name: TopicName, create: bool, on_disk: bool) -> bool:
        """True when a record names this broker for the topic (placing it when
        `create`); raises when another broker serves it. False: no record names
        this broker, the caller's own handling applies."""
        ...

    async def forget(self, name: TopicName) -> None:
        """The topic was deleted here: drop its record."""
        ...

    def placed_names(self, prefix: str = "") -> set[str]:
        """Every topic (full name) starting with `prefix` that has a record."""
        ...

    async def placement_of(self, name: TopicName, place: bool) -> Placement | None:
        """The topic's placement, placing it when it has none and `place`; None when
        it has none (and is not placed now)."""
        ...

    async def serving_broker(self, name: TopicName) -> BrokerInfo | None:
        """The live broker serving the topic, placing it if it has no record; None
        when it is this broker. Raises when its broker is not live."""
        ...

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        """Another broker's registration while it is live."""
        ...

    def live_brokers(self) -> list[BrokerInfo]:
        """The cluster's live brokers as last read (none standalone)."""
        ...

    async def recover(self, name: TopicName) -> Replication | None:
        """Before this broker serves the topic: take it and recover its copies when it
        is replicated (cluster/ledger_recovery.py), returning what its writes are
        replicated with; None for a topic with one copy (always, standalone)."""
        ...


class StandalonePlacement:
    """This broker serves every topic; there are no records and no other brokers."""

    async def is_placed(self, name: TopicName) -> bool:
        return False

    async def needs_placing(self, name: TopicName) -> bool:
        return False

    async def claim(self, name: TopicName, persistence: PersistencePolicy | None = None) -> Claim:
        # One broker, one copy: nothing is recorded, and more cannot be promised.
        if persistence is not None and persistence.ensemble_size > 1:
            raise NotEnoughBrokersError(f"topic {name}", name.namespace_path, 1, persistence)
        return Claim(here=True, new=False)

    async def check(self, name: TopicName, create: bool, on_disk: bool) -> bool:
        return False

    async def forget(self, name: TopicName) -> None:
        return None

    def placed_names(self, prefix: str = "") -> set[str]:
        return set()

    async def placement_of(self, name: TopicName, place: bool) -> Placement | None:
        return None

    async def serving_broker(self, name: TopicName) -> BrokerInfo | None:
        return None

    def live_broker(self, broker_id: str) -> BrokerInfo | None:
        return None

    def live_brokers(self) -> list[BrokerInfo]:
        return []

    async def recover(self, name: TopicName) -> Replication | None:
        return None
