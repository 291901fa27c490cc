"""Partitioned topics over three real brokers on one real etcd: a partitioned topic made
through one broker is served through every other; a 6-partition topic keeps per-key
order and each isolation level sees what it should; partitioned-stats through any
broker sums every partition; creations at once, growth and deletion agree across the
brokers; a namespace policy set through one broker applies on another."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import urllib.error
import urllib.request
from collections import defaultdict

import grpc
import pytest

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc
from stableline._routing import key_partition
from stableline.metadata import open_metadata_store
from tests.conftest import wait_until

from .conftest import Cluster

_names = itertools.count()
RECEIVE_MS = 10_000


def _new_topic(partitions: int, cluster: Cluster, through: int = 0) -> str:
    """A partitioned topic created through broker `through` (HTTP PUT)."""
    topic = f"persistent://public/default/part-{next(_names)}"
    status, body = _http(cluster.brokers[through], "PUT", _path(topic, "partitions"), partitions)
    assert status == 204, body
    return topic


def _path(topic: str, suffix: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/") + "/" + suffix


def _http(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        broker.http_url + path, data, {"X-Stableline-Request": "test"}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


def _records(cluster: Cluster, topics: list[str]) -> dict[str, str | None]:
    """Each topic's owner from its ownership record (None: no record)."""

    async def read() -> dict[str, str | None]:
        store = await open_metadata_store(cluster.etcd.url)
        try:
            owners: dict[str, str | None] = {}
            for topic in topics:
                local = topic.removeprefix("persistent://")
                result = await store.get(f"/stableline/ownership/{cluster.name}/topics/{local}")
                owners[topic] = json.loads(result.value)["leader"] if result else None
            return owners
        finally:
            await store.close()

    return asyncio.run(read())


def _partitions(topic: str, count: int) -> list[str]:
    return [f"{topic}-partition-{i}" for i in range(count)]


def _keys_for_each_partition(count: int, prefix: str) -> list[str]:
    """One key per partition, in partition order."""
    keys: dict[int, str] = {}
    for i in itertools.count():
        keys.setdefault(key_partition(f"{prefix}{i}", count), f"{prefix}{i}")
        if len(keys) == count:
            return [keys[p] for p in range(count)]
    raise AssertionError("unreachable")


def _broker_id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def test_a_partitioned_topic_made_through_one_broker_is_served_through_each_other(cluster):
    topic = _new_topic(3, cluster, through=0)
    keys = _keys_for_each_partition(3, "k")
    for broker in cluster.brokers:
        assert _http(broker, "GET", _path(topic, "partitions")) == (200, {"partitions": 3})
        # A client given only this broker's address.
        client = stableline.Client(broker.service_url)
        try:
            assert client.get_topic_partitions(topic) == _partitions(topic, 3)
            consumer = client.subscribe(
                topic,
                f"through-{broker.grpc_port}",
                initial_position=stableline.InitialPosition.Earliest,
            )
            producer = client.create_producer(topic)
            for key in keys:
                producer.send(f"{broker.grpc_port}/{key}".encode(), partition_key=key)
            seen: dict[int, set[bytes]] = defaultdict(set)
            while sum(len(v) for v in seen.values()) < 3 * (cluster.brokers.index(broker) + 1):
                message = consumer.receive(timeout_millis=RECEIVE_MS)
                seen[message.message_id().partition()].add(message.data())
                consumer.acknowledge(message)
            # Every partition, wherever it is owned, was produced to and consumed here.
            for index, key in enumerate(keys):
                assert f"{broker.grpc_port}/{key}".encode() in seen[index]
        finally:
            client.close()
    owners = _records(cluster, _partitions(topic, 3))
    assert None not in owners.values()


def test_six_partitions_over_three_brokers_keep_per_key_order_at_each_isolation_level(cluster):
    count = 6
    topic = _new_topic(count, cluster, through=0)
    owners = _records(cluster, _partitions(topic, count))
    assert set(owners.values()) == {_broker_id(b) for b in cluster.brokers}
    # Transactions stay within one broker here: the one owning the most partitions,
    # whose coordinator a client given its address uses.
    by_owner: dict[str, list[int]] = defaultdict(list)
    for index, partition in enumerate(_partitions(topic, count)):
        by_owner[owners[partition]].append(index)
    txn_owner = max(by_owner, key=lambda o: len(by_owner[o]))
    txn_broker = cluster.by_id(txn_owner)
    txn_keys = [
        key
        for key in (f"x{i}" for i in range(200))
        if key_partition(key, count) in by_owner[txn_owner]
    ][:6]
    plain_keys = [f"k{i}" for i in range(40)]

    reader_client = stableline.Client(cluster.brokers[1].service_url)
    client = stableline.Client(txn_broker.service_url)
    try:
        committed_reader = reader_client.subscribe(
            topic, "rc", initial_position=stableline.InitialPosition.Earliest
        )
        uncommitted_reader = reader_client.subscribe(
            topic,
            "ru",
            initial_position=stableline.InitialPosition.Earliest,
            isolation_level=stableline.IsolationLevel.READ_UNCOMMITTED,
        )
        producer = client.create_producer(topic)
        sequence: dict[str, int] = defaultdict(int)

        def send(key: str, txn=None) -> bytes:
            payload = f"{key}:{sequence[key]}".encode()
            sequence[key] += 1
            producer.send(payload, partition_key=key, txn=txn)
            return payload

        committed_txn = client.new_transaction()
        aborted_txn = client.new_transaction()
        open_txn = client.new_transaction()
        plain, committed, aborted = [], [], []
        for round_ in range(5):
            plain += [send(key) for key in plain_keys]
            committed += [send(key, committed_txn) for key in txn_keys[:3]]
            if round_ < 2:
                aborted += [send(key, aborted_txn) for key in txn_keys[3:5]]
        still_open = [send(txn_keys[5], open_txn)]
        committed_txn.commit()
        aborted_txn.abort()

        # READ_UNCOMMITTED: everything durable, the open transaction's message included.
        everything = set(plain + committed + aborted + still_open)
        received = _receive(uncommitted_reader, len(everything))
        assert set(received) == everything
        _assert_order_per_key(received)

        # READ_COMMITTED: a sentinel after the open transaction ends, on every
        # partition, shows the subscription has read past all that came before.
        open_txn.abort()
        for index in range(count):
            partition_producer = client.create_producer(f"{topic}-partition-{index}")
            partition_producer.send(b"end")
            partition_producer.close()
        visible = []
        ends = 0
        while ends < count:
            message = committed_reader.receive(timeout_millis=RECEIVE_MS)
            committed_reader.acknowledge(message)
            if message.data() == b"end":
                ends += 1
            else:
                visible.append(message.data())
        assert sorted(visible) == sorted(plain + committed)
        _assert_order_per_key(visible)
    finally:
        client.close()
        reader_client.close()


def _receive(consumer, count: int) -> list[bytes]:
    received = []
    while len(received) < count:
        message = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.acknowledge(message)
        received.append(message.data())
    return received


def _assert_order_per_key(payloads: list[bytes]) -> None:
    last: dict[str, int] = {}
    for payload in payloads:
        key, _, seq = payload.decode().partition(":")
        assert int(seq) > last.get(key, -1), f"{payload!r} after {key}:{last[key]}"
        last[key] = int(seq)


def test_partitioned_stats_through_any_broker_sum_every_partition_with_isolation_levels(
    cluster,
):
    count = 6
    topic = _new_topic(count, cluster, through=2)
    client = stableline.Client(cluster.brokers[0].service_url)
    try:
        client.subscribe(topic, "business", initial_position=stableline.InitialPosition.Earliest)
        client.subscribe(
            topic,
            "monitor",
            initial_position=stableline.InitialPosition.Earliest,
            isolation_level=stableline.IsolationLevel.READ_UNCOMMITTED,
        )
        producer = client.create_producer(topic)
        for i in range(60):
            producer.send(b"x" * 10, partition_key=f"key-{i}")
    finally:
        client.close()
    assert len(set(_records(cluster, _partitions(topic, count)).values())) == 3
    for broker in cluster.brokers:
        status, document = _http(broker, "GET", _path(topic, "partitioned-stats"))
        assert status == 200, document
        partitions = document["partitions"]
        assert sorted(partitions) == sorted(_partitions(topic, count))
        assert document["msgInCounter"] == 60 == sum(p["msgInCounter"] for p in partitions.values())
        for partition in partitions.values():
            levels = {
                name: sub["subscriptionIsolationLevel"]
                for name, sub in partition["subscriptions"].items()
            }
            assert levels == {"business": "READ_COMMITTED", "monitor": "READ_UNCOMMITTED"}
        assert document["subscriptions"]["monitor"]["subscriptionIsolationLevel"] == (
            "READ_UNCOMMITTED"
        )
        assert document["subscriptions"]["business"]["msgBacklog"] == 60
    with grpc.insecure_channel(cluster.brokers[1].service_url) as channel:
        reply = admin_pb2_grpc.AdminStub(channel).GetPartitionedStats(
            admin_pb2.TopicRequest(topic=topic)
        )
    assert json.loads(reply.json)["msgInCounter"] == 60


def test_of_two_brokers_creating_one_partitioned_topic_at_once_one_wins_everywhere(cluster):
    topic = f"persistent://public/default/part-race-{next(_names)}"
    outcomes: dict[int, tuple[int, object]] = {}

    def create(index: int, partitions: int) -> None:
        outcomes[index] = _http(
            cluster.brokers[index], "PUT", _path(topic, "partitions"), partitions
        )

    threads = [threading.Thread(target=create, args=args) for args in ((0, 2), (1, 4))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(status for status, _ in outcomes.values())
    assert statuses == [204, 409], outcomes
    winner = 2 if outcomes[0][0] == 204 else 4
    for broker in cluster.brokers:
        assert _http(broker, "GET", _path(topic, "partitions")) == (200, {"partitions": winner})
    # What the losing creation placed beyond the winner's count is gone again.
    records = _records(cluster, _partitions(topic, 4))
    assert [records[p] is not None for p in _partitions(topic, 4)] == [True] * winner + [False] * (
        4 - winner
    )


def test_a_growth_through_one_broker_places_the_new_partitions_and_all_see_it(cluster):
    topic = _new_topic(2, cluster, through=0)
    status, body = _http(cluster.brokers[1], "POST", _path(topic, "partitions"), 5)
    assert status == 204, body
    assert None not in _records(cluster, _partitions(topic, 5)).values()
    for broker in cluster.brokers:
        wait_until(
            lambda broker=broker: (
                _http(broker, "GET", _path(topic, "partitions"))[1] == {"partitions": 5}
            ),
            message=f"broker {broker.grpc_port} to see 5 partitions",
        )
    status, body = _http(cluster.brokers[2], "POST", _path(topic, "partitions"), 3)
    assert status == 400 and "only grows" in body["reason"]
    client = stableline.Client(cluster.brokers[2].service_url)
    try:
        producer = client.create_producer(topic)
        key = _keys_for_each_partition(5, "g")[4]
        assert producer.send(b"new", partition_key=key).partition() == 4
    finally:
        client.close()


def test_deleting_through_any_broker_deletes_every_partition_at_its_owner(cluster):
    count = 6
    topic = _new_topic(count, cluster, through=0)
    partitions = _partitions(topic, count)
    owners = _records(cluster, partitions)
    client = stableline.Client(cluster.brokers[0].service_url)
    try:
        producer = client.create_producer(topic)
        for key in _keys_for_each_partition(count, "d"):
            producer.send(b"doomed", partition_key=key)
        producer.close()
        # A consumer on a partition another broker than the deleting one owns.
        remote = next(p for p in partitions if owners[p] != _broker_id(cluster.brokers[2]))
        consumer = client.subscribe(remote, "held")
        status, body = _http(cluster.brokers[2], "DELETE", _path(topic, "partitions"))
        assert status == 409 and "connected consumer" in body["reason"], body
        consumer.close()
        status, body = _http(cluster.brokers[2], "DELETE", _path(topic, "partitions"))
        assert status == 204, body
        assert set(_records(cluster, partitions).values()) == {None}
        for broker in cluster.brokers:
            local = broker.admin("/admin/v2/persistent/public/default")
            assert not set(local) & set(partitions)
            wait_until(
                lambda broker=broker: (
                    _http(broker, "GET", _path(topic, "partitions"))[1] == {"partitions": 0}
                ),
                message=f"broker {broker.grpc_port} to forget the count",
            )
        # A partition is not brought back by a first use after its topic is gone.
        with pytest.raises(stableline.TopicNotFound):
            client.create_producer(partitions[0])
    finally:
        client.close()


def test_a_namespace_policy_set_through_one_broker_applies_on_another(cluster):
    namespace = f"policy-{next(_names)}/ns"
    path = f"/admin/v2/namespaces/{namespace}/autoTopicCreation"
    status, body = _http(
        cluster.brokers[0],
        "POST",
        path,
        {"allowAutoTopicCreation": False, "topicType": "non-partitioned"},
    )
    assert status == 204, body
    wait_until(
        lambda: _http(cluster.brokers[2], "GET", path)[1] is not None,
        message="broker 2 to see the policy",
    )
    client = stableline.Client(cluster.brokers[2].service_url)
    try:
        with pytest.raises(stableline.TopicNotFound):
            client.create_producer(f"persistent://{namespace}/first")
        status, body = _http(cluster.brokers[1], "DELETE", path)
        assert status == 204, body
        wait_until(
            lambda: _http(cluster.brokers[2], "GET", path)[1] is None,
            message="broker 2 to see the policy removed",
        )
        client.create_producer(f"persistent://{namespace}/first").send(b"made on first use")
    finally:
        client.close()
    # The first topic made the namespace exist on every broker.
    for broker in cluster.brokers:
        assert _http(broker, "GET", f"/admin/v2/persistent/{namespace}")[0] == 200
