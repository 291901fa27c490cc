"""Fetch on a real broker, with crafted requests: max_bytes bounds the whole answer
(only the first batch of the first partition with data may pass it), each
partition's max_bytes bounds that partition, a partition named twice is answered
once, and a request naming more partitions than the broker's bound is refused
unread, with one log line."""

from __future__ import annotations

import time
from pathlib import Path

from kafka.protocol.consumer import FetchResponse

from stableline.broker.kafka.protocol import messages as m
from tests.stableline.broker.kafka.conftest import (
    KafkaBroker,
    RawKafka,
    make_partitioned,
    record_batch,
)
from tests.stableline.broker.kafka.raw_requests import (
    RawConnection,
    Watch,
    fetch_body,
    health_seconds,
)

KIB = 1024
MIB = 1024 * KIB


def _produce(broker: KafkaBroker, topic: str, partition: int, value: bytes, times: int) -> None:
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    client = RawKafka(broker.kafka_port)
    try:
        assert client.metadata([topic], auto_create=True) == {topic: 0}
        for _ in range(times):
            data = ProduceRequest.TopicProduceData.PartitionProduceData(
                index=partition, records=record_batch(value)
            )
            request = ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
            )
            response = client.send(request, 7, ProduceResponse)
            assert response.responses[0].partition_responses[0].error_code == 0
    finally:
        client.close()


def _answered(frame: bytes) -> list[tuple[str, int, int, int]]:
    """(topic, partition, error, bytes of records) of each partition a v4 answer has."""
    response = FetchResponse.decode(frame[4:], version=4)
    return [
        (topic.topic, p.partition_index, p.error_code, len(p.records or b""))
        for topic in response.responses
        for p in topic.partitions
    ]


def test_a_partition_named_many_times_is_answered_once_within_max_bytes(kafka_broker):
    big = bytes(600 * KIB)
    _produce(kafka_broker, "repeated", 0, big, 3)
    with RawConnection(kafka_broker.kafka_port) as connection:
        frame = connection.call(fetch_body([("repeated", [0] * 40)], 1 * MIB, 1 * MIB))
    assert frame is not None
    answered = _answered(frame)
    assert [(t, p, e) for t, p, e, _ in answered] == [("repeated", 0, 0)]
    # One 600 KiB batch fits the 1 MiB asked for, two do not.
    assert 600 * KIB < answered[0][3] < 1 * MIB
    assert len(frame) < 1 * MIB


def test_once_max_bytes_is_spent_the_other_partitions_get_no_records(kafka_broker):
    make_partitioned(kafka_broker, "spread", 3)
    for partition in range(3):
        _produce(kafka_broker, "spread", partition, bytes(100 * KIB), 2)
    with RawConnection(kafka_broker.kafka_port) as connection:
        # 150 KiB: the first partition's first batch, then no room for a whole batch.
        answered = _answered(connection.call(fetch_body([("spread", [0, 1, 2])], 150 * KIB, MIB)))
        assert [(p, e) for _, p, e, _ in answered] == [(0, 0), (1, 0), (2, 0)]
        sizes = [size for *_, size in answered]
        assert 100 * KIB < sizes[0] < 150 * KIB and sizes[1:] == [0, 0]
        # 10 KiB, less than one batch: the first partition's first batch still goes
        # out (a reader moves on), and nothing else.
        sizes = [
            s
            for *_, s in _answered(connection.call(fetch_body([("spread", [2, 0])], 10 * KIB, MIB)))
        ]
        assert 100 * KIB < sizes[0] < 110 * KIB and sizes[1] == 0
        # A partition's own max_bytes is kept for every partition but the first one
        # with data: its first batch goes out, the second partition's does not fit.
        frame = connection.call(fetch_body([("spread", [1, 0])], 10 * MIB, 150 * KIB))
        sizes = [size for *_, size in _answered(frame)]
        assert 100 * KIB < sizes[0] < 150 * KIB and 100 * KIB < sizes[1] < 150 * KIB
        frame = connection.call(fetch_body([("spread", [1, 0])], 10 * MIB, 50 * KIB))
        sizes = [size for *_, size in _answered(frame)]
        assert 100 * KIB < sizes[0] < 150 * KIB and sizes[1] == 0


def test_a_fetch_repeating_a_big_partition_leaves_the_broker_small_and_healthy(kafka_broker):
    """The attack of a consume-only reader, scaled down: a 4 MiB record fetched
    through one request naming its partition 150 times."""
    _produce(kafka_broker, "bulky", 0, bytes(4 * MIB), 1)
    with Watch(kafka_broker) as watch, RawConnection(kafka_broker.kafka_port) as connection:
        started = time.monotonic()
        frame = connection.call(fetch_body([("bulky", [0] * 150)], 1 * MIB, 1 * MIB))
        took = time.monotonic() - started
    assert frame is not None and len(frame) < 5 * MIB
    assert [p for _, p, _, _ in _answered(frame)] == [0]
    assert watch.growth < 150 * MIB, (watch.before, watch.peak)
    assert took < 10.0
    assert max(watch.health) < 5.0, watch.health  # frozen for the whole Fetch before


def test_a_fetch_naming_more_partitions_than_the_bound_is_refused_with_one_log_line(tmp_path: Path):
    with KafkaBroker(
        tmp_path / "data", env={"STABLELINE_KAFKA_MAX_PARTITIONS_PER_REQUEST": "1000"}
    ).running() as broker:
        with RawConnection(broker.kafka_port) as connection:
            assert connection.call(fetch_body([("nowhere", range(1000))], MIB, MIB)) is not None
            started = time.monotonic()
            assert connection.call(fetch_body([("nowhere", range(100_000))], MIB, MIB)) is None
            assert time.monotonic() - started < 5.0
        assert health_seconds(broker) < 2.0
        lines = [line for line in broker.log().splitlines() if "1,000 partitions" in line]
        assert len(lines) == 1, lines


def test_refused_partitions_make_one_log_line_per_request(tmp_path: Path):
    from tests.stableline.broker.kafka.test_security import SecureKafka

    process = KafkaBroker(tmp_path / "data", extra_args=["--secure"])
    with process.running():
        secure = SecureKafka(process)
        raw = secure.connect()
        assert raw.authenticate(secure.token("nobody")).error_code == 0
        with RawConnection(0, sock=raw.sock) as connection:
            # 3000 topics no grant covers, each named with partition 0 twice.
            topics = [(f"t{i}", [0, 0]) for i in range(3000)]
            answered = _answered(connection.call(fetch_body(topics, MIB, MIB)))
        assert len(answered) == 3000
        assert {e for _, _, e, _ in answered} == {m.ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        lines = [line for line in process.log().splitlines() if "may not consume" in line]
        assert len(lines) == 1, lines[:3]
        assert "3000 refused" in lines[0]
