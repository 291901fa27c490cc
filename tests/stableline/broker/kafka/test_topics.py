"""CreateTopics and DeleteTopics from Kafka's admin clients (confluent-kafka's
AdminClient, kafka-python's KafkaAdminClient): a partitioned topic for more than one
partition, a plain one for one, Kafka's errors for what cannot be made, and deletion
of either kind."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.stableline.broker.kafka.conftest import confluent_consume, confluent_produce

TIMEOUT_S = 20


def partitions_of(broker, topic: str) -> int:
    """The broker's own count (0: not partitioned), from its HTTP admin."""
    return broker.admin(f"/admin/v2/persistent/public/default/{topic}/partitions")["partitions"]


def topics_of(broker) -> list[str]:
    return broker.admin("/admin/v2/persistent/public/default")


def kafka_error(future) -> int:
    """The Kafka error code a confluent-kafka admin future failed with (0: none)."""
    try:
        future.result(TIMEOUT_S)
    except KafkaException as error:
        return error.args[0].code()
    return 0


def test_confluent_creates_partitioned_and_plain_topics_and_deletes_them(module_kafka_broker):
    admin = AdminClient({"bootstrap.servers": module_kafka_broker.bootstrap})
    created = admin.create_topics([NewTopic("many", 3), NewTopic("one", 1)])
    assert {name: kafka_error(f) for name, f in created.items()} == {"many": 0, "one": 0}
    assert partitions_of(module_kafka_broker, "many") == 3
    assert partitions_of(module_kafka_broker, "one") == 0
    assert "persistent://public/default/one" in topics_of(module_kafka_broker)
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert (len(listed["many"].partitions), len(listed["one"].partitions)) == (3, 1)
    confluent_produce(module_kafka_broker.bootstrap, "one", [b"kept"])
    assert confluent_consume(module_kafka_broker.bootstrap, "one", 1) == [(0, b"kept")]

    again = admin.create_topics([NewTopic("many", 2), NewTopic("one", 1)])
    assert {name: kafka_error(f) for name, f in again.items()} == {
        "many": KafkaError.TOPIC_ALREADY_EXISTS,
        "one": KafkaError.TOPIC_ALREADY_EXISTS,
    }

    deleted = admin.delete_topics(["many", "one"])
    assert {name: kafka_error(f) for name, f in deleted.items()} == {"many": 0, "one": 0}
    assert partitions_of(module_kafka_broker, "many") == 0
    assert not [t for t in topics_of(module_kafka_broker) if "/many" in t or t.endswith("/one")]
    gone = admin.delete_topics(["one"])
    assert kafka_error(gone["one"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_validate_only_checks_and_makes_nothing(module_kafka_broker):
    admin = AdminClient({"bootstrap.servers": module_kafka_broker.bootstrap})
    checked = admin.create_topics([NewTopic("dry", 4)], validate_only=True)
    assert kafka_error(checked["dry"]) == 0
    assert partitions_of(module_kafka_broker, "dry") == 0
    assert not [t for t in topics_of(module_kafka_broker) if "dry" in t]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"num_partitions": 0}, KafkaError.INVALID_PARTITIONS),
        ({"num_partitions": 2000}, KafkaError.INVALID_PARTITIONS),  # past the broker's 1024
        ({"num_partitions": 2, "replication_factor": 3}, KafkaError.INVALID_REPLICATION_FACTOR),
        (
            {"num_partitions": 2, "configs": {"cleanup.policy": "compact"}},
            KafkaError.INVALID_CONFIG,
        ),
        (
            {"num_partitions": 2, "assignments": {0: [0], 1: [0]}},
            KafkaError.INVALID_REPLICA_ASSIGNMENT,
        ),
    ],
)
def test_kafka_python_gets_kafkas_error_for_what_cannot_be_made(
    module_kafka_broker, options, error
):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=module_kafka_broker.bootstrap)
    try:
        if "assignments" in options:
            options = {**options, "num_partitions": -1, "replication_factor": -1}
        result = admin.create_topics({"bad": options}, raise_errors=False)
    finally:
        admin.close()
    ((topic,),) = [result["topics"]]
    assert (topic["name"], topic["error_code"]) == ("bad", error)
    assert topic["error_message"]  # says why
    assert partitions_of(module_kafka_broker, "bad") == 0


def test_kafka_python_creates_with_the_default_count_and_deletes(module_kafka_broker):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=module_kafka_broker.bootstrap)
    try:
        result = admin.create_topics({"defaults": {}, "four": {"num_partitions": 4}})
        assert [t["error_code"] for t in result["topics"]] == [0, 0]
        assert "persistent://public/default/defaults" in topics_of(module_kafka_broker)
        assert partitions_of(module_kafka_broker, "four") == 4
        deleted = admin.delete_topics(["four", "never-made"], raise_errors=False)
        assert [(r["name"], r["error_code"]) for r in deleted["topics"]] == [
            ("four", 0),
            ("never-made", KafkaError.UNKNOWN_TOPIC_OR_PART),
        ]
    finally:
        admin.close()
    assert partitions_of(module_kafka_broker, "four") == 0


def test_a_name_asked_twice_in_one_request_is_refused_for_both(module_kafka_broker):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as PythonNewTopic

    admin = KafkaAdminClient(bootstrap_servers=module_kafka_broker.bootstrap)
    try:
        result = admin.create_topics(
            [PythonNewTopic("twice", 1, 1), PythonNewTopic("twice", 2, 1)], raise_errors=False
        )
    finally:
        admin.close()
    assert [t["error_code"] for t in result["topics"]] == [KafkaError.INVALID_REQUEST] * 2
    assert "persistent://public/default/twice" not in topics_of(module_kafka_broker)
