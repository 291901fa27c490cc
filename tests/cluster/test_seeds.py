"""A client given several brokers' addresses works while the first of them is down:
partition counts, lookups, opens and new transactions go to the next seed that
answers (Pulsar's multi-host service URL)."""

from __future__ import annotations

import itertools

import stableline

from .conftest import Cluster

_names = itertools.count()


def _broker_id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def test_a_client_whose_first_seed_is_down_uses_the_next(cluster: Cluster):
    first, *others = cluster.brokers
    seeds = ",".join(_broker_id(b) for b in cluster.brokers)
    base = next(_names)
    with stableline.Client(_broker_id(others[0])) as client:
        # Topics the down broker does not own (placed while it was up).
        topics = [f"persistent://public/default/seed-{base}-{i}" for i in range(6)]
        for topic in topics:
            client.create_producer(topic).close()
        kept = [t for t in topics if cluster.topic_leader(t) != _broker_id(first)]
    assert kept
    first.kill()
    try:
        with stableline.Client(seeds, operation_timeout_seconds=10.0) as client:
            assert client.get_topic_partitions(kept[0]) == [kept[0]]
            assert client.lookup_topic(kept[0]).grpc_address == cluster.topic_leader(kept[0])
            producer = client.create_producer(kept[0])
            txn = client.new_transaction(timeout_ms=60_000)
            producer.send(b"in a transaction", txn=txn)
            txn.commit()
            reader = client.create_reader(kept[0], stableline.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"in a transaction"
    finally:
        first.start()
