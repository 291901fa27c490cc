"""Kafka node ids: the int32 each broker of a cluster is known by to Kafka clients.

Kafka names brokers by integer ids (Metadata's brokers, each partition's leader,
FindCoordinator's answer), and a client keeps one connection per id, so every broker
of a cluster must tell every client the same id for the same broker. A broker's id
here is its advertised gRPC address; its Kafka node id is recorded once, in
`/stableline/kafka/{cluster}/node-ids` (`{"broker id": node id, ...}`), and kept for
good: a broker restarted on the same address is the same Kafka node.

Promises:
- `kafka_node_id` answers the recorded id of a broker id, or records the next free
  one (one more than the largest recorded, 0 for the first) by compare-and-set, so
  two brokers registering at once never get one id. Ids are never reused.
- The embedded store runs the same code: a standalone broker is node 0.
"""

from __future__ import annotations

import json

from stableline.metadata.errors import AlreadyExists, BadVersion
from stableline.metadata.layout import ROOT, check_cluster_name
from stableline.metadata.store import ClusterMetadataStore

# Kafka's node ids are int32; brokers of one cluster are far fewer.
MAX_NODE_ID = 2**31 - 1


def kafka_node_ids_path(cluster: str) -> str:
    return f"{ROOT}/kafka/{check_cluster_name(cluster)}/node-ids"


async def kafka_node_id(store: ClusterMetadataStore, cluster: str, broker_id: str) -> int:
    """The Kafka node id of broker `broker_id` in `cluster`, recorded on first ask."""
    assert broker_id, "a broker id is its advertised address"
    path = kafka_node_ids_path(cluster)
    while True:
        result = await store.get(path)
        ids: dict[str, int] = {} if result is None else json.loads(result.value)
        known = ids.get(broker_id)
        if known is not None:
            return known
        node_id = max(ids.values(), default=-1) + 1
        assert node_id <= MAX_NODE_ID, node_id
        ids[broker_id] = node_id
        value = json.dumps(ids, separators=(",", ":"), sort_keys=True).encode()
        try:
            await store.put(path, value, -1 if result is None else result.stat.version)
        except (AlreadyExists, BadVersion):
            continue  # another broker recorded one meanwhile: read again
        return node_id
