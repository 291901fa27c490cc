"""The transaction APIs' schemas, for every version served, against Kafka's specs
as kafka-python reads them (see test_messages.py)."""

from __future__ import annotations

import pytest
from kafka.errors import for_code
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_txn as mt
from tests.stableline.broker.kafka.test_messages import (
    decoded_fully,
    same_bytes_through_spec,
    versions,
)


def test_the_transaction_apis_are_the_ones_kafka_defines():
    for cls, key in [
        (AddPartitionsToTxnRequest, m.ApiKey.ADD_PARTITIONS_TO_TXN),
        (AddOffsetsToTxnRequest, m.ApiKey.ADD_OFFSETS_TO_TXN),
        (EndTxnRequest, m.ApiKey.END_TXN),
        (TxnOffsetCommitRequest, m.ApiKey.TXN_OFFSET_COMMIT),
        (InitProducerIdRequest, m.ApiKey.INIT_PRODUCER_ID),
    ]:
        assert key == cls.API_KEY
        low, high = m.SUPPORTED[key]
        assert cls.min_version <= low <= high <= cls.max_version
        flexible_from = m.FIRST_FLEXIBLE[key]
        assert cls.flexible_version_q(flexible_from)
        assert not cls.flexible_version_q(flexible_from - 1)
    # All but InitProducerId stay below their flexible versions.
    for key in (
        m.ApiKey.ADD_PARTITIONS_TO_TXN,
        m.ApiKey.ADD_OFFSETS_TO_TXN,
        m.ApiKey.END_TXN,
        m.ApiKey.TXN_OFFSET_COMMIT,
    ):
        assert m.SUPPORTED[key][1] < m.FIRST_FLEXIBLE[key]


def test_the_new_error_codes_are_kafkas():
    for code in [
        m.ErrorCode.INVALID_PRODUCER_EPOCH,
        m.ErrorCode.INVALID_TXN_STATE,
        m.ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        m.ErrorCode.INVALID_TRANSACTION_TIMEOUT,
        m.ErrorCode.CONCURRENT_TRANSACTIONS,
        m.ErrorCode.OPERATION_NOT_ATTEMPTED,
        m.ErrorCode.PRODUCER_FENCED,
        m.ErrorCode.COORDINATOR_NOT_AVAILABLE,
        m.ErrorCode.NOT_COORDINATOR,
        m.ErrorCode.INVALID_REQUEST,
        m.ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ]:
        kafka_name = for_code(code).__name__.removesuffix("Error")
        assert kafka_name.lower() == code.name.replace("_", "").lower(), (code, kafka_name)


@pytest.mark.parametrize("version", versions(m.ApiKey.ADD_PARTITIONS_TO_TXN))
def test_add_partitions_to_txn_request_and_response_match_the_spec(version):
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="payments-1",
        v3_and_below_producer_id=2**61 + 5,
        v3_and_below_producer_epoch=3,
        v3_and_below_topics=[
            topic(name="orders", partitions=[0, 1]),
            topic(name="x", partitions=[0]),
        ],
    )
    decoded = decoded_fully(mt.read_add_partitions_to_txn, request.encode(version=version), version)
    assert decoded == mt.AddPartitionsToTxnRequest(
        "payments-1", 2**61 + 5, 3, [("orders", [0, 1]), ("x", [0])]
    )
    body = mt.write_add_partitions_to_txn(
        version,
        [
            ("orders", [(0, m.ErrorCode.NONE), (1, m.ErrorCode.OPERATION_NOT_ATTEMPTED)]),
            ("x", [(0, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ],
    )
    response = same_bytes_through_spec(AddPartitionsToTxnResponse, body, version)
    results = {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert results == {("orders", 0): 0, ("orders", 1): 55, ("x", 0): 3}


@pytest.mark.parametrize("version", versions(m.ApiKey.END_TXN))
def test_end_txn_request_and_response_match_the_spec(version):
    request = EndTxnRequest(
        transactional_id="payments-1", producer_id=77, producer_epoch=2, committed=True
    )
    decoded = decoded_fully(mt.read_end_txn, request.encode(version=version), version)
    assert decoded == mt.EndTxnRequest("payments-1", 77, 2, True)
    body = mt.write_end_txn(version, m.ErrorCode.INVALID_TXN_STATE)
    response = same_bytes_through_spec(EndTxnResponse, body, version)
    assert response.error_code == m.ErrorCode.INVALID_TXN_STATE


@pytest.mark.parametrize(
    ("api", "version", "code"),
    [
        ("add_partitions_to_txn", 0, m.ErrorCode.INVALID_PRODUCER_EPOCH),
        ("add_partitions_to_txn", 1, m.ErrorCode.INVALID_PRODUCER_EPOCH),
        ("add_partitions_to_txn", 2, m.ErrorCode.PRODUCER_FENCED),
        ("add_offsets_to_txn", 0, m.ErrorCode.INVALID_PRODUCER_EPOCH),
        ("add_offsets_to_txn", 2, m.ErrorCode.PRODUCER_FENCED),
        ("txn_offset_commit", 2, m.ErrorCode.INVALID_PRODUCER_EPOCH),
        ("end_txn", 1, m.ErrorCode.INVALID_PRODUCER_EPOCH),
        ("end_txn", 2, m.ErrorCode.PRODUCER_FENCED),
        ("init_producer_id", 1, m.ErrorCode.INVALID_PRODUCER_EPOCH),
    ],
)
def test_a_fenced_producer_hears_the_error_its_version_knows(api, version, code):
    assert mt.fenced_error(api, version) is code


@pytest.mark.parametrize("version", [3, 4])
def test_init_producer_id_carries_the_producers_own_id_and_epoch_from_v3(version):
    request = InitProducerIdRequest(
        transactional_id="payments-1",
        transaction_timeout_ms=60000,
        producer_id=2**61 + 9,
        producer_epoch=4,
    )
    decoded = decoded_fully(m.read_init_producer_id, request.encode(version=version), version)
    assert decoded == m.InitProducerIdRequest("payments-1", 60000, 2**61 + 9, 4)


@pytest.mark.parametrize("version", versions(m.ApiKey.ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn_request_and_response_match_the_spec(version):
    request = AddOffsetsToTxnRequest(
        transactional_id="payments-1", producer_id=77, producer_epoch=2, group_id="copier"
    )
    decoded = decoded_fully(mt.read_add_offsets_to_txn, request.encode(version=version), version)
    assert decoded == mt.AddOffsetsToTxnRequest("payments-1", 77, 2, "copier")
    body = mt.write_add_offsets_to_txn(version, m.ErrorCode.PRODUCER_FENCED)
    response = same_bytes_through_spec(AddOffsetsToTxnResponse, body, version)
    assert response.error_code == m.ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("version", versions(m.ApiKey.TXN_OFFSET_COMMIT))
def test_txn_offset_commit_request_and_response_match_the_spec(version):
    topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    partition = topic.TxnOffsetCommitRequestPartition
    request = TxnOffsetCommitRequest(
        transactional_id="payments-1",
        group_id="copier",
        producer_id=77,
        producer_epoch=2,
        topics=[
            topic(
                name="orders",
                partitions=[
                    partition(partition_index=0, committed_offset=12, committed_metadata="m"),
                    partition(partition_index=1, committed_offset=3, committed_metadata=None),
                ],
            )
        ],
    )
    decoded = decoded_fully(mt.read_txn_offset_commit, request.encode(version=version), version)
    assert decoded == mt.TxnOffsetCommitRequest(
        "payments-1",
        "copier",
        77,
        2,
        [mt.TxnOffset("orders", 0, 12, "m"), mt.TxnOffset("orders", 1, 3, None)],
    )
    body = mt.write_txn_offset_commit(
        version,
        [
            ("orders", 0, m.ErrorCode.NONE),
            ("orders", 1, m.ErrorCode.ILLEGAL_GENERATION),
            ("x", 0, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ],
    )
    response = same_bytes_through_spec(TxnOffsetCommitResponse, body, version)
    assert [
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    ] == [("orders", 0, 0), ("orders", 1, 22), ("x", 0, 3)]
