"""Kafka node ids (stableline/metadata/kafka_nodes.py) on both stores: one id per
broker id, kept, never shared by two brokers registering at once; and registrations
that carry the Kafka address, read across versions."""

from __future__ import annotations

import asyncio
import itertools
import json
import os

from stableline.metadata import BrokerInfo, kafka_node_id

_clusters = itertools.count()


def _cluster() -> str:
    return f"kafka-{os.getpid()}-{next(_clusters)}"


async def test_each_broker_keeps_the_node_id_it_was_given_first(open_store):
    store = await open_store()
    cluster = _cluster()
    assert await kafka_node_id(store, cluster, "127.0.0.1:6650") == 0
    assert await kafka_node_id(store, cluster, "127.0.0.1:6651") == 1
    assert await kafka_node_id(store, cluster, "127.0.0.1:6650") == 0
    # Another cluster on the same store numbers its own brokers.
    assert await kafka_node_id(store, _cluster(), "127.0.0.1:6651") == 0


async def test_brokers_registering_at_once_never_share_a_node_id(open_store):
    cluster = _cluster()
    first = await open_store()
    # Two sessions of one etcd race; the embedded store has one session.
    second = await open_store() if open_store.kind == "etcd" else first
    brokers = [f"127.0.0.1:{6650 + i}" for i in range(8)]
    ids = await asyncio.gather(
        *(kafka_node_id(first if i % 2 else second, cluster, b) for i, b in enumerate(brokers))
    )
    assert sorted(ids) == list(range(len(brokers)))
    again = [await kafka_node_id(first, cluster, b) for b in brokers]
    assert again == list(ids)


def test_a_registration_without_kafka_fields_reads_as_kafka_off_and_new_fields_are_skipped():
    old = {
        "broker_id": "h:1",
        "grpc_address": "h:1",
        "http_url": "http://h:2",
        "version": "0",
        "started_ms": 1,
        "hostname": "h",
        "pid": 1,
        "instance": "i",
        "load": {},
    }
    info = BrokerInfo.from_json(json.dumps(old).encode())
    assert (info.kafka_address, info.kafka_node_id) == ("", -1)
    newer = {**old, "kafka_address": "h:9092", "kafka_node_id": 4, "a_later_field": True}
    info = BrokerInfo.from_json(json.dumps(newer).encode())
    assert (info.kafka_address, info.kafka_node_id) == ("h:9092", 4)
    assert BrokerInfo.from_json(info.to_json()) == info
