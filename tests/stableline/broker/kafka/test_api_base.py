"""What the API groups share (api_base.py), at the unit's edge: which broker
coordinates a key (the leader of the shard it hashes to, as a Kafka node), and
registrations as Kafka nodes. The cluster itself is tests/cluster/test_kafka.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.server.api_base import (
    CoordinatorNodeUnavailable,
    KafkaApiBase,
    KafkaSettings,
    kafka_node,
)
from stableline.broker.security.caller import CURRENT_CALLER, Caller
from stableline.broker.txn.coordinator_errors import CoordinatorUnavailableError
from stableline.broker.txn.coordinators import named_shard
from stableline.metadata import BrokerInfo

SHARDS = 4


def registration(broker_id: str, kafka_address: str = "", node_id: int = -1) -> BrokerInfo:
    return BrokerInfo(
        broker_id, broker_id, "http://h:1", "v", 0, "h", 1, "i", {}, kafka_address, node_id
    )


class ShardLeaders:
    """Coordinators' shard_leader, answered from a table (the edge of this unit)."""

    shard_count = SHARDS

    def __init__(self, leaders: dict[int, BrokerInfo | Exception | None]):
        self.leaders = leaders
        self.asked: list[int] = []

    async def shard_leader(self, shard: int) -> BrokerInfo | None:
        self.asked.append(shard)
        leader = self.leaders[shard]
        if isinstance(leader, Exception):
            raise leader
        return leader


def api(leaders: dict[int, BrokerInfo | Exception | None]) -> KafkaApiBase:
    settings = KafkaSettings("public/default", "10.0.0.1", 9092, True, 1 << 20, node_id=7)
    registry = SimpleNamespace(ownership=None)
    return KafkaApiBase(registry, settings, ShardLeaders(leaders))  # type: ignore[arg-type]


async def test_a_key_whose_shard_is_led_here_is_coordinated_by_this_node():
    handler = api(dict.fromkeys(range(SHARDS)))
    assert await handler._coordinator_node("payments") == m.BrokerInfo(7, "10.0.0.1", 9092)
    assert handler._coordinators.asked == [named_shard("", "payments", SHARDS)]


async def test_a_key_whose_shard_is_led_elsewhere_is_coordinated_by_that_kafka_node():
    other = registration("10.0.0.2:6650", "10.0.0.2:9093", 3)
    handler = api(dict.fromkeys(range(SHARDS), other))
    assert await handler._coordinator_node("payments") == m.BrokerInfo(3, "10.0.0.2", 9093)


async def test_the_callers_role_owns_a_transactional_id_and_a_group_passes_no_owner():
    handler = api(dict.fromkeys(range(SHARDS)))
    token = CURRENT_CALLER.set(Caller("alice", superuser=False))
    try:
        await handler._coordinator_node("tx-1")
        await handler._coordinator_node("group-1", owner="")
    finally:
        CURRENT_CALLER.reset(token)
    assert handler._coordinators.asked == [
        named_shard("alice", "tx-1", SHARDS),
        named_shard("", "group-1", SHARDS),
    ]


@pytest.mark.parametrize(
    "leader",
    [
        CoordinatorUnavailableError(1, "10.0.0.2:6650"),
        registration("10.0.0.2:6650"),  # its Kafka port is off
    ],
)
async def test_a_coordinator_that_is_down_or_without_kafka_is_unavailable(leader):
    handler = api(dict.fromkeys(range(SHARDS), leader))
    with pytest.raises(CoordinatorNodeUnavailable):
        await handler._coordinator_node("payments")


def test_a_registration_is_a_kafka_node_only_with_its_kafka_port_on():
    assert kafka_node(registration("h:1", "[::1]:9092", 2)) == m.BrokerInfo(2, "::1", 9092)
    assert kafka_node(registration("h:1")) is None
