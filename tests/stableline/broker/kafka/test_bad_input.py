"""Raw frames on the Kafka port: bad ones cost their own connection and nothing else;
unknown APIs and versions get UNSUPPORTED_VERSION; a retried idempotent batch is
written once."""

from __future__ import annotations

import contextlib
import socket
import struct

from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader
from tests.stableline.broker.kafka.conftest import (
    KafkaBroker,
    RawKafka,
    confluent_consume,
    end_offset,
    record_batch,
)


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack(">i", len(body)) + body)


def receive_frame(sock: socket.socket) -> bytes:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + struct.pack(">h", 1) + b"t"


def api_versions_works(bootstrap: str) -> bool:
    with connect(bootstrap) as sock:
        send_frame(sock, header(m.ApiKey.API_VERSIONS, 0))
        response = Reader(receive_frame(sock))
        return response.int32() == 7 and response.int16() == 0


def test_an_oversized_frame_is_refused_before_it_is_read(kafka_broker):
    with connect(kafka_broker.bootstrap) as sock:
        sock.sendall(struct.pack(">i", 1 << 30))  # 1 GiB announced, none of it sent
        assert closed_by_broker(sock)
    assert api_versions_works(kafka_broker.bootstrap)


def test_a_negative_frame_size_closes_that_connection_only(kafka_broker):
    with connect(kafka_broker.bootstrap) as other, connect(kafka_broker.bootstrap) as sock:
        sock.sendall(struct.pack(">i", -5))
        assert closed_by_broker(sock)
        send_frame(other, header(m.ApiKey.API_VERSIONS, 0))
        assert Reader(receive_frame(other)).int32() == 7


def test_a_malformed_request_closes_that_connection_only(kafka_broker):
    with connect(kafka_broker.bootstrap) as other, connect(kafka_broker.bootstrap) as sock:
        # A Metadata v1 request claiming a million topics in four bytes.
        send_frame(sock, header(m.ApiKey.METADATA, 1) + struct.pack(">i", 1_000_000))
        assert closed_by_broker(sock)
        send_frame(other, header(m.ApiKey.API_VERSIONS, 0))
        assert Reader(receive_frame(other)).int32() == 7


def test_an_unknown_api_key_gets_unsupported_version_and_the_connection_stays(kafka_broker):
    with connect(kafka_broker.bootstrap) as sock:
        send_frame(sock, header(9999, 0, correlation_id=11))
        response = Reader(receive_frame(sock))
        assert (response.int32(), response.int16()) == (11, m.ErrorCode.UNSUPPORTED_VERSION)
        send_frame(sock, header(m.ApiKey.API_VERSIONS, 0))
        assert Reader(receive_frame(sock)).int32() == 7


def test_an_unserved_fetch_version_gets_unsupported_version(kafka_broker):
    with connect(kafka_broker.bootstrap) as sock:
        send_frame(sock, header(m.ApiKey.FETCH, 13, correlation_id=12) + b"\x00")
        response = Reader(receive_frame(sock))
        assert response.int32() == 12
        response.tagged_fields()  # Fetch v13 is flexible: response header v1
        assert response.int16() == m.ErrorCode.UNSUPPORTED_VERSION


def test_a_too_new_api_versions_request_gets_the_served_versions_in_v0(kafka_broker):
    with connect(kafka_broker.bootstrap) as sock:
        send_frame(sock, header(m.ApiKey.API_VERSIONS, 99))
        response = Reader(receive_frame(sock))
        assert response.int32() == 7
        assert response.int16() == m.ErrorCode.UNSUPPORTED_VERSION
        served = response.array(lambda r: (r.int16(), r.int16(), r.int16()))
        assert (m.ApiKey.API_VERSIONS, 0, 3) in served


def produce_frame(correlation_id: int, producer_id: int, base_sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for offset in range(3):
        builder.append(offset, timestamp=1000, key=None, value=b"v%d" % offset, headers=[])
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=0, records=bytes(builder.build())
    )
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[partition])],
    )
    return header(m.ApiKey.PRODUCE, 8, correlation_id) + request.encode(version=8)


def produced_offset(sock: socket.socket) -> tuple[int, int]:
    """(error code, base offset) of a one-partition Produce v8 response."""
    response = Reader(receive_frame(sock))
    response.int32()  # correlation id
    response.int32()  # topics
    response.string()
    response.int32()  # partitions
    response.int32()  # index
    return response.int16(), response.int64()


def test_a_retried_idempotent_batch_is_written_once_and_answered_with_its_offset(
    kafka_broker,
):
    from tests.stableline.broker.kafka.conftest import confluent_produce

    confluent_produce(kafka_broker.bootstrap, "orders", [b"first"])  # creates the topic
    with connect(kafka_broker.bootstrap) as sock:
        send_frame(sock, produce_frame(1, producer_id=77, base_sequence=0))
        assert produced_offset(sock) == (0, 1)
        send_frame(sock, produce_frame(2, producer_id=77, base_sequence=0))  # the retry
        assert produced_offset(sock) == (0, 1)
        send_frame(sock, produce_frame(3, producer_id=77, base_sequence=3))
        assert produced_offset(sock) == (0, 4)
        send_frame(sock, produce_frame(4, producer_id=77, base_sequence=9))  # a gap
        assert produced_offset(sock)[0] == m.ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert end_offset(kafka_broker.bootstrap, "orders") == 7
    values = [value for _, value in confluent_consume(kafka_broker.bootstrap, "orders", 7)]
    assert values == [b"first", b"v0", b"v1", b"v2", b"v0", b"v1", b"v2"]


def test_random_and_damaged_requests_leave_the_broker_serving(kafka_broker):
    import random

    rng = random.Random(21)
    valid = produce_frame(1, producer_id=-1, base_sequence=-1)
    for round_ in range(200):
        if round_ % 2:
            frame = bytearray(valid)  # a real Produce with a few bytes damaged
            for _ in range(rng.randint(1, 8)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            body = bytes(frame)
        else:
            api_key = rng.choice([0, 1, 2, 3, 18, 22, rng.randrange(-5, 100)])
            body = header(api_key, rng.randrange(0, 14)) + rng.randbytes(rng.randrange(64))
        with connect(kafka_broker.bootstrap) as sock:
            sock.settimeout(2)  # a damaged acks field may say 0: then no answer comes
            send_frame(sock, body)
            # An answer, or the connection closed: both fine.
            with contextlib.suppress(ConnectionError, TimeoutError):
                receive_frame(sock)
    assert api_versions_works(kafka_broker.bootstrap)
    assert kafka_broker.process.poll() is None
    assert "Traceback" not in kafka_broker.log(), kafka_broker.log()[-3000:]


def test_acks_zero_gets_no_response_and_the_records_are_written(kafka_broker):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks=0)
    for index in range(20):
        producer.send("orders", value=b"%d" % index)
    producer.flush(20)
    producer.close()
    got = confluent_consume(kafka_broker.bootstrap, "orders", 20)
    assert got == [(i, b"%d" % i) for i in range(20)]


def test_a_gzip_bomb_gets_message_too_large_and_the_broker_stays_up(kafka_broker):
    megabyte_of_zeros = bytes(1 << 20)
    # Past the bound: 16 x the 5 MiB a Produce may carry.
    bomb = record_batch(*[megabyte_of_zeros] * 81, compression=1)
    assert len(bomb) < 1 << 20
    client = RawKafka(kafka_broker.kafka_port)
    try:
        assert client.metadata(["bombed"], auto_create=True) == {"bombed": 0}
        assert client.produce("bombed", bomb) == 10  # MESSAGE_TOO_LARGE
        assert client.produce("bombed") == 0
    finally:
        client.close()
    assert [value for _, value in confluent_consume(kafka_broker.bootstrap, "bombed", 1)] == [
        b"raw"
    ]
    assert "Traceback" not in kafka_broker.log()


def test_a_fetch_asking_for_more_than_max_fetch_bytes_gets_that_much(tmp_path):
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    with KafkaBroker(
        tmp_path / "data", env={"STABLELINE_MAX_FETCH_BYTES": "8192"}
    ).running() as broker:
        client = RawKafka(broker.kafka_port)
        try:
            assert client.metadata(["wide"], auto_create=True) == {"wide": 0}
            for index in range(4):
                assert client.produce("wide", record_batch(b"%d" % index * 3000)) == 0

            def fetch(offset: int) -> bytes:
                partition = FetchRequest.FetchTopic.FetchPartition(
                    partition=0,
                    fetch_offset=offset,
                    log_start_offset=-1,
                    partition_max_bytes=2**31 - 1,
                )
                request = FetchRequest(
                    replica_id=-1,
                    max_wait_ms=0,
                    min_bytes=0,
                    max_bytes=2**31 - 1,
                    isolation_level=0,
                    topics=[FetchRequest.FetchTopic(topic="wide", partitions=[partition])],
                )
                response = client.send(request, 5, FetchResponse)
                return response.responses[0].partitions[0].records

            first = fetch(0)
            assert 3000 < len(first) <= 8192  # two batches of four
            assert 3000 < len(fetch(2)) <= 8192
        finally:
            client.close()
