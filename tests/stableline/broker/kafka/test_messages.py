"""Each schema served, for every version served, against Kafka's own message specs.

kafka-python builds its protocol classes from Kafka's JSON message specs
(clients/src/main/resources/common/message/*.json), so it is an independent
reading of the same field lists: requests it encodes must decode here with no
byte left over, and responses encoded here must decode there and encode back to
the very same bytes.
"""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader


def versions(api: m.ApiKey) -> list[int]:
    low, high = m.SUPPORTED[api]
    return list(range(low, high + 1))


def decoded_fully(read, data: bytes, version: int):
    reader = Reader(data)
    value = read(reader, version)
    assert reader.remaining == 0, f"{reader.remaining} bytes left unread"
    return value


def same_bytes_through_spec(cls, body: bytes, version: int) -> object:
    decoded = cls.decode(body, version=version)
    assert version == decoded.API_VERSION
    assert decoded.encode() == body  # at the version it was decoded at
    return decoded


def test_every_served_api_is_one_kafka_defines_with_the_same_key():
    for cls, key in [
        (ProduceRequest, m.ApiKey.PRODUCE),
        (FetchRequest, m.ApiKey.FETCH),
        (ListOffsetsRequest, m.ApiKey.LIST_OFFSETS),
        (MetadataRequest, m.ApiKey.METADATA),
        (ApiVersionsRequest, m.ApiKey.API_VERSIONS),
        (InitProducerIdRequest, m.ApiKey.INIT_PRODUCER_ID),
    ]:
        assert key == cls.API_KEY
        low, high = m.SUPPORTED[key]
        assert cls.min_version <= low <= high <= cls.max_version
        flexible_from = m.FIRST_FLEXIBLE[key]
        assert cls.flexible_version_q(flexible_from)
        assert not cls.flexible_version_q(flexible_from - 1)


@pytest.mark.parametrize("version", versions(m.ApiKey.API_VERSIONS))
def test_api_versions_request_and_response_match_the_spec(version):
    request = ApiVersionsRequest(client_software_name="c", client_software_version="1")
    decoded_fully(m.read_api_versions, request.encode(version=version), version)
    response = same_bytes_through_spec(ApiVersionsResponse, m.write_api_versions(version), version)
    served = {(a.api_key, a.min_version, a.max_version) for a in response.api_keys}
    assert served == {(k, low, high) for k, (low, high) in m.SUPPORTED.items()}


@pytest.mark.parametrize("version", versions(m.ApiKey.METADATA))
def test_metadata_request_and_response_match_the_spec(version):
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False,
    )
    decoded = decoded_fully(m.read_metadata, request.encode(version=version), version)
    assert decoded.topics == ["orders"]
    assert decoded.allow_auto_topic_creation is (version < 4)  # v0-3 always create
    body = m.write_metadata(
        version,
        [m.BrokerInfo(0, "127.0.0.1", 9092), m.BrokerInfo(3, "127.0.0.1", 9093)],
        0,
        [
            m.TopicMetadata(
                "orders",
                m.ErrorCode.NONE,
                [
                    m.PartitionMetadata(0, 3),
                    m.PartitionMetadata(1, -1, m.ErrorCode.LEADER_NOT_AVAILABLE),
                ],
            ),
            m.TopicMetadata("gone", m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
        ],
    )
    response = same_bytes_through_spec(MetadataResponse, body, version)
    assert [(b.node_id, b.port) for b in response.brokers] == [(0, 9092), (3, 9093)]
    assert [t.name for t in response.topics] == ["orders", "gone"]
    partitions = response.topics[0].partitions
    assert [(p.partition_index, p.leader_id, p.error_code) for p in partitions] == [
        (0, 3, 0),
        (1, -1, m.ErrorCode.LEADER_NOT_AVAILABLE),
    ]
    assert (partitions[0].replica_nodes, partitions[1].replica_nodes) == ([3], [])


@pytest.mark.parametrize("version", versions(m.ApiKey.PRODUCE))
def test_produce_request_and_response_match_the_spec(version):
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"xyz")
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[partition])],
    )
    decoded = decoded_fully(m.read_produce, request.encode(version=version), version)
    assert decoded.acks == -1 and decoded.topics[0].partitions[0].records == b"xyz"
    body = m.write_produce(
        version,
        {"orders": [m.ProducePartitionResult(0, m.ErrorCode.NONE, 41, 0)]},
    )
    response = same_bytes_through_spec(ProduceResponse, body, version)
    assert response.responses[0].partition_responses[0].base_offset == 41


@pytest.mark.parametrize("version", versions(m.ApiKey.FETCH))
def test_fetch_request_and_response_match_the_spec(version):
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=7, partition_max_bytes=1024
    )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=4096,
        isolation_level=1,
        topics=[FetchRequest.FetchTopic(topic="orders", partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
    )
    decoded = decoded_fully(m.read_fetch, request.encode(version=version), version)
    assert decoded.isolation_level is m.IsolationLevel.READ_COMMITTED
    assert decoded.topics[0].partitions[0] == m.FetchPartition(0, 7, 1024)
    result = m.FetchPartitionResult(
        0, m.ErrorCode.NONE, 10, 8, 0, [m.AbortedTransaction(5, 3)], b"records"
    )
    body = m.write_fetch(version, [("orders", [result])])
    response = same_bytes_through_spec(FetchResponse, body, version)
    fetched = response.responses[0].partitions[0]
    assert (fetched.high_watermark, fetched.last_stable_offset) == (10, 8)
    assert [(a.producer_id, a.first_offset) for a in fetched.aborted_transactions] == [(5, 3)]


@pytest.mark.parametrize("version", versions(m.ApiKey.LIST_OFFSETS))
def test_list_offsets_request_and_response_match_the_spec(version):
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=-2
    )
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name="orders", partitions=[partition])],
    )
    decoded = decoded_fully(m.read_list_offsets, request.encode(version=version), version)
    assert decoded.topics == [("orders", [(0, -2)])]
    body = m.write_list_offsets(version, [("orders", [m.ListOffsetsResult(0, 0, -1, 12)])])
    response = same_bytes_through_spec(ListOffsetsResponse, body, version)
    assert response.topics[0].partitions[0].offset == 12


@pytest.mark.parametrize("version", versions(m.ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_request_and_response_match_the_spec(version):
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    decoded = decoded_fully(m.read_init_producer_id, request.encode(version=version), version)
    assert decoded.transactional_id is None
    body = m.write_init_producer_id(version, m.ErrorCode.NONE, 99, 0)
    response = same_bytes_through_spec(InitProducerIdResponse, body, version)
    assert (response.producer_id, response.producer_epoch) == (99, 0)
