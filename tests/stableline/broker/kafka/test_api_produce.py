"""Produce on a real broker, with crafted requests: the records of one request are
inflated under one budget, all its batches and partitions together. A request of
many small compressed batches, each within the per-batch bound and together
gigabytes, is refused whole (MESSAGE_TOO_LARGE, nothing written) as soon as the
budget is spent, the broker's memory stays bounded and its health check answers
meanwhile."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.producer import ProduceResponse

from tests.stableline.broker.kafka.conftest import RawKafka, make_partitioned, record_batch
from tests.stableline.broker.kafka.raw_requests import RawConnection, Watch, produce_body

MIB = 1024 * 1024
GZIP, ZSTD = 1, 4


def _errors(frame: bytes) -> list[int]:
    response = ProduceResponse.decode(frame[4:], version=3)
    return [p.error_code for t in response.responses for p in t.partition_responses]


def _end_offset(port: int, topic: str, partition: int = 0) -> int:
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

    client = RawKafka(port)
    try:
        wanted = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=partition, timestamp=-1
        )
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[wanted])],
        )
        answer = client.send(request, 1, ListOffsetsResponse).topics[0].partitions[0]
        assert answer.error_code == 0
        return answer.offset
    finally:
        client.close()


def _create(broker, topic: str, partitions: int = 0) -> None:
    if partitions:
        make_partitioned(broker, topic, partitions)
        return
    client = RawKafka(broker.kafka_port)
    try:
        assert client.metadata([topic], auto_create=True) == {topic: 0}
    finally:
        client.close()


@pytest.mark.parametrize("codec", [ZSTD, GZIP], ids=["zstd", "gzip"])
def test_many_small_compressed_batches_are_refused_whole_with_memory_bounded(kafka_broker, codec):
    """40 batches of one 16 MiB record of zeros: each within the 80 MiB a batch may
    inflate to, 640 MiB together (the attack scaled down from gigabytes)."""
    topic = f"bombs-{codec}"
    _create(kafka_broker, topic)
    bomb = record_batch(bytes(16 * MIB), compression=codec)
    assert len(bomb) < 64 * 1024
    body = produce_body(topic, [(0, bomb * 40)])
    with Watch(kafka_broker) as watch, RawConnection(kafka_broker.kafka_port) as connection:
        started = time.monotonic()
        frame = connection.call(body)
        took = time.monotonic() - started
    assert frame is not None and _errors(frame) == [10]  # MESSAGE_TOO_LARGE
    assert _end_offset(kafka_broker.kafka_port, topic) == 0
    assert watch.growth < 300 * MIB, (watch.before, watch.peak)
    assert took < 5.0
    assert max(watch.health) < 5.0, watch.health  # frozen for the whole inflation before


def test_a_produce_past_its_budget_writes_none_of_its_partitions(kafka_broker):
    _create(kafka_broker, "halves", partitions=2)
    fine = record_batch(b"fine")
    bombs = record_batch(bytes(16 * MIB), compression=ZSTD) * 8
    with RawConnection(kafka_broker.kafka_port) as connection:
        frame = connection.call(produce_body("halves", [(0, fine), (1, bombs)]))
        assert _errors(frame) == [10, 10]
        assert _end_offset(kafka_broker.kafka_port, "halves", 0) == 0
        # Within the budget, the same request is written.
        frame = connection.call(produce_body("halves", [(0, fine), (1, bombs[: len(bombs) // 8])]))
        assert _errors(frame) == [0, 10]  # 16 MiB: more than max_message_size
        assert _end_offset(kafka_broker.kafka_port, "halves", 0) == 1
