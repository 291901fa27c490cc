"""Kafka clients, unchanged, while leaders are killed (three real brokers on one real
etcd, the default 3/3/2 policy): a confluent-kafka transactional producer carries on
through a partition's new leader, and through its coordinator shard's new leader; a
read_committed consumer reads every committed message once, in order, and nothing of
an aborted or open transaction; a read_committed consumer group rides out the kill of
its partition's leader or of its coordinator and resumes at its committed offset."""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from stableline.broker.txn.coordinators import named_shard
from stableline.metadata.layout import kafka_group_partitions_path, kafka_transactional_id_path
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S

from .conftest import Cluster, running_cluster
from .test_security import SUPERUSER, SecureCluster, secure_brokers

_names = itertools.count()
SHARDS = 4  # a new cluster's coordinator shards
# A killed leader's lease lapses after SHORT_SESSION_TIMEOUT_S; then a member takes it.
SERVED_AGAIN_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("kafka-failover")
    with running_cluster(cluster_etcd, root, kafka=True) as started:
        yield started


def _bootstrap(brokers) -> str:
    return ",".join(b.kafka_bootstrap for b in brokers)


def _transactional_producer(brokers, prefix: str, timeout_ms: int = 60_000):
    """A confluent-kafka transactional producer of a new transactional id, initialized;
    (the producer, its transactional id)."""
    from confluent_kafka import Producer

    transactional_id = f"{prefix}-{uuid.uuid4().hex}"
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer, transactional_id


def _topic_led_elsewhere(
    cluster: Cluster, producer, prefix: str, avoid: str, payloads: list[bytes]
) -> tuple[str, str]:
    """A new topic, made by committing `payloads` to it, whose leader is not `avoid`;
    (its name, its leader's id)."""
    for _ in range(20):
        topic = f"{prefix}-{next(_names)}"
        _transaction(producer, topic, payloads, commit=True)
        leader_id = cluster.topic_leader(f"persistent://public/default/{topic}")
        if leader_id != avoid:
            return topic, leader_id
    pytest.fail(f"every topic was placed on {avoid}")


def _transaction(producer, topic: str, payloads: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for payload in payloads:
        producer.produce(topic, payload)
    producer.flush(CLIENT_TIMEOUT_S)
    if commit:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    else:
        producer.abort_transaction(CLIENT_TIMEOUT_S)


def _committed_through_a_failover(producer, topic: str, payloads: list[bytes]) -> None:
    """Commit `payloads` in one transaction, retrying it whole while the partition's
    leader moves (Kafka's way: abort what is abortable, then try again)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
    while True:
        try:
            _transaction(producer, topic, payloads, commit=True)
            return
        except KafkaException as error:
            if time.monotonic() > deadline or error.args[0].fatal():
                raise
            if error.args[0].txn_requires_abort():
                producer.abort_transaction(CLIENT_TIMEOUT_S)


def test_a_transactional_producer_and_a_read_committed_consumer_ride_out_a_leader_kill(
    kafka_cluster: Cluster,
):
    producer, transactional_id = _transactional_producer(kafka_cluster.brokers, "kfo")
    # The partition's leader is killed, not the producer's coordinator shard's (the
    # next tests kill that).
    coordinator = kafka_cluster.shard_leader(named_shard("", transactional_id, SHARDS))
    before = [b"before-%d" % i for i in range(20)]
    topic, leader_id = _topic_led_elsewhere(kafka_cluster, producer, "kfo", coordinator, before)
    _transaction(producer, topic, [b"aborted-%d" % i for i in range(5)], commit=False)
    leader = kafka_cluster.by_id(leader_id)
    leader.kill()
    try:
        _committed_through_a_failover(producer, topic, [b"after-%d" % i for i in range(20)])
        live = [b for b in kafka_cluster.brokers if b is not leader]
        # Assigned, not subscribed: this is about the partition's leader.
        received = _read_committed(live, topic, 40)
        assert received == [b"before-%d" % i for i in range(20)] + [
            b"after-%d" % i for i in range(20)
        ]
    finally:
        leader.start()


# ---------------------------------------------------------------- consumer groups


def _led_shards(cluster: Cluster) -> dict[int, str]:
    """Every coordinator shard's leader (broker id), once each shard has one."""
    leaders = {}
    for shard in range(SHARDS):
        record = cluster.read_record(f"/stableline/ownership/{cluster.name}/coordinators/{shard}")
        if record is not None:
            leaders[shard] = record["leader"]
    return leaders


def _group_led_elsewhere(cluster: Cluster, avoid: str, **settings: str) -> tuple[str, str] | None:
    """A new group name whose coordinator is led by a broker other than `avoid`, and
    that broker. FindCoordinator of a name on each shard first, so that every shard
    has a leader. `settings`: the Kafka client's (a secure cluster's). None when every
    shard is led by `avoid` (earlier kills can gather them on one broker)."""
    from confluent_kafka.admin import AdminClient

    prefix = f"kfo-group-{uuid.uuid4().hex}"
    names = (f"{prefix}-{n}" for n in itertools.count())
    by_shard: dict[int, str] = {}
    while len(by_shard) < SHARDS:
        name = next(names)
        by_shard.setdefault(named_shard("", name, SHARDS), name)
    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster.brokers), **settings})
    for future in admin.describe_consumer_groups(list(by_shard.values())).values():
        future.result(CLIENT_TIMEOUT_S)
    for shard, leader in _led_shards(cluster).items():
        if leader != avoid:
            return by_shard[shard], leader
    return None


def _topic_apart_from_a_group(
    cluster: Cluster, write: Callable[[str], None], prefix: str, **settings: str
) -> tuple[str, str, str, str]:
    """A new topic, made by `write(name)`, and a group whose coordinator another broker
    leads: (topic, its leader's id, group, the coordinator's id). Every shard led by the
    topic's leader: another topic is made (placement spreads new topics)."""
    for _ in range(12):
        topic = f"{prefix}-{next(_names)}"
        write(topic)
        leader_id = cluster.topic_leader(f"persistent://public/default/{topic}")
        found = _group_led_elsewhere(cluster, leader_id, **settings)
        if found is not None:
            return topic, leader_id, *found
    pytest.fail("every new topic was placed on the broker leading every coordinator shard")


def _commit(consumer, topic: str, offset: int) -> bool:
    """Commit `offset` on partition 0: True once the coordinator answered it done."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        (answered,) = consumer.commit(
            offsets=[TopicPartition(topic, 0, offset)], asynchronous=False
        )
    except KafkaException:
        return False
    return answered.error is None


class GroupChecker:
    """What one read_committed group member saw: each delivery's payload and offset,
    and each commit the coordinator answered done. Deliveries go forward; when they
    go back (the member's partition was assigned again, after the coordinator or the
    leader moved), they may restart at the last committed offset at the lowest."""

    def __init__(self) -> None:
        self.delivered: dict[bytes, int] = {}  # payload -> offset, first delivery
        self.order: list[bytes] = []
        self.committed: list[int] = []
        self.problems: list[str] = []
        self._last_offset = -1

    def deliver(self, payload: bytes, offset: int) -> None:
        if b"aborted" in payload:
            self.problems.append(f"aborted {payload!r} delivered at offset {offset}")
        if offset <= self._last_offset and self.committed and offset < self.committed[-1]:
            self.problems.append(
                f"went back to {payload!r} (offset {offset}), below the committed "
                f"offset {self.committed[-1]}"
            )
        self._last_offset = offset
        if payload not in self.delivered:
            self.delivered[payload] = offset
            self.order.append(payload)

    def commit(self, offset: int) -> None:
        if self.committed and offset < self.committed[-1]:
            self.problems.append(f"committed {offset} after {self.committed[-1]}")
        self.committed.append(offset)


def _group_consumer(cluster: Cluster, group: str):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": _bootstrap(cluster.brokers),
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def _read_and_commit(consumer, topic: str, checker: GroupChecker, expected: list[bytes]) -> None:
    """Poll until every payload of `expected` came and the offset after the last one
    is committed (commits refused while the group or its partition moves are tried
    again with the next poll)."""
    deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
    wanted = set(expected)
    end_offset = None
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            checker.deliver(message.value(), message.offset())
        if end_offset is None and wanted <= checker.delivered.keys():
            end_offset = checker.delivered[expected[-1]] + 1
        # Commit what came so far: every few messages, and the end once there.
        last = checker.order[-1] if checker.order else None
        if last is None:
            continue
        target = end_offset or checker.delivered[last] + 1
        if checker.committed and checker.committed[-1] >= target:
            if end_offset is not None:
                return
            continue
        if (end_offset is not None or len(checker.order) % 5 == 0) and _commit(
            consumer, topic, target
        ):
            checker.commit(target)
    pytest.fail(
        f"within {SERVED_AGAIN_WITHIN_S}s: {len(wanted - checker.delivered.keys())} messages "
        f"never came; committed {checker.committed[-1:]}, wanted {end_offset}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["partition leader", "group coordinator"])
def test_a_read_committed_consumer_group_rides_out_a_kill(kafka_cluster: Cluster, victim: str):
    """A group member reads and commits, the partition's leader or the group's
    coordinator is killed, the member carries on; a new member of the group then
    resumes at the last committed offset: nothing committed comes again, nothing is
    lost, nothing aborted is seen, committed offsets never go back."""
    from confluent_kafka import Producer, TopicPartition

    producer, transactional_id = _transactional_producer(kafka_cluster.brokers, "kfo-g")
    producer_coordinator = kafka_cluster.shard_leader(named_shard("", transactional_id, SHARDS))
    first = [b"a-%d" % i for i in range(10)]
    topic, leader_id = _topic_led_elsewhere(
        kafka_cluster, producer, "kfo-g", producer_coordinator, first
    )
    _transaction(producer, topic, [b"aborted-%d" % i for i in range(5)], commit=False)
    _transaction(producer, topic, [b"a-%d" % i for i in range(10, 20)], commit=True)
    # The producer's coordinator shard is led by another broker than the topic's.
    group, coordinator_id = _group_led_elsewhere(kafka_cluster, avoid=leader_id)
    expected = [b"a-%d" % i for i in range(20)]

    checker = GroupChecker()
    consumer = _group_consumer(kafka_cluster, group)
    killed = kafka_cluster.by_id(leader_id if victim == "partition leader" else coordinator_id)
    try:
        consumer.subscribe([topic])
        _read_and_commit(consumer, topic, checker, expected[:10])
        killed.kill()
        if victim == "partition leader":
            # The producer's coordinator lives; its next transaction goes to the new leader.
            more = [b"b-%d" % i for i in range(10)]
            _committed_through_a_failover(producer, topic, more)
            expected += more
        _read_and_commit(consumer, topic, checker, expected)
        consumer.close()
        # Written after the last commit: a new member gets exactly these.
        plain = Producer(
            {"bootstrap.servers": _bootstrap(kafka_cluster.brokers), "enable.idempotence": True}
        )
        after = [b"c-%d" % i for i in range(5)]
        for payload in after:
            plain.produce(topic, payload)
        assert plain.flush(CLIENT_TIMEOUT_S) == 0
        assert checker.problems == []
        assert checker.order[: len(expected)] == expected

        resumed = GroupChecker()
        resumed.committed = list(checker.committed)
        consumer = _group_consumer(kafka_cluster, group)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], CLIENT_TIMEOUT_S)
        assert committed.offset == checker.committed[-1]
        consumer.subscribe([topic])
        _read_and_commit(consumer, topic, resumed, after)
        assert resumed.problems == []
        assert resumed.order == after, "the group did not resume at its committed offset"
    finally:
        consumer.close()
        killed.start()


def _until(what: str, attempt):
    """`attempt()`'s first answer that is not None, tried again while it raises a
    KafkaException or answers None (the group's coordinator moving), within
    SERVED_AGAIN_WITHIN_S."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
    last: object = None
    while time.monotonic() < deadline:
        try:
            answer = attempt()
        except KafkaException as error:
            last = error
        else:
            if answer is not None:
                return answer
            last = "no answer yet"
        time.sleep(0.2)  # the next try, not a wait for the condition
    pytest.fail(f"{what} within {SERVED_AGAIN_WITHIN_S}s: last {last}")


def _group_offsets(admin, group: str) -> dict[tuple[str, int], int] | None:
    """OffsetFetch of every partition the group has committed on (null topics, as
    `kafka-consumer-groups --describe` asks): {(topic, partition): offset}."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    listed = future.result(CLIENT_TIMEOUT_S)
    return {(each.topic, each.partition): each.offset for each in listed.topic_partitions}


def _listed_groups(admin) -> set[str]:
    listed = admin.list_consumer_groups(request_timeout=CLIENT_TIMEOUT_S).result()
    return {each.group_id for each in listed.valid}


@pytest.mark.slow
def test_a_groups_index_follows_it_to_a_new_coordinator(kafka_cluster: Cluster):
    """A group without members commits on two partitions; its coordinator is killed.
    The shard's new leader answers OffsetFetch of every partition with both offsets
    and lists the group (its index is in etcd, its offsets at the partitions' owner)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    producer = Producer({"bootstrap.servers": _bootstrap(kafka_cluster.brokers)})
    # Two topics with one leader, so that a coordinator can be killed that leads
    # neither: only the group's index has to move.
    by_leader: dict[str, list[str]] = {}
    for _ in range(12):
        topic = f"kfo-i-{next(_names)}"
        for i in range(5):
            producer.produce(topic, b"m-%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        leader_id = kafka_cluster.topic_leader(f"persistent://public/default/{topic}")
        by_leader.setdefault(leader_id, []).append(topic)
        if len(by_leader[leader_id]) == 2:
            apart = _group_led_elsewhere(kafka_cluster, avoid=leader_id)
            if apart is not None:
                topics = by_leader[leader_id]
                group, coordinator_id = apart
                break
    else:
        pytest.fail(f"no two topics of twelve were placed on one broker: {by_leader}")
    committer = Consumer(
        {"bootstrap.servers": _bootstrap(kafka_cluster.brokers), "group.id": group}
    )
    offsets = [TopicPartition(topics[0], 0, 3), TopicPartition(topics[1], 0, 5)]
    try:
        # Retried while an owner is out of the coordinator's reach (a broker an
        # earlier test restarted may still be taking its topics back).
        committed = _until(
            "the commit",
            lambda: committer.commit(offsets=offsets, asynchronous=False),
        )
        assert all(each.error is None for each in committed), committed
    finally:
        committer.close()
    record = kafka_cluster.read_record(
        kafka_group_partitions_path(kafka_cluster.name, group, topics[0])
    )
    assert record == {"partitions": [0]}
    coordinator = kafka_cluster.by_id(coordinator_id)
    coordinator.kill()
    live = [b for b in kafka_cluster.brokers if b is not coordinator]
    try:
        admin = AdminClient({"bootstrap.servers": _bootstrap(live)})
        expected = {(topics[0], 0): 3, (topics[1], 0): 5}
        offsets = _until(
            "every committed offset from the new coordinator",
            lambda: _group_offsets(admin, group) or None,
        )
        assert offsets == expected
        assert kafka_cluster.shard_leader(named_shard("", group, SHARDS)) != coordinator_id
        _until("the group listed", lambda: group in _listed_groups(admin) or None)
    finally:
        coordinator.start()


def test_offsets_committed_in_a_transaction_reach_a_partition_another_broker_owns(
    kafka_cluster: Cluster,
):
    """send_offsets_to_transaction for a group whose coordinator does not own the
    input partition: the owner holds the offset's acknowledgement in the transaction
    (Peer HoldGroupOffsets). An aborted transaction's offset never shows; a committed
    one is the group's offset, from OffsetFetch of that partition and of every one."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = _bootstrap(kafka_cluster.brokers)
    plain = Producer({"bootstrap.servers": bootstrap})

    def write(topic: str) -> None:
        for i in range(10):
            plain.produce(topic, b"in-%d" % i)
        assert plain.flush(CLIENT_TIMEOUT_S) == 0

    source, _leader, group, _coordinator = _topic_apart_from_a_group(kafka_cluster, write, "kfo-t")
    sink = f"kfo-t-{next(_names)}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"kfo-t-{uuid.uuid4().hex}"}
    )
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        # (offset, commit or abort, the group's offset after)
        for offset, commit, expected in ((4, True, 4), (9, False, 4), (6, True, 6)):
            producer.begin_transaction()
            producer.produce(sink, b"out-%d" % offset)
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, offset)],
                consumer.consumer_group_metadata(),
                CLIENT_TIMEOUT_S,
            )
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)
            # The end reaches the owner's subscription on its own: wait for it.
            committed = _until(
                f"offset {expected} committed",
                lambda expected=expected: (
                    consumer.committed([TopicPartition(source, 0)], CLIENT_TIMEOUT_S)[0].offset
                    == expected
                    or None
                ),
            )
            assert committed
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _until("every offset", lambda: _group_offsets(admin, group) or None) == {(source, 0): 6}


@pytest.fixture(scope="module")
def secure_kafka_cluster(cluster_etcd, tmp_path_factory) -> Iterator[SecureCluster]:
    with secure_brokers(
        cluster_etcd, tmp_path_factory.mktemp("kafka-secure"), kafka=True
    ) as secure:
        yield secure


def _kafka_settings(secure: SecureCluster, role: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": role,
        "sasl.password": secure.token(role),
        "ssl.ca.location": str(secure.ca_file),
    }


def _commit_as(secure: SecureCluster, brokers, role: str, group: str, topic: str, offset: int):
    """Commit `offset` on partition 0 as `role`: None when done, else the error code
    (retried while the group's coordinator moves)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "group.id": group,
            **_kafka_settings(secure, role),
        }
    )

    def attempt():
        try:
            (answered,) = consumer.commit(
                offsets=[TopicPartition(topic, 0, offset)], asynchronous=False
            )
        except KafkaException as error:
            code = error.args[0].code()
            if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
                return code
            raise  # the coordinator moving: again
        return "done" if answered.error is None else answered.error.code()

    try:
        answer = _until(f"{role}'s commit answered", attempt)
    finally:
        consumer.close()
    return None if answer == "done" else answer


@pytest.mark.slow
def test_a_groups_owner_role_follows_it_to_a_new_coordinator(secure_kafka_cluster):
    """With authorization on, alice's group stays hers when its coordinator is
    killed: through the shard's new leader mallory's commit is refused
    GROUP_AUTHORIZATION_FAILED (before, the new coordinator knew no owner and let the
    first claimant take the group), and alice commits and reads her offsets."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient

    secure = secure_kafka_cluster
    cluster = secure.cluster
    producer = Producer(
        {"bootstrap.servers": _bootstrap(cluster.brokers), **_kafka_settings(secure, "alice")}
    )

    def write(topic: str) -> None:
        for i in range(5):
            producer.produce(topic, b"m-%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0

    topic, _leader, group, coordinator_id = _topic_apart_from_a_group(
        cluster, write, "kfo-o", **_kafka_settings(secure, SUPERUSER)
    )
    assert _commit_as(secure, cluster.brokers, "alice", group, topic, 2) is None
    assert (
        _commit_as(secure, cluster.brokers, "mallory", group, topic, 4)
        == KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    coordinator = cluster.by_id(coordinator_id)
    coordinator.kill()
    live = [b for b in cluster.brokers if b is not coordinator]
    try:
        assert (
            _commit_as(secure, live, "mallory", group, topic, 4)
            == KafkaError.GROUP_AUTHORIZATION_FAILED
        )
        assert cluster.shard_leader(named_shard("", group, SHARDS)) != coordinator_id
        assert _commit_as(secure, live, "alice", group, topic, 3) is None
        admin = AdminClient(
            {"bootstrap.servers": _bootstrap(live), **_kafka_settings(secure, "alice")}
        )
        offsets = _until("alice's offsets", lambda: _group_offsets(admin, group) or None)
        assert offsets == {(topic, 0): 3}
    finally:
        coordinator.start()


# ---------------------------------------------------------------- transaction coordinator


def _commit_across_a_coordinator_kill(new_producer, producer, topic: str, payloads: list[bytes]):
    """Commit `payloads` in one transaction while the producer's coordinator moves, as
    a Kafka application does: abort what is abortable and try again, and after a
    fatal error make the producer anew (InitProducerId again). The producer used."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
    while True:
        try:
            _transaction(producer, topic, payloads, commit=True)
            return producer
        except KafkaException as error:
            if time.monotonic() > deadline:
                raise
            if error.args[0].fatal():
                producer = new_producer()
                continue
            if error.args[0].txn_requires_abort():
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(CLIENT_TIMEOUT_S)


def _transactional_record(cluster: Cluster, transactional_id: str) -> dict:
    record = cluster.read_record(kafka_transactional_id_path(cluster.name, "", transactional_id))
    assert record is not None
    return record


@pytest.mark.slow
def test_a_transactional_producer_commits_after_its_coordinator_is_killed(
    kafka_cluster: Cluster,
):
    """The leader of the shard of a producer's transactional.id is killed with a
    transaction open: the producer's next transaction commits through the shard's new
    leader, its producer id stays its own (the epoch only rises), and a read_committed
    consumer reads every committed message once, in order, and nothing of the
    aborted or the open transaction."""
    from confluent_kafka import KafkaException, Producer

    transactional_id = f"kfo-c-{uuid.uuid4().hex}"
    live: list = list(kafka_cluster.brokers)

    def new_producer():
        producer = Producer(
            {
                "bootstrap.servers": _bootstrap(live),
                "transactional.id": transactional_id,
                "transaction.timeout.ms": 10_000,
            }
        )
        deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
        while True:
            try:
                producer.init_transactions(CLIENT_TIMEOUT_S)
                return producer
            except KafkaException as error:
                if time.monotonic() > deadline or not error.args[0].retriable():
                    raise

    producer = new_producer()
    coordinator_id = kafka_cluster.shard_leader(named_shard("", transactional_id, SHARDS))
    before = [b"before-%d" % i for i in range(20)]
    topic, _leader = _topic_led_elsewhere(kafka_cluster, producer, "kfo-c", coordinator_id, before)
    first = _transactional_record(kafka_cluster, transactional_id)
    _transaction(producer, topic, [b"aborted-%d" % i for i in range(5)], commit=False)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, b"open-%d" % i)
    producer.flush(CLIENT_TIMEOUT_S)
    coordinator = kafka_cluster.by_id(coordinator_id)
    coordinator.kill()
    live.remove(coordinator)
    try:
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(CLIENT_TIMEOUT_S)
        after = [b"after-%d" % i for i in range(20)]
        _commit_across_a_coordinator_kill(new_producer, producer, topic, after)
        assert kafka_cluster.shard_leader(named_shard("", transactional_id, SHARDS)) != (
            coordinator_id
        )
        last = _transactional_record(kafka_cluster, transactional_id)
        assert last["producerId"] == first["producerId"]
        assert last["epoch"] >= first["epoch"]
        received = _read_committed(live, topic, 40)
        assert received == [b"before-%d" % i for i in range(20)] + after
    finally:
        coordinator.start()


def _read_committed(brokers, topic: str, count: int) -> list[bytes]:
    """What a read_committed consumer assigned partition 0 reads from its start,
    waiting for `count` messages and one poll more (none may follow)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(brokers),
            "group.id": f"kfo-reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        received: list[bytes] = []
        deadline = time.monotonic() + SERVED_AGAIN_WITHIN_S
        while len(received) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append(message.value())
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            received.append(message.value())
    finally:
        consumer.close()
    return received
