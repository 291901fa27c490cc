"""A request's scope: partitions named once, the metadata store read once per topic
however many partitions a request names, and one summary line of its refusals."""

from __future__ import annotations

import asyncio

from stableline.broker.kafka.server.api_base import KafkaApiBase, KafkaSettings
from stableline.broker.kafka.server.request_scope import (
    CURRENT_REQUEST,
    RequestScope,
    partitions_once,
)
from stableline.partitions import NOT_PARTITIONED
from stableline.topic_name import TopicName


class CountingPartitions:
    """PartitionedTopics as api_base uses it, counting reads of the store."""

    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts
        self.reads = 0

    def partitions(self, name: TopicName) -> int:
        return NOT_PARTITIONED  # this broker has not seen it yet

    async def read_partitions(self, name: TopicName) -> int:
        self.reads += 1
        await asyncio.sleep(0)
        return self._counts.get(name.local_name, NOT_PARTITIONED)


def _api(partitioned: CountingPartitions) -> KafkaApiBase:
    settings = KafkaSettings("public/default", "127.0.0.1", 9092, False, 1024)
    return KafkaApiBase(None, settings, partitioned=partitioned)  # type: ignore[arg-type]


def test_a_partition_named_twice_is_kept_once_in_first_order():
    named = [("a", [0, 1, 0]), ("b", [2]), ("a", [1, 3])]
    assert partitions_once(named, lambda p: p) == [("a", [0, 1, 3]), ("b", [2])]


def test_the_store_is_read_once_per_topic_a_request_whatever_it_names():
    partitioned = CountingPartitions({"wide": 3})
    api = _api(partitioned)

    async def request() -> list[TopicName | None]:
        token = CURRENT_REQUEST.set(RequestScope("FETCH", "c"))
        try:
            return [
                await api._partition_name(topic, index)
                for topic in ("plain", "wide")
                for index in range(1, 2001)
            ]
        finally:
            CURRENT_REQUEST.reset(token)

    names = asyncio.run(request())
    assert partitioned.reads == 2
    assert [str(n) for n in names if n is not None] == [
        "persistent://public/default/wide-partition-1",
        "persistent://public/default/wide-partition-2",
    ]
    asyncio.run(request())
    assert partitioned.reads == 4  # read again by the next request: counts change


def test_refusals_make_one_summary_line():
    scope = RequestScope("FETCH", "client-1")
    assert scope.summary() is None
    for index in range(5000):
        scope.note_refusal("TOPIC_AUTHORIZATION_FAILED", f"may not consume on t{index % 5}")
    scope.note_refusal("NOT_LEADER_OR_FOLLOWER", "loading")
    line = scope.summary()
    assert line is not None and "\n" not in line
    assert "5001 refused" in line
    assert "TOPIC_AUTHORIZATION_FAILED x5000" in line and "NOT_LEADER_OR_FOLLOWER x1" in line
    assert line.count("may not consume") == 3  # the first reasons, not all of them
