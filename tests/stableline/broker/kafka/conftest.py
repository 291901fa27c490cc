"""A real broker with its Kafka port open, and real Kafka clients from PyPI."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from stableline.testing import BrokerProcess

# Clients give up on a broker this long after it stops answering.
CLIENT_TIMEOUT_S = 20.0


class KafkaBroker(BrokerProcess):
    """A BrokerProcess with its Kafka port open on a free port (kept across restarts)."""

    def __init__(self, data_dir: Path, **options) -> None:
        super().__init__(data_dir, kafka_port=0, **options)

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data").running() as process:
        yield process


@pytest.fixture(scope="module")
def module_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker for a module whose tests each use topics of their own."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka") / "data").running() as process:
        yield process


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], **config) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failures = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    for value in values:
        producer.produce(topic, value=value, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "messages still undelivered"
    assert not failures, failures


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes], **config) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)
    for value in values:
        producer.send(topic, value=value)
    producer.flush(CLIENT_TIMEOUT_S)
    producer.close()


def confluent_consume(
    bootstrap: str,
    topic: str,
    count: int,
    isolation: str = "read_uncommitted",
    partition: int = 0,
    **config,
) -> list[tuple[int, bytes]]:
    """(offset, value) of the first `count` records of a partition from its earliest
    offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # assigned partitions: no group coordination
            "enable.auto.commit": False,
            "isolation.level": isolation,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    return poll_records(consumer, count)


def poll_records(consumer, count: int) -> list[tuple[int, bytes]]:
    """(offset, value) of up to `count` records a confluent-kafka consumer polls within
    CLIENT_TIMEOUT_S; fails on any error. Closes the consumer."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    count: int,
    isolation: str = "read_uncommitted",
    partition: int = 0,
    **config,
) -> list[tuple[int, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        **config,
    )
    assigned = TopicPartition(topic, partition)
    consumer.assign([assigned])
    consumer.seek_to_beginning(assigned)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((record.offset, record.value) for record in records)
    finally:
        consumer.close()
    return got


def end_offset(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> int:
    """The partition's end offset (ListOffsets latest) at an isolation level."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation)
    try:
        partition = TopicPartition(topic, 0)
        return consumer.end_offsets([partition])[partition]
    finally:
        consumer.close()


def record_batch(*values: bytes, compression: int = 0) -> bytes:
    """One plain record batch of `values` (compression 1: gzip), as a client writes it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


class RawKafka:
    """One Kafka connection by hand (TLS when given a CA), requests encoded by
    kafka-python's spec classes."""

    def __init__(self, port: int, ca_file: Path | None = None, source: str | None = None):
        # `source`: the local address to connect from (127.0.0.2 is loopback too).
        sock = socket.create_connection(
            ("127.0.0.1", port), timeout=10, source_address=(source, 0) if source else None
        )
        if ca_file is not None:
            context = ssl.create_default_context(cafile=str(ca_file))
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, request, version: int, response_class):
        """The decoded response; None when the broker closed the connection instead."""
        self._correlation += 1
        header = struct.pack(">hhih", request.API_KEY, version, self._correlation, 4) + b"test"
        body = header + request.encode(version=version)
        try:
            self.sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", self._exactly(4))
            frame = self._exactly(size)
        except (ConnectionError, ssl.SSLError, OSError):
            return None
        assert struct.unpack(">i", frame[:4])[0] == self._correlation
        return response_class.decode(frame[4:], version=version)

    def closed_by_broker(self) -> bool:
        """Whether the broker has closed this connection (waits up to the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def authenticate(self, password: str, username: str = "anyone"):
        handshake = self.send(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert (handshake.error_code, handshake.mechanisms) == (0, ["PLAIN"])
        message = b"\0" + username.encode() + b"\0" + password.encode()
        return self.send(SaslAuthenticateRequest(auth_bytes=message), 1, SaslAuthenticateResponse)

    def list_offsets(self, topic: str, partition_index: int = 0) -> int | None:
        """ListOffsets v1 (latest) of a partition: its error code; None if closed."""
        partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=partition_index, timestamp=-1
        )
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition])],
        )
        response = self.send(request, 1, ListOffsetsResponse)
        return None if response is None else response.topics[0].partitions[0].error_code

    def produce(self, topic: str, records: bytes | None = None) -> int:
        """Produce v7 of `records` (default: one record, "raw"): its error code."""
        if records is None:
            records = record_batch(b"raw")
        partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
        )
        response = self.send(request, 7, ProduceResponse)
        return response.responses[0].partition_responses[0].error_code

    def metadata(self, topics: list[str] | None, auto_create: bool = False) -> dict[str, int]:
        """Metadata v8: topic -> its error code."""
        request = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create,
        )
        response = self.send(request, 8, MetadataResponse)
        return {t.name: t.error_code for t in response.topics}


def make_partitioned(broker, topic: str, count: int) -> None:
    """Make `topic` a partitioned topic of `count` partitions (HTTP admin)."""
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/partitions",
        data=str(count).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
