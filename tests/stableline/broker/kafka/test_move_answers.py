"""What a Kafka client hears about a partition whose topic is moving or has moved
(cluster/topic_moves.py), at the unit's edge: every refusal of a move is
NOT_LEADER_OR_FOLLOWER, which Kafka clients retry after refreshing their metadata,
never a code they take as fatal; a Produce refused because the topic stopped taking
writes for its hand-over answers it and writes nothing. The cluster itself is
tests/cluster/test_kafka_topic_moves.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stableline.broker.cluster.ownership import NotOwnerError, TopicUnavailableError
from stableline.broker.cluster.topic_moves import HandOverFailedError
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.records import decode_batches
from stableline.broker.kafka.server.api_base import KafkaSettings
from stableline.broker.kafka.server.api_produce import ProduceApis
from stableline.broker.kafka.server.errors import kafka_error
from stableline.broker.topics.write_gate import TopicMovingError
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName
from tests.stableline.broker.kafka.conftest import record_batch

NAME = TopicName.parse("persistent://public/default/moving")
OWNER = BrokerInfo("b:1", "b:1", "http://b:2", "v", 0, "b", 1, "i", {}, "b:9092", 1)


@pytest.mark.parametrize(
    "refusal",
    [
        TopicMovingError(f"topic {NAME} is moving to broker b:1: look it up again"),
        NotOwnerError(NAME, OWNER),
        TopicUnavailableError(NAME, "b:1", None),
        HandOverFailedError(f"topic {NAME} was not moved: retry"),
    ],
    ids=["writes stopped for the hand-over", "moved", "owner away", "hand-over gave up"],
)
def test_every_refusal_of_a_move_is_not_leader_or_follower(refusal):
    assert kafka_error(refusal) is m.ErrorCode.NOT_LEADER_OR_FOLLOWER


class _HandedOverTopic:
    """A topic that stopped taking writes for its hand-over (Topic.stop_writes)."""

    name = NAME

    def __init__(self) -> None:
        self.published = 0

    async def publish(self, header, payload):
        self.published += 1
        raise TopicMovingError(f"topic {NAME} is moving to broker b:1: look it up again")


async def test_a_produce_to_a_topic_being_handed_over_answers_not_leader_or_follower():
    settings = KafkaSettings("public/default", "h", 9092, True, 1 << 20)
    apis = ProduceApis(SimpleNamespace(), settings)  # type: ignore[arg-type]
    topic = _HandedOverTopic()
    batches = decode_batches(record_batch(b"one", b"two"))
    answer = await apis._produce_partition(0, topic, batches, None)  # type: ignore[arg-type]
    assert answer.error is m.ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert topic.published == 1  # refused at its first entry: nothing written
