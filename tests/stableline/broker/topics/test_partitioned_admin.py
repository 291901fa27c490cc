"""Partitioned topics' admin against a real broker: Pulsar's HTTP paths, the gRPC
Admin RPCs, names, growth, deletion, stats, and bad input."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

import stableline
from stableline import InitialPosition, IsolationLevel
from stableline._proto import admin_pb2 as admin_pb
from stableline._proto import admin_pb2_grpc

BASE = "/admin/v2/persistent/public/default"


def _call(broker, method: str, path: str, body: str | None = None):
    request = urllib.request.Request(
        broker.http_url + path,
        data=body.encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"}
        if body is not None
        else {"X-Stableline-Request": "test"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
        return response.status, json.loads(raw) if raw else None


def _refused(broker, method: str, path: str, body: str | None = None) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as raised:
        _call(broker, method, path, body)
    return raised.value.code, json.loads(raised.value.read())["reason"]


def _topics(broker) -> list[str]:
    return broker.admin(BASE)


def test_creating_a_partitioned_topic_creates_its_partitions_and_records_its_count(broker):
    assert _call(broker, "PUT", f"{BASE}/orders/partitions", "4") == (204, None)
    assert broker.admin(f"{BASE}/orders/partitions") == {"partitions": 4}
    assert _topics(broker) == [
        f"persistent://public/default/orders-partition-{i}" for i in range(4)
    ]
    assert broker.admin(f"{BASE}/partitioned") == ["persistent://public/default/orders"]
    # A name that is not partitioned answers 0, as Pulsar's metadata does.
    assert broker.admin(f"{BASE}/plain/partitions") == {"partitions": 0}
    broker.restart()
    assert broker.admin(f"{BASE}/orders/partitions") == {"partitions": 4}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("0", ">= 1"),
        ("-3", ">= 1"),
        ("1025", "max_num_partitions_per_partitioned_topic"),
        ("abc", "whole number"),
        ("2.5", "whole number"),
        ("", "whole number"),
    ],
)
def test_a_bad_partition_count_is_refused_and_creates_nothing(broker, body, says):
    status, reason = _refused(broker, "PUT", f"{BASE}/bad/partitions", body)
    assert status == 400 and says in reason
    assert _topics(broker) == []
    assert broker.admin(f"{BASE}/bad/partitions") == {"partitions": 0}
    assert _call(broker, "PUT", f"{BASE}/bad/partitions", "2") == (204, None)  # still up


def test_a_partitioned_and_a_plain_topic_cannot_share_a_name(broker):
    _call(broker, "PUT", f"{BASE}/plain")
    status, reason = _refused(broker, "PUT", f"{BASE}/plain/partitions", "2")
    assert status == 409 and "non-partitioned" in reason
    _call(broker, "PUT", f"{BASE}/split/partitions", "2")
    status, reason = _refused(broker, "PUT", f"{BASE}/split")
    assert status == 409 and "is a partitioned topic" in reason
    status, reason = _refused(broker, "PUT", f"{BASE}/split/partitions", "3")
    assert status == 409 and "already exists" in reason
    # A partition's name is never the base of a partitioned topic.
    status, reason = _refused(broker, "PUT", f"{BASE}/x-partition-1/partitions", "2")
    assert status == 400 and "names a partition" in reason
    # A client's first use of the name cannot make the plain topic either.
    with pytest.raises(stableline.TopicConflict, match="is a partitioned topic"):
        _produce_plain(broker, "split")
    assert broker.admin(f"{BASE}/split/partitions") == {"partitions": 2}


def _produce_plain(broker, topic: str) -> None:
    """Open a producer on `topic` itself, as a client unaware of partitions would."""
    import asyncio

    from stableline import aio
    from stableline.aio._producer import Producer

    async def run() -> None:
        async with aio.Client(broker.service_url) as client:
            producer = Producer(client._connections.service, topic, stableline.ProducerOptions())
            await producer._open()

    asyncio.run(run())


def test_the_count_grows_and_never_shrinks(broker, client):
    _call(broker, "PUT", f"{BASE}/grow/partitions", "2")
    assert _call(broker, "POST", f"{BASE}/grow/partitions", "5") == (204, None)
    assert broker.admin(f"{BASE}/grow/partitions") == {"partitions": 5}
    assert len(_topics(broker)) == 5
    for smaller in ("5", "3"):
        status, reason = _refused(broker, "POST", f"{BASE}/grow/partitions", smaller)
        assert status == 400 and "only grows" in reason
    status, _ = _refused(broker, "POST", f"{BASE}/never-made/partitions", "3")
    assert status == 404
    producer = client.create_producer("grow")
    partitions = {producer.send(b"m", partition_key=f"k{i}").partition() for i in range(60)}
    assert partitions == set(range(5))


def test_delete_is_refused_while_a_consumer_is_connected_unless_forced(broker, client):
    _call(broker, "PUT", f"{BASE}/gone/partitions", "3")
    consumer = client.subscribe("gone", "s")
    status, reason = _refused(broker, "DELETE", f"{BASE}/gone/partitions")
    assert status == 409 and "connected consumer" in reason and "force" in reason
    assert len(_topics(broker)) == 3
    assert _call(broker, "DELETE", f"{BASE}/gone/partitions?force=true") == (204, None)
    consumer.close()
    assert _topics(broker) == []
    assert broker.admin(f"{BASE}/gone/partitions") == {"partitions": 0}
    status, _ = _refused(broker, "DELETE", f"{BASE}/gone/partitions")
    assert status == 404
    # The name is free again, for either kind.
    assert _call(broker, "PUT", f"{BASE}/gone/partitions", "2") == (204, None)


def test_partitioned_stats_sum_the_partitions_and_list_each_isolation_level(broker, client):
    _call(broker, "PUT", f"{BASE}/stats/partitions", "3")
    client.subscribe("stats", "business", initial_position=InitialPosition.Earliest).close()
    client.subscribe(
        "stats",
        "monitor",
        initial_position=InitialPosition.Earliest,
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
    ).close()
    producer = client.create_producer("stats")
    for i in range(30):
        producer.send(b"x" * 10, partition_key=f"key-{i}")
    document = broker.admin(f"{BASE}/stats/partitioned-stats")
    partitions = document["partitions"]
    assert sorted(partitions) == [
        f"persistent://public/default/stats-partition-{i}" for i in range(3)
    ]
    assert document["metadata"] == {"partitions": 3}
    assert document["msgInCounter"] == 30 == sum(p["msgInCounter"] for p in partitions.values())
    assert document["storageSize"] == sum(p["storageSize"] for p in partitions.values()) > 0
    backlog = sum(s["msgBacklog"] for p in partitions.values() for s in p["subscriptions"].values())
    assert document["msgBacklog"] == backlog > 0
    for partition in partitions.values():
        levels = {
            name: sub["subscriptionIsolationLevel"]
            for name, sub in partition["subscriptions"].items()
        }
        assert levels == {"business": "READ_COMMITTED", "monitor": "READ_UNCOMMITTED"}
    assert document["subscriptions"]["monitor"]["subscriptionIsolationLevel"] == "READ_UNCOMMITTED"
    status, _ = _refused(broker, "GET", f"{BASE}/nothing/partitioned-stats")
    assert status == 404


def test_the_grpc_admin_creates_grows_describes_and_deletes(broker):
    with grpc.insecure_channel(broker.service_url) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        made = admin.CreatePartitionedTopic(
            admin_pb.PartitionedTopicRequest(topic="g", partitions=2)
        )
        assert (made.topic, made.partitions) == ("persistent://public/default/g", 2)
        admin.UpdatePartitionedTopic(admin_pb.PartitionedTopicRequest(topic="g", partitions=3))
        assert admin.GetPartitionedTopicMetadata(admin_pb.TopicRequest(topic="g")).partitions == 3
        stats = json.loads(admin.GetPartitionedStats(admin_pb.TopicRequest(topic="g")).json)
        assert len(stats["partitions"]) == 3
        for bad, status, code in [
            (0, grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument"),
            (2, grpc.StatusCode.ALREADY_EXISTS, "TopicConflict"),
        ]:
            with pytest.raises(grpc.RpcError) as raised:
                admin.CreatePartitionedTopic(
                    admin_pb.PartitionedTopicRequest(topic="g" if bad else "h", partitions=bad)
                )
            assert raised.value.code() == status
            assert dict(raised.value.trailing_metadata())["stableline-error"] == code
        admin.DeletePartitionedTopic(admin_pb.DeletePartitionedTopicRequest(topic="g"))
        assert admin.GetPartitionedTopicMetadata(admin_pb.TopicRequest(topic="g")).partitions == 0
