"""Real Kafka consumers in a group, for the group tests: each member
(confluent-kafka, kafka-python or aiokafka, on an event loop of its own) polls in a
thread of its own (as an application would), commits what it processed
synchronously, and records what it got and what it is assigned.

`create_partitioned_topic` makes the topic a group splits: a partitioned topic of N
partitions, created with Kafka's CreateTopics, whose partitions 0..N-1 the members
share.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S, KafkaBroker

Partition = tuple[str, int]
Record = tuple[str, int, int, bytes]  # topic, partition, offset, value

# Short enough that an evicted or departed member is noticed within a test.
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 300
# The rebalance timeout (max.poll.interval.ms): members here poll all the time.
MAX_POLL_INTERVAL_MS = 15_000


@dataclass(frozen=True)
class PartitionedTopic:
    topics: list[str]  # what consumers subscribe to
    partitions: list[Partition]  # what producers write to and groups commit on

    def stableline_topic(self, partition: Partition) -> str:
        """The stableline topic holding a Kafka partition (one partition: the topic)."""
        name, index = partition
        return name if len(self.partitions) == 1 else f"{name}-partition-{index}"


def create_partitioned_topic(bootstrap: str, name: str, partitions: int) -> PartitionedTopic:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions)])
    futures[name].result(timeout=CLIENT_TIMEOUT_S)
    return PartitionedTopic([name], [(name, index) for index in range(partitions)])


def produce_to_partitions(
    bootstrap: str, topic: PartitionedTopic, per_partition: range
) -> list[bytes]:
    """`per_partition` values into every partition ("topic/partition/i"); all of them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for name, partition in topic.partitions:
        for index in per_partition:
            value = f"{name}/{partition}/{index}".encode()
            producer.produce(name, value=value, partition=partition)
            values.append(value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return values


class GroupMember(threading.Thread):
    """One consumer of `group` (confluent-kafka or kafka-python) polling until stopped."""

    def __init__(
        self, client: str, bootstrap: str, group: str, topics: list[str], **config
    ) -> None:
        super().__init__(daemon=True, name=f"{client}-{group}")
        self.client = client
        self._open = {
            "confluent": self._open_confluent,
            "kafka-python": self._open_kafka_python,
            "aiokafka": self._open_aiokafka,
        }[client]
        self._args = (bootstrap, group, topics, config)
        self._stopping = threading.Event()
        self.records: list[Record] = []
        self.assignment: frozenset[Partition] = frozenset()
        self.error: BaseException | None = None

    # ------------------------------------------------------------ thread

    def run(self) -> None:
        try:
            poll, assigned, close = self._open(*self._args)
            try:
                while not self._stopping.is_set():
                    self.records.extend(poll())
                    self.assignment = assigned()
            finally:
                close()
        except BaseException as error:  # seen by stop()
            self.error = error

    def stop(self) -> None:
        """Leave the group (LeaveGroup) and end the thread; raises what it met."""
        self._stopping.set()
        self.join(CLIENT_TIMEOUT_S)
        assert not self.is_alive(), f"{self.name} did not close"
        if self.error is not None:
            raise self.error

    def values(self) -> list[bytes]:
        return [value for _topic, _partition, _offset, value in self.records]

    # ------------------------------------------------------------ clients

    @staticmethod
    def _open_confluent(bootstrap: str, group: str, topics: list[str], config: dict):
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
                "partition.assignment.strategy": "roundrobin",
                **config,
            }
        )
        consumer.subscribe(topics)

        def poll() -> list[Record]:
            message = consumer.poll(0.1)
            if message is None:
                return []
            assert message.error() is None, message.error()
            consumer.commit(message=message, asynchronous=False)
            return [(message.topic(), message.partition(), message.offset(), message.value())]

        def assigned() -> frozenset[Partition]:
            return frozenset((p.topic, p.partition) for p in consumer.assignment())

        return poll, assigned, consumer.close

    @staticmethod
    def _open_kafka_python(bootstrap: str, group: str, topics: list[str], config: dict):
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.structs import OffsetAndMetadata

        consumer = KafkaConsumer(
            *topics,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            partition_assignment_strategy=[RoundRobinPartitionAssignor],
            **config,
        )

        def poll() -> list[Record]:
            got: list[Record] = []
            for partition, records in consumer.poll(timeout_ms=100).items():
                got.extend((r.topic, r.partition, r.offset, r.value) for r in records)
                offset = OffsetAndMetadata(records[-1].offset + 1, None, -1)
                consumer.commit({partition: offset})
            return got

        def assigned() -> frozenset[Partition]:
            return frozenset((p.topic, p.partition) for p in consumer.assignment())

        return poll, assigned, consumer.close

    @staticmethod
    def _open_aiokafka(bootstrap: str, group: str, topics: list[str], config: dict):
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        loop = asyncio.new_event_loop()  # runs while poll() waits: heartbeats included

        async def started() -> AIOKafkaConsumer:
            made = AIOKafkaConsumer(  # made on its loop, as aiokafka requires
                *topics,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                partition_assignment_strategy=(RoundRobinPartitionAssignor,),
                **config,
            )
            await made.start()
            return made

        consumer = loop.run_until_complete(started())

        def poll() -> list[Record]:
            batches = loop.run_until_complete(consumer.getmany(timeout_ms=100))
            got: list[Record] = []
            for records in batches.values():
                got.extend((r.topic, r.partition, r.offset, r.value) for r in records)
            if batches:
                ends = {partition: records[-1].offset + 1 for partition, records in batches.items()}
                loop.run_until_complete(consumer.commit(ends))
            return got

        def assigned() -> frozenset[Partition]:
            return frozenset((p.topic, p.partition) for p in consumer.assignment())

        def close() -> None:
            loop.run_until_complete(consumer.stop())
            loop.close()

        return poll, assigned, close


def wait_for(condition, what: str, timeout_s: float = 3 * CLIENT_TIMEOUT_S, members=()) -> None:
    """Until `condition()`; fails early if a member thread died."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        for member in members:
            if member.error is not None:
                raise AssertionError(f"{member.name} failed while waiting for {what}") from (
                    member.error
                )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# The first generation of a new group waits this long for more members (Kafka's
# 3 s default would only slow the tests).
INITIAL_REBALANCE_DELAY_MS = 500


def group_broker(data_dir) -> KafkaBroker:
    """A broker with its Kafka port and a short initial rebalance delay (not started)."""
    return KafkaBroker(
        data_dir,
        extra_args=["--kafka", "127.0.0.1:0"],
        env={"STABLELINE_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": str(INITIAL_REBALANCE_DELAY_MS)},
    )
