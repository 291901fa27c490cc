"""Idempotent Kafka producers on a `serve --secure` broker: producer ids cannot be
guessed or used by another role, and only an exact resend of one of a producer's
last five batches is a duplicate (Kafka's rule); a gap is OUT_OF_ORDER_SEQUENCE_NUMBER.

The attack this stops: ids were the clock's milliseconds, so a role allowed to
produce sent one batch claiming sequence 1,000,000 under every id the next seconds
would hand out, and another role's idempotent producer then had each of its
batches taken for a duplicate: delivery reports said success, nothing was stored."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from stableline.broker.kafka.protocol.messages import ErrorCode
from stableline.testing import BrokerProcess
from tests.stableline.broker.kafka.conftest import CLIENT_TIMEOUT_S, RawKafka, confluent_consume
from tests.stableline.broker.kafka.test_security import SecureKafka

_ALLOCATOR_EPOCH_MS = 1_704_067_200_000  # what ids were counted from
TOPICS = ["ledger", "bound", "exact"]


def batch(producer_id: int, sequence: int, *values: bytes, epoch: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


class Producer:
    """One authenticated connection producing by hand."""

    def __init__(self, secure: SecureKafka, role: str) -> None:
        self.raw: RawKafka = secure.connect()
        assert self.raw.authenticate(secure.token(role)).error_code == 0

    def close(self) -> None:
        self.raw.close()

    def producer_id(self) -> int:
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        response = self.raw.send(request, 1, InitProducerIdResponse)
        assert (response.error_code, response.producer_epoch) == (0, 0)
        return response.producer_id

    def produce(self, topic: str, records: bytes) -> tuple[int, int]:
        """(error code, base offset) of a Produce v7 to partition 0."""
        partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
        )
        response = self.raw.send(request, 7, ProduceResponse)
        answer = response.responses[0].partition_responses[0]
        return answer.error_code, answer.base_offset

    def end_offset(self, topic: str) -> int:
        partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=-1
        )
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[partition])],
        )
        answer = self.raw.send(request, 1, ListOffsetsResponse).topics[0].partitions[0]
        assert answer.error_code == 0
        return answer.offset


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[SecureKafka]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("idempotence") / "data", kafka_port=0, extra_args=["--secure"]
    )
    process.start()
    try:
        yield SecureKafka(process)
    finally:
        assert process.stop() == 0, process.log()


@pytest.fixture
def producers(secure) -> Iterator[dict[str, Producer]]:
    for role in ("victim", "attacker"):
        secure.grant(role, ["produce", "consume"])
    made = {role: Producer(secure, role) for role in ("victim", "attacker")}
    # Made on first use (Metadata), as a client's first Produce does.
    assert set(made["victim"].raw.metadata(TOPICS, auto_create=True).values()) <= {0, 5}
    yield made
    for producer in made.values():
        producer.close()


def test_ids_the_next_seconds_hand_out_cannot_be_poisoned(secure, producers):
    from confluent_kafka import Producer as ConfluentProducer

    attacker = producers["attacker"]
    assert attacker.produce("ledger", batch(-1, -1, b"first"))[0] == 0
    # Ids were (ms since 2024) << 20 | node << 10 | a counter from 0 in each ms: one
    # batch claiming sequence 1,000,000 under the first id of every millisecond of a
    # window 3 s ahead, then the victim starts its producer inside that window.
    node = (attacker.producer_id() >> 10) & 1023
    window_s = time.time() + 3.0
    start_ms = int(window_s * 1000) - _ALLOCATOR_EPOCH_MS
    guesses = [(start_ms + ahead) << 20 | node << 10 for ahead in range(2000)]
    poison = b"".join(batch(guess, 1_000_000, b"poison") for guess in guesses)
    refused, _ = attacker.produce("ledger", poison)
    assert refused == ErrorCode.UNKNOWN_PRODUCER_ID  # no first batch starts that high
    assert time.time() < window_s, "the poison took longer than the lead it had"
    while time.time() < window_s + 0.1:  # the attack's timing, not a synchronisation
        time.sleep(0.01)

    failures: list = []
    reports: list = []
    victim = ConfluentProducer(
        {
            "bootstrap.servers": secure.process.kafka_bootstrap,
            "enable.idempotence": True,
            "linger.ms": 0,
            **secure.confluent("victim"),
        }
    )
    values = [b"victim-%d" % i for i in range(5)]
    for value in values:
        victim.produce(
            "ledger",
            value=value,
            on_delivery=lambda error, message: (failures if error else reports).append(message),
        )
        victim.flush(CLIENT_TIMEOUT_S)  # one batch each
    assert not failures and len(reports) == 5
    del victim  # closes its connections
    end = attacker.end_offset("ledger")
    got = confluent_consume(
        secure.process.kafka_bootstrap, "ledger", end, **secure.confluent("victim")
    )
    stored = [value for _offset, value in got]
    assert [v for v in stored if v.startswith(b"victim")] == values


def test_another_roles_producer_id_is_refused_and_its_owner_unharmed(producers):
    victim, attacker = producers["victim"], producers["attacker"]
    producer_id = victim.producer_id()
    refused, _ = attacker.produce("bound", batch(producer_id, 1_000_000, b"poison"))
    assert refused == ErrorCode.UNKNOWN_PRODUCER_ID
    assert victim.end_offset("bound") == 0
    # Its own id's first batch starting past 0 is a gap.
    assert victim.produce("bound", batch(producer_id, 4, b"gap"))[0] == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert victim.produce("bound", batch(producer_id, 0, b"a", b"b")) == (0, 0)
    assert victim.produce("bound", batch(producer_id, 2, b"c")) == (0, 2)
    assert victim.end_offset("bound") == 3
    # An id nobody was given: its first batch must start at sequence 0; one that
    # does is the sender's own producer, apart from everyone else's.
    guessed = producer_id ^ (1 << 30)
    assert attacker.produce("bound", batch(guessed, 1_000_000, b"x"))[0] == (
        ErrorCode.UNKNOWN_PRODUCER_ID
    )
    assert attacker.produce("bound", batch(guessed, 0, b"own")) == (0, 3)
    # Ids are random, not counted from the clock.
    ids = [victim.producer_id() for _ in range(5)]
    assert len(set(ids)) == 5 and all(0 < each < 2**61 for each in ids)
    assert max(ids) - min(ids) > 2**40


def test_only_an_exact_resend_of_the_last_five_batches_is_a_duplicate(secure, producers):
    victim = producers["victim"]
    producer_id = victim.producer_id()
    sent = []  # (sequence, records, base offset)
    for index in range(6):
        sequence = 3 * index
        records = batch(producer_id, sequence, *(b"v%d-%d" % (index, i) for i in range(3)))
        error, offset = victim.produce("exact", records)
        assert (error, offset) == (0, sequence)
        sent.append(records)
    assert victim.end_offset("exact") == 18
    # One of the last five again: its first copy's offset, nothing stored twice.
    assert victim.produce("exact", sent[2]) == (0, 6)
    assert victim.produce("exact", sent[5]) == (0, 15)
    # The first batch is older than the last five; a batch overlapping one but not
    # the same; a gap: OUT_OF_ORDER_SEQUENCE_NUMBER, nothing written.
    out_of_order = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert victim.produce("exact", sent[0])[0] == out_of_order
    assert victim.produce("exact", batch(producer_id, 9, b"x", b"y"))[0] == out_of_order
    assert victim.produce("exact", batch(producer_id, 12, b"x", b"y", b"z", b"w"))[0] == (
        out_of_order
    )
    assert victim.produce("exact", batch(producer_id, 19, b"gap"))[0] == out_of_order
    assert victim.end_offset("exact") == 18
    # The next batch is taken.
    assert victim.produce("exact", batch(producer_id, 18, b"next")) == (0, 18)
    stored = confluent_consume(
        secure.process.kafka_bootstrap, "exact", 19, **secure.confluent("victim")
    )
    assert [offset for offset, _ in stored] == list(range(19))
    assert stored[-1][1] == b"next"

    # After a restart the last batches are found in the log.
    for producer in producers.values():
        producer.close()
    secure.process.restart()
    again = Producer(secure, "victim")
    try:
        assert again.produce("exact", batch(producer_id, 18, b"next")) == (0, 18)
        assert again.produce("exact", sent[5]) == (0, 15)
        assert again.produce("exact", batch(producer_id, 17, b"x"))[0] == out_of_order
        assert again.produce("exact", batch(producer_id, 20, b"gap"))[0] == out_of_order
        assert again.end_offset("exact") == 19
        assert again.produce("exact", batch(producer_id, 19, b"last")) == (0, 19)
    finally:
        again.close()
    assert "Traceback" not in secure.process.log()
