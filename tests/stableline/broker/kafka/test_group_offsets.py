"""A group's committed offsets are its stableline subscription's acknowledgements.

In process, on a real topic: which entries and batch indexes an offset stands for,
commits and what OffsetFetch answers back (exactly the commit, until something else
moves the subscription). On a real broker with real clients: commits are durable
before they are answered, so they come back the same after a restart and after
kill -9 and a new member resumes after them; a stableline consumer of the
subscription resumes there too (and its acks move them); the subscription shows in
the admin stats at the isolation level its group fetched at."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import stableline
from dispatcher import Consumer, ControlEvent, IsolationLevel, SubscriptionType
from managed_ledger import EntryHeader, LocalStore, ManagedLedger, Position
from stableline.broker.kafka.coordinator.group_offsets import (
    AckTarget,
    CommittedOffset,
    GroupOffsets,
    OffsetToCommit,
    ack_target,
    acknowledged_offset,
)
from stableline.broker.kafka.coordinator.group_records import LocalGroupRecords
from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.broker.topics.topic import Topic
from stableline.topic_name import TopicName
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S, KafkaBroker, confluent_produce
from tests.stableline.broker.kafka.group_clients import (
    GroupMember,
    create_partitioned_topic,
    group_broker,
    produce_to_partitions,
    wait_for,
)

# ------------------------------------------------------------------ in process

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


@pytest.fixture
async def topic(tmp_path: Path, store: LocalStore) -> AsyncIterator[Topic]:
    """persistent://public/default/ledger holding offsets 0-2 (one entry of three
    messages), 3 (one) and 4-5 (one entry of two)."""
    name = TopicName.parse("ledger")
    opened = Topic(name, await ManagedLedger.open(name.storage_name, tmp_path / "t", store))
    for messages in (3, 1, 2):
        await opened.publish(EntryHeader(num_messages=messages), b"batch")
    yield opened
    await opened.close()


@pytest.fixture
def offsets(topic: Topic, store: LocalStore) -> GroupOffsets:
    async def topic_of(kafka_topic: str, partition: int) -> Topic | ErrorCode:
        if (kafka_topic, partition) == ("ledger", 0):
            return topic
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    return GroupOffsets(topic_of, LocalGroupRecords(store))


def entries(topic: Topic) -> list[Position]:
    return [entry.position for entry in topic.ledger.read(topic.ledger.first_position(), 10)]


async def test_an_offset_stands_for_the_entries_and_batch_indexes_before_it(topic):
    first, single, pair = entries(topic)
    start = Position(first.ledger_id, -1)
    assert ack_target(topic, 0) == AckTarget(start)
    assert ack_target(topic, 2) == AckTarget(start, first, 2)
    assert ack_target(topic, 3) == AckTarget(first)
    assert ack_target(topic, 5) == AckTarget(single, pair, 1)
    assert ack_target(topic, 6) == AckTarget(pair)  # the end: everything
    assert ack_target(topic, 60) == AckTarget(pair)


async def test_what_is_fetched_is_what_was_committed_until_the_subscription_moves(topic, offsets):
    assert await offsets.fetch("audit", [("ledger", 0)]) == [("ledger", 0, CommittedOffset(-1, ""))]
    committed = await offsets.commit("audit", [OffsetToCommit("ledger", 0, 5, "five")], RC)
    assert committed == [("ledger", 0, ErrorCode.NONE)]
    subscription = topic.subscriptions["audit"]
    assert acknowledged_offset(topic, subscription) == 5
    assert await offsets.fetch("audit", None) == [("ledger", 0, CommittedOffset(5, "five"))]
    # Back: the acknowledgement moves back with it.
    await offsets.commit("audit", [OffsetToCommit("ledger", 0, 1)], RC)
    assert acknowledged_offset(topic, subscription) == 1
    assert await offsets.fetch("audit", None) == [("ledger", 0, CommittedOffset(1, ""))]
    # Past the end: the whole log is acknowledged; the offset is answered as committed,
    # also once more is written after it.
    await offsets.commit("audit", [OffsetToCommit("ledger", 0, 9)], RC)
    later = (await topic.publish(EntryHeader(num_messages=1), b"later"))[0]
    assert acknowledged_offset(topic, subscription) == 6
    assert await offsets.fetch("audit", None) == [("ledger", 0, CommittedOffset(9, ""))]
    # A stableline consumer's ack moves the subscription: that is what is answered.
    subscription.ack([(later, -1)])
    assert await offsets.fetch("audit", None) == [("ledger", 0, CommittedOffset(7, ""))]


async def test_the_first_commit_makes_a_failover_subscription_at_the_committers_level(
    topic, offsets
):
    await offsets.commit("monitoring", [OffsetToCommit("ledger", 0, 3)], RU)
    subscription = topic.subscriptions["monitoring"]
    assert (subscription.type, subscription.isolation_level) == (SubscriptionType.FAILOVER, RU)
    await offsets.commit("monitoring", [OffsetToCommit("ledger", 0, 4)], RC)
    assert topic.subscriptions["monitoring"].isolation_level is RU  # fixed once made
    assert offsets.committed_partitions("monitoring") == [("ledger", 0)]
    assert offsets.groups_with_offsets() == ["monitoring"]
    assert offsets.has_offsets("monitoring") and not offsets.has_offsets("other")


async def test_a_commit_back_sends_again_to_stableline_consumers_of_the_subscription(
    topic, offsets
):
    await offsets.commit("audit", [OffsetToCommit("ledger", 0, 6)], RU)
    consumer = Consumer("sdk")
    subscription = topic.subscribe("audit", consumer, SubscriptionType.FAILOVER, RU, True)
    subscription.flow(consumer, 100)
    assert await asyncio.wait_for(consumer.outbox.get(), 5) == ControlEvent("active", True)
    await offsets.commit("audit", [OffsetToCommit("ledger", 0, 3)], RU)
    delivered: list[Position] = []
    while len(delivered) < 2:  # it keeps its permits: offsets 3 and 4-5 come again
        batch = await asyncio.wait_for(consumer.outbox.get(), 5)
        delivered += [delivery.entry.position for delivery in batch]
    assert delivered == entries(topic)[1:]


async def test_commits_that_cannot_be_kept_are_refused_and_change_nothing(topic, offsets):
    answers = await offsets.commit(
        "audit",
        [
            OffsetToCommit("ledger", 0, 2, "x" * 5000),
            OffsetToCommit("ledger", 0, -1),
            OffsetToCommit("elsewhere", 0, 1),
        ],
        RC,
    )
    assert [error for _t, _p, error in answers] == [
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert "audit" not in topic.subscriptions
    assert offsets.groups_with_offsets() == []


async def test_a_deleted_subscription_has_no_offset_and_leaves_the_groups_list(topic, offsets):
    await offsets.commit("audit", [OffsetToCommit("ledger", 0, 3)], RC)
    await topic.unsubscribe(topic.subscriptions["audit"])
    assert await offsets.fetch("audit", [("ledger", 0)]) == [("ledger", 0, CommittedOffset(-1, ""))]
    assert offsets.groups_with_offsets() == []


# ------------------------------------------------------------------ real broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with group_broker(tmp_path / "data").running() as started:
        yield started


def committed_by_kafka_python(bootstrap: str, group: str, partitions) -> dict:
    """{(topic, partition): (offset, metadata)} through OffsetFetch (kafka-python)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        found = {}
        for topic, partition in partitions:
            committed = consumer.committed(TopicPartition(topic, partition), metadata=True)
            found[(topic, partition)] = (
                (committed.offset, committed.metadata) if committed is not None else None
            )
        return found
    finally:
        consumer.close()


def committed_by_confluent(bootstrap: str, group: str, partitions) -> dict:
    """{(topic, partition): offset} (confluent-kafka reads a commit's metadata past
    its end, as a C string: it is compared through kafka-python only)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answers = consumer.committed(
            [TopicPartition(t, p) for t, p in partitions], timeout=CLIENT_TIMEOUT_S
        )
        return {(a.topic, a.partition): a.offset for a in answers}
    finally:
        consumer.close()


def commit_by_kafka_python(bootstrap: str, group: str, offsets: dict) -> None:
    """Commit {(topic, partition): (offset, metadata)} from outside group management."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {
                TopicPartition(topic, partition): OffsetAndMetadata(offset, metadata, -1)
                for (topic, partition), (offset, metadata) in offsets.items()
            }
        )
    finally:
        consumer.close()


def subscription_stats(broker: KafkaBroker, topic: str, group: str) -> dict:
    return broker.admin(f"/admin/v2/persistent/public/default/{topic}/stats")["subscriptions"][
        group
    ]


@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_committed_offsets_come_back_the_same_and_a_new_member_resumes_after_them(broker, stop):
    topic = create_partitioned_topic(broker.bootstrap, "billing", 2)
    values = produce_to_partitions(broker.bootstrap, topic, range(10))
    first, second = topic.partitions
    commit_by_kafka_python(broker.bootstrap, "invoicing", {first: (6, "six"), second: (4, "")})
    before = committed_by_kafka_python(broker.bootstrap, "invoicing", topic.partitions)
    assert before == {first: (6, "six"), second: (4, "")}
    if stop == "kill -9":
        broker.kill()  # right after the commit's answer: it was fsynced
        broker.start()
    else:
        broker.restart()
    assert committed_by_kafka_python(broker.bootstrap, "invoicing", topic.partitions) == before
    assert committed_by_confluent(broker.bootstrap, "invoicing", topic.partitions) == {
        partition: offset for partition, (offset, _metadata) in before.items()
    }
    member = GroupMember("confluent", broker.bootstrap, "invoicing", topic.topics)
    member.start()
    resume_at = {first: 6, second: 4}

    def after_commit(value: bytes) -> bool:
        name, partition, index = value.decode().split("/")
        return int(index) >= resume_at[(name, int(partition))]

    expected = [value for value in values if after_commit(value)]
    wait_for(lambda: len(member.records) >= len(expected), "the rest", members=[member])
    member.stop()
    assert sorted(member.values()) == sorted(expected)
    for partition in topic.partitions:
        stats = subscription_stats(broker, topic.stableline_topic(partition), "invoicing")
        assert stats["msgBacklog"] == 0 and stats["subscriptionIsolationLevel"] == "READ_COMMITTED"


def test_a_commit_is_the_subscriptions_ack_and_a_stableline_consumer_moves_it(broker):
    values = [f"entry-{i}".encode() for i in range(10)]
    # One batch, one entry, whatever the load: the linger outlasts the loop and
    # flush sends what waits.
    confluent_produce(broker.bootstrap, "ledger", values, **{"linger.ms": 60_000})
    partition = [("ledger", 0)]
    commit_by_kafka_python(broker.bootstrap, "audit", {partition[0]: (6, "")})
    # A commit below the last one moves the acknowledgement back (Kafka replaces it).
    commit_by_kafka_python(broker.bootstrap, "audit", {partition[0]: (3, "back")})
    assert committed_by_kafka_python(broker.bootstrap, "audit", partition) == {
        partition[0]: (3, "back")
    }
    stats = subscription_stats(broker, "ledger", "audit")
    assert stats["msgBacklog"] == 1  # its one entry, three of its messages acknowledged
    with stableline.Client(broker.service_url) as client:
        consumer = client.subscribe(
            "ledger",
            "audit",
            consumer_type=stableline.ConsumerType.Failover,
            initial_position=stableline.InitialPosition.Earliest,
        )
        got = [consumer.receive(timeout_millis=int(CLIENT_TIMEOUT_S * 1000)) for _ in range(7)]
        assert [message.value() for message in got] == values[3:]
        consumer.acknowledge_cumulative(got[-1])
        consumer.close()
    # The subscription moved on: the group resumes where it stands.
    assert committed_by_kafka_python(broker.bootstrap, "audit", partition) == {
        partition[0]: (10, "")
    }


def test_the_groups_subscription_takes_the_isolation_level_its_members_fetch_at(broker):
    topic = create_partitioned_topic(broker.bootstrap, "trades", 1)
    values = produce_to_partitions(broker.bootstrap, topic, range(3))
    members = [
        GroupMember(
            "confluent",
            broker.bootstrap,
            group,
            topic.topics,
            **{"isolation.level": level, "client.id": f"{group}-client"},
        )
        for group, level in [("settlement", "read_committed"), ("monitoring", "read_uncommitted")]
    ]
    members.append(GroupMember("kafka-python", broker.bootstrap, "dashboards", topic.topics))
    for member in members:
        member.start()
    wait_for(
        lambda: all(sorted(m.values()) == sorted(values) for m in members),
        "every group to consume",
        members=members,
    )
    for member in members:
        member.stop()
    name = topic.topics[0]
    levels = {
        group: subscription_stats(broker, name, group)["subscriptionIsolationLevel"]
        for group in ("settlement", "monitoring", "dashboards")
    }
    assert levels == {
        "settlement": "READ_COMMITTED",
        "monitoring": "READ_UNCOMMITTED",
        "dashboards": "READ_UNCOMMITTED",  # kafka-python reads uncommitted by default
    }
