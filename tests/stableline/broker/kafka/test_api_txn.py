"""The transaction coordinator's APIs in raw frames (kafka-python's encoders), so
each answer's error code is seen as sent: what each version's clients expect when
fenced, refused or retrying, and what stays invisible meanwhile."""

from __future__ import annotations

import socket

import pytest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from stableline.broker.kafka.protocol import messages as m
from tests.conftest import wait_until
from tests.stableline.broker.kafka.conftest import confluent_consume, confluent_produce, end_offset
from tests.stableline.broker.kafka.test_bad_input import connect, header, receive_frame, send_frame

TOPIC = "orders"
FENCED = m.ErrorCode.PRODUCER_FENCED
OLD_EPOCH = m.ErrorCode.INVALID_PRODUCER_EPOCH


class TxnWire:
    """A transactional producer spoken frame by frame on one connection."""

    def __init__(self, bootstrap: str, transactional_id: str = "payments") -> None:
        self.sock: socket.socket = connect(bootstrap)
        self.transactional_id = transactional_id
        self.producer_id = self.epoch = -1
        self.sequence = 0
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, request, response_cls, version: int):
        self._correlation += 1
        # Flexible versions' headers end with (no) tagged fields.
        flexible = request.flexible_version_q(version)
        tagged = b"\x00" if flexible else b""
        body = request.encode(version=version)
        send_frame(self.sock, header(request.API_KEY, version, self._correlation) + tagged + body)
        frame = receive_frame(self.sock)
        assert int.from_bytes(frame[:4], "big") == self._correlation
        return response_cls.decode(frame[4 + len(tagged) :], version=version)

    def init(self, timeout_ms: int = 60_000, transactional_id: object = ...) -> int:
        """InitProducerId v1 (for this producer's id unless another is given); the
        error code (the producer id and epoch kept when 0)."""
        tid = self.transactional_id if transactional_id is ... else transactional_id
        request = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms)
        response = self.call(request, InitProducerIdResponse, 1)
        if response.error_code == 0:
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self.sequence = 0
        return response.error_code

    def add(self, topics: dict[str, list[int]], version: int = 2) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn: {(topic, partition): error code}."""
        topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[topic(name=n, partitions=p) for n, p in topics.items()],
        )
        response = self.call(request, AddPartitionsToTxnResponse, version)
        return {
            (t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    def add_offsets(self, group: str, version: int = 2) -> int:
        request = AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            group_id=group,
        )
        return self.call(request, AddOffsetsToTxnResponse, version).error_code

    def commit_offset(self, group: str, offset: int, topic: str = TOPIC) -> int:
        """TxnOffsetCommit v2 of one partition's offset: its error code."""
        data = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        partition = data.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_metadata=f"at {offset}"
        )
        request = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            topics=[data(name=topic, partitions=[partition])],
        )
        response = self.call(request, TxnOffsetCommitResponse, 2)
        (result,) = [p.error_code for t in response.topics for p in t.partitions]
        return result

    def end(self, commit: bool, version: int = 2) -> int:
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            committed=commit,
        )
        return self.call(request, EndTxnResponse, version).error_code

    def produce(
        self,
        values: list[bytes],
        topic: str = TOPIC,
        transactional: bool = True,
        transactional_id: object = ...,
        control: bool = False,
    ) -> tuple[int, int]:
        """Produce v8 of one batch: (error code, base offset)."""
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=transactional,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
            batch_size=1 << 20,
        )
        for offset, value in enumerate(values):
            builder.append(offset, timestamp=1000, key=None, value=value, headers=[])
        records = bytearray(builder.build())
        if control:
            records[22] |= 0x20  # attributes' low byte: the control flag
            records = _with_crc(records)
        data = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=(
                self.transactional_id if transactional_id is ... else transactional_id
            ),
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                data(
                    name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)]
                )
            ],
        )
        partition = self.call(request, ProduceResponse, 8).responses[0].partition_responses[0]
        if partition.error_code == 0:
            self.sequence += len(values)
        return partition.error_code, partition.base_offset


def _with_crc(batch: bytearray) -> bytes:
    import crc32c

    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


@pytest.fixture
def wire(kafka_broker):
    confluent_produce(kafka_broker.bootstrap, TOPIC, [b"plain"])  # the topic, at offset 0
    producer = TxnWire(kafka_broker.bootstrap)
    yield producer
    producer.close()


def offsets(kafka_broker) -> tuple[int, int]:
    """(high watermark, last stable offset) of the topic."""
    bootstrap = kafka_broker.bootstrap
    return end_offset(bootstrap, TOPIC), end_offset(bootstrap, TOPIC, "read_committed")


def committed_values(kafka_broker, count: int) -> list[bytes]:
    got = confluent_consume(kafka_broker.bootstrap, TOPIC, count, "read_committed")
    return [value for _, value in got]


def test_a_transactional_id_keeps_its_producer_id_and_each_init_raises_the_epoch(
    kafka_broker, wire
):
    assert wire.init() == 0
    first = (wire.producer_id, wire.epoch)
    assert wire.init() == 0
    assert (wire.producer_id, wire.epoch) == (first[0], first[1] + 1)
    assert first[0] >= 2**61, "transactional ids have a range of their own"
    other = TxnWire(kafka_broker.bootstrap, "other")
    assert other.init() == 0 and other.producer_id != first[0]
    assert other.init(transactional_id=None) == 0  # idempotent: a new id each time
    assert other.producer_id < 2**61 and other.epoch == 0
    other.close()


def test_a_committed_transaction_is_read_committed_whole_and_an_aborted_never(kafka_broker, wire):
    assert wire.init() == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"c1", b"c2"]) == (0, 1)
    assert offsets(kafka_broker) == (3, 1)  # undecided: read_committed stops before it
    assert wire.end(commit=True) == 0
    assert offsets(kafka_broker) == (4, 4)  # + the commit marker
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"a1"]) == (0, 4)
    assert wire.end(commit=False) == 0
    assert wire.end(commit=False) == 0  # a retry is answered as the first
    assert wire.end(commit=True) == m.ErrorCode.INVALID_TXN_STATE  # nothing open
    confluent_produce(kafka_broker.bootstrap, TOPIC, [b"after"])
    assert committed_values(kafka_broker, 4) == [b"plain", b"c1", b"c2", b"after"]


def test_a_second_init_aborts_the_open_transaction_and_fences_the_first_producer(
    kafka_broker, wire
):
    assert wire.init() == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"zombie"]) == (0, 1)
    newer = TxnWire(kafka_broker.bootstrap)
    assert newer.init() == 0 and newer.epoch == wire.epoch + 1
    assert offsets(kafka_broker) == (3, 3)  # aborted: its marker ends the undecided range
    # Each version hears what its clients know: INVALID_PRODUCER_EPOCH before v2.
    assert wire.produce([b"late"]) == (OLD_EPOCH, -1)
    assert wire.add({TOPIC: [0]}, version=0) == {(TOPIC, 0): OLD_EPOCH}
    assert wire.add({TOPIC: [0]}, version=2) == {(TOPIC, 0): FENCED}
    assert wire.end(commit=True, version=1) == OLD_EPOCH
    assert wire.end(commit=True, version=2) == FENCED
    assert newer.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert newer.produce([b"newer"]) == (0, 3)
    assert newer.end(commit=True) == 0
    assert committed_values(kafka_broker, 2) == [b"plain", b"newer"]
    newer.close()


def test_a_batch_for_a_partition_not_added_is_refused_and_nothing_is_written(kafka_broker, wire):
    assert wire.init() == 0
    assert wire.produce([b"x"]) == (m.ErrorCode.INVALID_TXN_STATE, -1)
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    confluent_produce(kafka_broker.bootstrap, "elsewhere", [b"made"])
    assert wire.produce([b"x"], topic="elsewhere") == (m.ErrorCode.INVALID_TXN_STATE, -1)
    # A transactional batch needs the request's transactional id; control batches
    # come from transaction ends only.
    assert wire.produce([b"x"], transactional_id=None)[0] == (
        m.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    assert wire.produce([b"x"], control=True)[0] == m.ErrorCode.INVALID_RECORD
    assert offsets(kafka_broker) == (1, 1)


def test_requests_for_an_unknown_id_or_a_bad_timeout_are_refused(wire):
    wire.producer_id, wire.epoch = 2**61 + 12345, 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): m.ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert wire.end(commit=True) == m.ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert wire.produce([b"x"])[0] == m.ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert wire.init(timeout_ms=0) == m.ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert wire.init(timeout_ms=900_001) == m.ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert wire.init(transactional_id="") == m.ErrorCode.INVALID_REQUEST
    assert wire.init() == 0
    # A partition that does not exist: refused, and the others not attempted.
    assert wire.add({TOPIC: [0, 1], "no-such-topic": [0]}) == {
        (TOPIC, 0): m.ErrorCode.OPERATION_NOT_ATTEMPTED,
        (TOPIC, 1): m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert wire.end(commit=True) == m.ErrorCode.INVALID_TXN_STATE  # nothing began


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(kafka_broker, wire):
    assert wire.init(timeout_ms=300) == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"slow"]) == (0, 1)
    wait_until(lambda: offsets(kafka_broker) == (3, 3), message="the timeout's abort marker")
    assert wire.produce([b"later"]) == (OLD_EPOCH, -1)
    assert wire.end(commit=True) == FENCED
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): FENCED}
    epoch = wire.epoch
    assert wire.init() == 0 and wire.epoch == epoch + 2  # the timeout raised it once
    assert committed_values(kafka_broker, 1) == [b"plain"]


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_a_transaction_open_across_a_broker_stop_keeps_its_offsets_and_can_still_commit(
    kafka_broker, wire, stop
):
    assert wire.init() == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"t0", b"t1"]) == (0, 1)
    assert offsets(kafka_broker) == (3, 1)
    wire.close()
    if stop == "kill -9":
        kafka_broker.kill()
        kafka_broker.start()
    else:
        kafka_broker.restart()
    assert offsets(kafka_broker) == (3, 1)
    again = TxnWire(kafka_broker.bootstrap)
    again.producer_id, again.epoch, again.sequence = wire.producer_id, wire.epoch, 2
    assert again.add({TOPIC: [0]}) == {(TOPIC, 0): 0}  # in the transaction already
    assert again.produce([b"t2"]) == (0, 3)
    assert again.end(commit=True) == 0
    assert offsets(kafka_broker) == (5, 5)
    assert committed_values(kafka_broker, 4) == [b"plain", b"t0", b"t1", b"t2"]
    again.close()


@pytest.mark.slow
def test_an_id_initialised_again_after_a_kill_aborts_the_open_transaction_and_fences(
    kafka_broker, wire
):
    assert wire.init() == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"t0"]) == (0, 1)
    wire.close()
    kafka_broker.kill()
    kafka_broker.start()
    assert offsets(kafka_broker) == (2, 1)
    newer = TxnWire(kafka_broker.bootstrap)
    assert newer.init() == 0 and newer.epoch == wire.epoch + 1
    assert newer.producer_id == wire.producer_id  # kept in the metadata store
    assert offsets(kafka_broker) == (3, 3)
    old = TxnWire(kafka_broker.bootstrap)
    old.producer_id, old.epoch, old.sequence = wire.producer_id, wire.epoch, 1
    assert old.end(commit=True) == FENCED
    assert old.produce([b"t1"]) == (OLD_EPOCH, -1)
    assert committed_values(kafka_broker, 1) == [b"plain"]
    old.close()
    newer.close()


def test_a_producer_raises_its_own_epoch_after_an_error_and_a_retry_gets_the_same_answer(
    kafka_broker, wire
):
    """InitProducerId v3+ naming the producer's id and epoch (KIP-360), what
    librdkafka sends to abort a transaction after an error that needs a new epoch."""
    assert wire.init() == 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"doomed"]) == (0, 1)
    producer_id, epoch = wire.producer_id, wire.epoch

    def bump(expected_id: int, expected_epoch: int, version: int = 4):
        request = InitProducerIdRequest(
            transactional_id=wire.transactional_id,
            transaction_timeout_ms=60_000,
            producer_id=expected_id,
            producer_epoch=expected_epoch,
        )
        response = wire.call(request, InitProducerIdResponse, version)
        return response.error_code, response.producer_id, response.producer_epoch

    assert bump(producer_id, epoch) == (0, producer_id, epoch + 1)
    assert offsets(kafka_broker) == (3, 3)  # the open transaction aborted
    assert bump(producer_id, epoch) == (0, producer_id, epoch + 1)  # a retry
    assert bump(producer_id, epoch + 5)[0] == FENCED
    assert bump(producer_id, epoch + 5, version=3)[0] == OLD_EPOCH
    assert bump(producer_id + 1, epoch + 1)[0] == FENCED
    wire.epoch, wire.sequence = epoch + 1, 0
    assert wire.add({TOPIC: [0]}) == {(TOPIC, 0): 0}
    assert wire.produce([b"kept"]) == (0, 3)
    assert wire.end(commit=True) == 0
    assert committed_values(kafka_broker, 2) == [b"plain", b"kept"]


def backlog(kafka_broker, group: str) -> int:
    stats = kafka_broker.admin(f"/admin/v2/persistent/public/default/{TOPIC}/stats")
    return stats["subscriptions"][group]["msgBacklog"]


def test_offsets_committed_in_a_transaction_are_held_until_it_commits(kafka_broker, wire):
    from tests.stableline.broker.kafka.test_transactions import committed_offset

    confluent_produce(kafka_broker.bootstrap, TOPIC, [b"r1", b"r2", b"r3", b"r4"])
    assert wire.init() == 0
    assert wire.commit_offset("copier", 3) == m.ErrorCode.INVALID_TXN_STATE  # not added
    assert wire.add_offsets("copier") == 0
    assert wire.commit_offset("copier", 3) == 0
    # Entries: "plain" and the batch of four. Held by the transaction, not acked.
    assert backlog(kafka_broker, "copier") == 2
    assert wire.end(commit=False) == 0
    assert backlog(kafka_broker, "copier") == 2
    # Nothing committed: the group's subscription (made by that commit) is at the start.
    assert committed_offset(kafka_broker.bootstrap, "copier", TOPIC) == 0
    assert wire.add_offsets("copier") == 0
    assert wire.commit_offset("copier", 3) == 0
    assert wire.commit_offset("copier", 4) == 0  # again in one transaction: further on
    assert wire.end(commit=True) == 0
    assert backlog(kafka_broker, "copier") == 1  # the batch's last message is not acked
    assert committed_offset(kafka_broker.bootstrap, "copier", TOPIC) == 4
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id="copier")
    committed = consumer.committed(TopicPartition(TOPIC, 0), metadata=True)
    consumer.close()
    assert (committed.offset, committed.metadata) == (4, "at 4")  # the commit's own


def test_offsets_another_open_transaction_holds_are_refused_as_a_stale_generation(
    kafka_broker, wire
):
    confluent_produce(kafka_broker.bootstrap, TOPIC, [b"r1", b"r2"])
    other = TxnWire(kafka_broker.bootstrap, "other")
    for producer in (wire, other):
        assert producer.init() == 0
        assert producer.add_offsets("copier") == 0
    assert wire.commit_offset("copier", 2) == 0
    assert other.commit_offset("copier", 3) == m.ErrorCode.ILLEGAL_GENERATION
    assert wire.end(commit=False) == 0  # hands them back
    assert other.commit_offset("copier", 3) == 0
    assert other.end(commit=True) == 0
    assert backlog(kafka_broker, "copier") == 0
    other.close()


def test_offset_commits_of_a_fenced_producer_or_a_bad_group_are_refused(kafka_broker, wire):
    assert wire.init() == 0
    assert wire.add_offsets("a/b") == m.ErrorCode.INVALID_GROUP_ID
    assert wire.add_offsets("copier") == 0
    newer = TxnWire(kafka_broker.bootstrap)
    assert newer.init() == 0
    assert wire.add_offsets("copier", version=0) == OLD_EPOCH
    assert wire.add_offsets("copier", version=2) == FENCED
    assert wire.commit_offset("copier", 1) == OLD_EPOCH
    newer.close()


@pytest.mark.slow
def test_offsets_committed_in_a_transaction_survive_a_kill_right_after_the_commit(
    kafka_broker, wire
):
    bootstrap = kafka_broker.bootstrap
    confluent_produce(bootstrap, TOPIC, [b"r1", b"r2", b"r3"])
    confluent_produce(bootstrap, "copies", [b"seed"])
    assert wire.init() == 0
    assert wire.add_offsets("copier") == 0
    assert wire.add({"copies": [0]}) == {("copies", 0): 0}
    assert wire.produce([b"copy"], topic="copies") == (0, 1)
    # Up to r2: "plain" and two of the batch's three records.
    assert wire.commit_offset("copier", 3) == 0
    assert wire.end(commit=True) == 0
    wire.close()
    kafka_broker.kill()
    kafka_broker.start()
    assert backlog(kafka_broker, "copier") == 1
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="copier")
    committed = consumer.committed(TopicPartition(TOPIC, 0), metadata=True)
    consumer.close()
    assert (committed.offset, committed.metadata) == (3, "at 3")
    assert end_offset(bootstrap, "copies", "read_committed") == end_offset(bootstrap, "copies") == 3
