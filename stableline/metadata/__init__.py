"""Cluster metadata: one store interface, an embedded (LMDB) and an etcd implementation.

An engine package: it imports nothing of the broker. `open_metadata_store(url)` gives
a `ClusterMetadataStore` (store.py states its promises); the embedded store is the default
(one broker, nothing to run), `etcd://host:port[,host:port]` shares one etcd among a
cluster's brokers.

Key layout. Everything lives under `/stableline`; names are those of topics
(`tenant/namespace/topic`) and clusters. Values are JSON.

    /stableline/clusters/{cluster}
        The cluster's record, written by its first broker: later its settings
        (coordinator shard count K, default 4).
    /stableline/brokers/{cluster}/{host:port}                           [ephemeral]
        A live broker (brokers.py): advertised gRPC, HTTP and Kafka addresses, its
        Kafka node id, version, start time, host, pid, load. Gone when its session
        lapses.
    /stableline/kafka/{cluster}/node-ids
        {broker id: Kafka node id} (kafka_nodes.py): each broker's int32 id for
        Kafka clients, recorded once and kept, the same on every broker.
    /stableline/namespaces/{tenant}/{namespace}
        The namespace: {"created": true once a topic was made in it (it exists from
        then on), "autoTopicCreationOverride": {...}, "persistence": {...} when set}.
    /stableline/permissions/{tenant}/{namespace}
    /stableline/permissions/{tenant}/{namespace}/{topic}
        Grants: {role: ["produce", "consume"]} for the namespace, for one topic.
    /stableline/partitioned-topics/{tenant}/{namespace}/{topic}
        {"partitions": N}; partition i is the topic `{topic}-partition-{i}`. While
        the topic is being deleted also "deleted": true (its partitions are not
        made again on first use).

Namespaces, permissions and partitioned topics are shared by every cluster on the
store (Pulsar's configuration store); brokers read them through `PrefixMirror`s
(mirror.py), kept current by watches. Ownership and brokers are per cluster.
    /stableline/ownership/{cluster}/topics/{tenant}/{namespace}/{topic}
        Placement of one topic (or partition): {"leader": broker id, "epoch": E,
        "ensemble": [broker ids], "since_ms": T, "write_quorum": Qw,
        "ack_quorum": Qa} (the quorums absent from records written before them: 1). Persistent, not ephemeral: the
        topic's ledgers stay on its leader's disk while that broker is down, so the
        record outlives the leader's session and its liveness is read from
        /stableline/brokers. Changed only by compare-and-set on the record's version;
        each change of leader raises the epoch, which the new leader writes into
        its ledgers so an old leader's late writes are refused (fencing). The
        ensemble lists the brokers holding replicas, the leader first, as many as
        the namespace's persistence policy asked when it was placed.
    /stableline/draining/{cluster}/{host:port}
        A broker being decommissioned (draining.py): no placement or ensemble
        change chooses it, and each topic's writer replaces it in its ensemble.
    /stableline/ownership/{cluster}/coordinators/{shard}
        The same record for coordinator shard `shard` (0..K-1): a transaction id's
        high half names its shard, whose leader decides and ends the transaction.
    /stableline/kafka/{cluster}/transactional-ids/{id}@{role}
        A Kafka transactional.id of a role ("" with authentication off), each
        percent-encoded (stableline/broker/kafka/coordinator/transactional_ids.py): its producer id,
        epoch, transaction timeout, and the stableline transaction it has open with
        the topics and groups added to it. Changed only by compare-and-set; deleted
        once idle for 7 days (Kafka's transactional.id.expiration.ms).
    /stableline/kafka/{cluster}/groups/{group}/partitions/{topic}
        A Kafka consumer group's index, one key per Kafka topic it has committed on
        (stableline/broker/kafka/coordinator/shared_group_records.py): {"partitions":
        [sorted partition numbers]}; the offsets themselves are the group's
        subscriptions' cursors, which fail over with their topics. Written when the
        group first commits on a partition, by compare-and-set; a partition whose
        subscription is gone is taken out, the key deleted with its last partition.
    /stableline/kafka/{cluster}/groups/{group}/owner
        The role that owns the group when authorization is on (its raw name).
        Written when a role claims the group, by compare-and-set on the owner read.
"""

from stableline.metadata.brokers import (
    BrokerAlreadyRegistered,
    BrokerInfo,
    BrokerRegistration,
    list_brokers,
    list_clusters,
)
from stableline.metadata.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    MetadataStoreError,
    MetadataStoreUnavailable,
    NotFound,
    WatchOverflow,
)
from stableline.metadata.etcd_url import InvalidMetadataStoreUrl, parse_etcd_url
from stableline.metadata.factory import DEFAULT_SESSION_TIMEOUT_S, open_metadata_store
from stableline.metadata.kafka_nodes import kafka_node_id
from stableline.metadata.mirror import PrefixMirror
from stableline.metadata.store import ClusterMetadataStore, Watch
from stableline.metadata.values import (
    GetResult,
    Notification,
    NotificationType,
    SessionEvent,
    SessionState,
    Stat,
)

__all__ = [
    "DEFAULT_SESSION_TIMEOUT_S",
    "AlreadyExists",
    "BadVersion",
    "BrokerAlreadyRegistered",
    "BrokerInfo",
    "BrokerRegistration",
    "ClusterMetadataStore",
    "GetResult",
    "InvalidMetadataStoreUrl",
    "InvalidPath",
    "MetadataStoreError",
    "MetadataStoreUnavailable",
    "NotFound",
    "Notification",
    "NotificationType",
    "PrefixMirror",
    "SessionEvent",
    "SessionState",
    "Stat",
    "Watch",
    "WatchOverflow",
    "kafka_node_id",
    "list_brokers",
    "list_clusters",
    "open_metadata_store",
    "parse_etcd_url",
]
