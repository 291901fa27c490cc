"""Broker configuration: defaults, then a TOML file, then STABLELINE_* variables, then flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from managed_ledger import ManagedLedgerConfig

ENV_PREFIX = "STABLELINE_"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path = Path("./stableline-data")
    grpc_address: str = "127.0.0.1:6650"
    http_address: str = "127.0.0.1:8080"
    # The Kafka protocol port (stableline/broker/kafka), Kafka's own 9092 by default: ""
    # keeps it closed. Kafka topics are the topics of kafka_namespace.
    kafka_address: str = "127.0.0.1:9092"
    kafka_namespace: str = "public/default"
    # Kafka consumer groups (stableline/broker/kafka/coordinator/group_coordinator.py): groups with
    # members at once, members of one group and of all groups; one more is refused
    # (COORDINATOR_NOT_AVAILABLE, GROUP_MAX_SIZE_REACHED) [Kafka: group.max.size].
    # A new group's first generation waits this long for more members
    # [group.initial.rebalance.delay.ms].
    kafka_max_groups: int = 10_000
    kafka_max_group_members: int = 1000
    kafka_max_group_members_total: int = 100_000
    kafka_group_initial_rebalance_delay_ms: int = 3000
    # Topics, and partitions, one Kafka request (Fetch, Produce, ListOffsets, Metadata,
    # the offset commits and fetches, AddPartitionsToTxn, CreateTopics, DeleteTopics)
    # may name; past it the request is refused unread and its connection closed, as
    # a request that does not parse is.
    kafka_max_partitions_per_request: int = 10_000
    # Bytes the compressed records of one Kafka Produce may inflate to, all its batches
    # and partitions together, each record also charged for the objects it becomes;
    # past it the whole Produce is refused (MESSAGE_TOO_LARGE), nothing written, the
    # rest never inflated. 0: 16 x max_message_size, at least 64 MiB.
    kafka_max_produce_inflated_bytes: int = 0
    # One role's share of those (with authorization on; superusers have none): groups
    # it owns with members, and members in them (stableline/broker/kafka/coordinator/group_access.py).
    # 0: a tenth of kafka_max_groups, of kafka_max_group_members_total.
    kafka_max_groups_per_role: int = 0
    kafka_max_group_members_per_role: int = 0
    # A member's session timeout must lie within these, else INVALID_SESSION_TIMEOUT
    # [group.min.session.timeout.ms, group.max.session.timeout.ms].
    kafka_group_min_session_timeout_ms: int = 1000
    kafka_group_max_session_timeout_ms: int = 300_000
    # Largest message payload a producer may send, and largest batch entry.
    max_message_size: int = 5 * 1024 * 1024
    # Limits and back-pressure (Pulsar's names in brackets); each bounds a queue.
    # Sends of one Produce stream appending at once; past it the broker stops reading
    # the stream and gRPC flow control holds the producer [maxPendingPublishRequests].
    max_pending_publishes_per_producer: int = 1000
    # Messages delivered and not acknowledged before the broker stops dispatching to a
    # consumer, or to a whole subscription; it resumes once acks bring the count down
    # to half [maxUnackedMessagesPerConsumer, maxUnackedMessagesPerSubscription].
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    # Consumers one subscription takes; one more is refused [maxConsumersPerSubscription].
    max_consumers_per_subscription: int = 1000
    # Open transactions in the coordinator, and per client (per role with
    # authentication on, per connection with it off); a new one past either is refused
    # [transactionCoordinator max active transactions].
    max_open_transactions: int = 100_000
    max_open_transactions_per_client: int = 10_000
    # Messages one transaction may acknowledge (its acks are held in memory until it
    # ends); an ack past it is refused.
    max_acks_per_transaction: int = 100_000
    # Ended transactions the coordinator remembers (a repeated end answers as before,
    # transactionMetadata finds them, a committed name is joined): for this long after
    # their end, and at most this many of the latest; then they are forgotten
    # [Kafka: transactional.id.expiration.ms].
    txn_ended_retention_s: float = 3600.0
    max_ended_transactions: int = 100_000
    # Client connections (distinct gRPC peers with a call open) served at once; calls
    # from one more peer are refused [maxConnections]. It also caps the gRPC port's
    # connections, calls or not (one more is closed at its accept).
    max_connections: int = 4096
    # gRPC connections with a call open from one address; calls of one more
    # connection from it are refused [Pulsar: maxConnectionsPerIp]. Of an address
    # with more sockets than this, calls or not, the oldest with no call are shut
    # down (grpc/socket_guard.py).
    max_connections_per_address: int = 1024
    # The Kafka port: connections at once, and from one address; one more is reset
    # at its accept [Kafka: max.connections, max.connections.per.ip].
    kafka_max_connections: int = 4096
    kafka_max_connections_per_address: int = 1024
    # A Kafka connection sending no request this long is closed
    # [Kafka: connections.max.idle.ms, the same 10 minutes].
    kafka_connections_max_idle_ms: int = 600_000
    # A new connection must be through its TLS handshake and authenticated within
    # this long of its accept or it is closed: on the Kafka port, its SASL
    # authentication and first request (its first request with authentication
    # off); on the gRPC port, its HTTP/2 handshake, and a gRPC connection with no
    # call open this long is closed too (clients reconnect on their next call).
    # The connection caps of all ports together are cut, at start, to fit the
    # open-files limit, each per-address cap to half its port's (connections/caps.py).
    connection_authentication_timeout_s: float = 10.0
    # A request stream (producer, consumer) must send its opening request within
    # this long or it is ended; until then it holds no connection slot
    # [Pulsar: the CONNECT deadline of a new connection].
    connection_idle_timeout_s: float = 30.0
    # Connections open on the HTTP admin port (a TLS handshake in progress included);
    # one more is closed at once. A connection must send its first request's headers
    # (after its TLS handshake) within http_request_header_timeout_s or it is closed;
    # an idle keep-alive connection closes after connection_idle_timeout_s.
    max_http_connections: int = 1024
    http_request_header_timeout_s: float = 10.0
    # HTTP connections from one address: one client cannot crowd out the others,
    # an operator's health checks included.
    http_max_connections_per_address: int = 64
    # Entries pushed to one consumer per gRPC frame.
    max_entries_per_frame: int = 500
    # Bytes of entries in one Fetch reply, one Subscribe frame and one peek; the
    # first entry goes out whatever its size, so readers make progress
    # [Kafka: fetch.max.bytes].
    max_fetch_bytes: int = 50 * 1024 * 1024
    # How often the metadata store is fsynced (cursor positions).
    metadata_sync_interval_s: float = 1.0
    # A topic's transaction buffer snapshots after this many changes (transactions
    # begun or ended there) or this long after the first change since the last one.
    txn_snapshot_every_changes: int = 1000
    txn_snapshot_interval_s: float = 5.0
    # A loaded topic with no producer, consumer, open transaction or write in flight,
    # unused for this long, is closed (its name stays listed; the next use loads it
    # again): idle topics then hold no memory beyond their name and no open file
    # [Pulsar: topics unload with their bundle]. 0: never unload.
    inactive_topic_unload_s: float = 60.0
    # A READ_COMMITTED read (Fetch, GetLastMessageId, stable position) of a topic
    # still replaying its log after a restart waits this long for the replay, then
    # fails with NotReady (UNAVAILABLE, retryable; a Kafka read_committed Fetch or
    # ListOffsets gets NOT_LEADER_OR_FOLLOWER): before the replay ends, the stable
    # position could be earlier than the one readers saw before a crash.
    topic_recovery_wait_s: float = 30.0
    # A namespace holds at most this many topics; one more (created by an admin or
    # on first use) is refused with TooManyTopics. 0: unlimited [Pulsar's
    # maxTopicsPerNamespace, 0 by default too].
    max_topics_per_namespace: int = 0
    # A partitioned topic has at most this many partitions; more, at creation or
    # growth, is refused. 0: unlimited [Pulsar's maxNumPartitionsPerPartitionedTopic,
    # unlimited by default; each partition is a topic with its own files here].
    max_num_partitions_per_partitioned_topic: int = 1024
    # Crash tests only: failpoints to pause at (stableline/broker/failpoints.py).
    failpoints: str = ""
    # Security, all off by default (stableline/broker/security). TLS on both ports
    # when a cert and key are set; with a trust file, clients need a cert it signed.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    # Bearer tokens (JWT, `sub` = role): HS256 with a secret key file or RS256 with
    # a public key file; authorization checks each role's grants, superusers pass.
    authentication_enabled: bool = False
    token_secret_key: str = ""
    token_public_key: str = ""
    authorization_enabled: bool = False
    # With authorization on, a topic is created on first use (Produce, Subscribe)
    # only by a role with produce on it; true: by any role allowed the call (a
    # consume-only subscriber too). Without authorization every caller may create.
    allow_auto_topic_creation: bool = False
    superuser_roles: tuple[str, ...] = ()
    # /metrics is open (as Pulsar leaves it); true: it needs a valid token (any role).
    authenticate_metrics_endpoint: bool = False
    # How often open Produce/Subscribe streams are checked for an expired token
    # (Pulsar's authenticationRefreshCheckSeconds); revoked grants end them at once.
    authentication_refresh_check_seconds: float = 60.0
    # Cluster metadata (stableline/metadata): "" keeps it in the data dir (a cluster of
    # one); etcd://host:port[,host:port...] shares one etcd among a cluster's brokers,
    # with TLS and USER:PASSWORD@ as its docstring says [metadataStoreUrl].
    metadata_store_url: str = ""
    # The etcd password of the URL's USER@, never on the command line (`ps` shows
    # it): a file holding it (its first line), or this key, set from the config file
    # or STABLELINE_METADATA_STORE_PASSWORD. One of the two; a password in the URL
    # still works, with a WARNING.
    metadata_store_password_file: str = ""
    metadata_store_password: str = field(default="", repr=False)
    # A broker whose etcd answers reads without credentials (no etcd authentication)
    # logs a WARNING at start; true (what --secure sets): it refuses to start, since
    # anyone who reaches that etcd can grant themselves any right.
    metadata_store_require_authentication: bool = False
    # The cluster this broker registers in [clusterName; Pulsar standalone's name].
    cluster_name: str = "standalone"
    # The etcd lease of this broker's session: a killed broker leaves the live list
    # this long after its last keep-alive, and its replicated topics are taken by
    # other brokers then; a broker cut off from etcd declares its session lost a sixth
    # of it before the lease can expire [metadataStoreSessionTimeoutMillis, 30 s in
    # Pulsar; Kafka's broker.session.timeout.ms is 9 s]. 4 s serves a killed broker's
    # topics again within 5 s.
    metadata_session_timeout_s: float = 4.0
    # At shutdown (SIGTERM) in a cluster, how long the broker spends handing what it
    # leads to other brokers before it leaves: its transaction coordinator shards
    # first (the ends under way finish, each shard goes to a live broker, which takes
    # it at once), then the replicated topics it leads to other members of their
    # ensembles, so their clients see no failed call; what is left by then fails over
    # as after a crash [Pulsar's brokerShutdownTimeoutMs bounds its whole shutdown].
    # 0: nothing is handed over.
    shutdown_hand_over_timeout_s: float = 10.0
    # HOST or HOST:PORT clients reach this broker's gRPC at, and its id in the cluster;
    # "" is the --grpc host and bound port (this machine's name for a wildcard host)
    # [advertisedAddress].
    advertised_address: str = ""
    # Transaction coordinator shards (a TxnId's high half names its shard; Pulsar's
    # coordinator partitions). 0: 1 with the embedded store, and in a cluster
    # whatever the cluster's first broker chose (4 unless its config said otherwise);
    # a cluster's count is fixed once chosen [transactionCoordinatorCount].
    transaction_coordinator_shards: int = 0
    # The persistence policy of namespaces without one (set-persistence): brokers
    # holding each ledger (E), written to (Qw), acknowledging (Qa). 0: by the
    # metadata store, resolved at start (topics/persistence.py): 3/3/2 with etcd,
    # 1/1/1 embedded; Qw left 0 is E [Pulsar's managedLedgerDefaultEnsembleSize,
    # managedLedgerDefaultWriteQuorum, managedLedgerDefaultAckQuorum].
    default_ensemble_size: int = 0
    default_write_quorum: int = 0
    default_ack_quorum: int = 0
    # How this broker reaches the others of its cluster when security is on: a token
    # of a superuser role (default: one made with token_secret_key), and the CA of
    # their certificates (default: tls_trust_certs_file, or --secure's ca.pem)
    # [brokerClientAuthenticationParameters, brokerClientTrustCertsFilePath].
    broker_client_token_file: str = ""
    broker_client_trust_certs_file: str = ""
    # A member of a replicated topic's ensemble gone (not registered) this long is
    # replaced by its writer with another live broker, which is sent every ledger it
    # lacks (BookKeeper's autorecovery) [auditorLostBookieRecoveryDelay]. A broker
    # being decommissioned is replaced at once.
    replication_grace_period_s: float = 60.0
    # Bytes per second this broker sends of old entries, read back from its files, to
    # members catching up (one being re-made, one back from away); new entries are
    # never held back (a throttle of autorecovery's traffic).
    rereplication_rate_bytes_per_s: int = 50 * 1024 * 1024
    # Load reports and the balancer (cluster/balancer.py), in a cluster only. Each
    # broker writes its load (rates over the interval, CPU, memory, topics) to its
    # registration this often; placement weighs the reports. The balancer runs on
    # one broker at a time and, once a broker's load score has stayed more than
    # load_balancer_threshold above the cluster's mean (and at least
    # load_balancer_min_excess units/s above it) for
    # load_balancer_consecutive_reports reports, moves its busiest topics to the
    # least-loaded members of their ensembles: at most
    # load_balancer_max_moves_per_minute, never a topic moved in the last
    # load_balancer_move_cooldown_s. Where no member can take a topic, a broker
    # outside its ensemble is sent a copy first (cluster/ensemble_swaps.py), at most
    # load_balancer_max_copies_per_broker at once to one broker
    # [Pulsar's loadBalancerEnabled,
    # loadBalancerReportUpdateMinIntervalMillis, ThresholdShedder's
    # loadBalancerBrokerThresholdShedderPercentage].
    load_report_interval_s: float = 5.0
    load_balancer_enabled: bool = True
    load_balancer_threshold: float = 0.25
    load_balancer_min_excess: float = 100.0
    load_balancer_consecutive_reports: int = 3
    load_balancer_max_moves_per_minute: int = 6
    load_balancer_move_cooldown_s: float = 300.0
    load_balancer_max_copies_per_broker: int = 2
    ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)

    @property
    def ledgers_dir(self) -> Path:
        return self.data_dir / "ledgers"

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir / "metadata"


# What each key does, for people: the configuration reference
# (docs/reference/configuration.md) is generated from these and the defaults above
# (`make docs`; stableline/broker/config_reference.py), and a test fails when a key has
# none. Pulsar's or Kafka's name for the same setting in brackets.
KEY_DESCRIPTIONS: dict[str, str] = {
    "data_dir": "Where the broker keeps its ledgers and metadata. One broker owns a data "
    "dir: a second broker on it stops at once (exit code 2).",
    "grpc_address": "Where the gRPC data plane and admin service listen (clients' service URL).",
    "http_address": "Where the HTTP admin API, `/metrics` and the dashboard listen.",
    "kafka_address": 'Where the Kafka protocol port listens; "" keeps it closed.',
    "kafka_namespace": "The namespace whose topics Kafka clients see: Kafka topic `T` is "
    "`persistent://{kafka_namespace}/T`.",
    "kafka_max_groups": "Kafka consumer groups with members at once; a new group's JoinGroup "
    "past it is refused with COORDINATOR_NOT_AVAILABLE, which clients retry.",
    "kafka_max_group_members": "Members of one Kafka consumer group; one more is refused "
    "with GROUP_MAX_SIZE_REACHED [Kafka: group.max.size].",
    "kafka_max_group_members_total": "Members of all Kafka consumer groups together.",
    "kafka_group_initial_rebalance_delay_ms": "A new group's first generation waits this "
    "long for more members, longer while they keep coming, within the rebalance timeout "
    "[group.initial.rebalance.delay.ms].",
    "kafka_max_partitions_per_request": "Topics, and partitions, one Kafka request may "
    "name; one naming more is refused unread and its connection closed.",
    "kafka_max_produce_inflated_bytes": "Bytes the records of one Kafka Produce may "
    "decode to (compressed batches inflated, 160 bytes a record for its objects, all "
    "partitions together); past it the whole Produce is refused with MESSAGE_TOO_LARGE "
    "and nothing is written. 0: 16 x `max_message_size`, at least 64 MiB.",
    "kafka_max_groups_per_role": "With authorization on, the Kafka groups with members "
    "one role may own (superusers count only against the totals). 0: a tenth of "
    "`kafka_max_groups`.",
    "kafka_max_group_members_per_role": "With authorization on, the members in one role's "
    "Kafka groups. 0: a tenth of `kafka_max_group_members_total`.",
    "kafka_group_min_session_timeout_ms": "The shortest session timeout a Kafka group "
    "member may ask for; shorter is INVALID_SESSION_TIMEOUT [group.min.session.timeout.ms].",
    "kafka_group_max_session_timeout_ms": "The longest session timeout a Kafka group "
    "member may ask for (Kafka's maximum is 30 min) [group.max.session.timeout.ms].",
    "max_message_size": "The largest message or batch a producer may send; bigger is "
    "refused with `MessageTooBig` (the client checks before sending) [maxMessageSize].",
    "max_pending_publishes_per_producer": "Sends of one producer being appended at once; "
    "past it the broker stops reading the producer's stream and gRPC flow control holds "
    "the producer. Stats: `publishers[].pendingPublishes` "
    "[maxPendingPublishRequestsPerConnection].",
    "max_unacked_messages_per_consumer": "Messages delivered to one consumer and not "
    "acknowledged before the broker stops dispatching to it; it resumes at half. Stats: "
    "`consumers[].blockedConsumerOnUnackedMsgs` [maxUnackedMessagesPerConsumer].",
    "max_unacked_messages_per_subscription": "The same for all consumers of a "
    "subscription together. Stats: `blockedSubscriptionOnUnackedMsgs` "
    "[maxUnackedMessagesPerSubscription].",
    "max_consumers_per_subscription": "Consumers one subscription takes; one more is "
    "refused [maxConsumersPerSubscription].",
    "max_open_transactions": "Open transactions in the coordinator; a new one past it is "
    "refused. `coordinatorStats`: `openTxns`, `maxOpenTxns`.",
    "max_open_transactions_per_client": "Open transactions of one client: of one role "
    "with authentication on (whatever its connections), of one connection with it off.",
    "max_acks_per_transaction": "Messages one transaction may acknowledge (held in memory "
    "until it ends); an ack past it is refused and holds nothing. `coordinatorStats`: "
    "`maxAcksPerTxn`.",
    "txn_ended_retention_s": "How long after its end the coordinator remembers a "
    "transaction (a repeated end answers as before, `transactionMetadata` finds it, a "
    "committed name is joined); then `TransactionNotFound`, and its name opens a new "
    "transaction [Kafka: transactional.id.expiration.ms].",
    "max_ended_transactions": "Ended transactions remembered at most; past it the oldest "
    "is forgotten. `coordinatorStats`: `endedTxns`, `maxEndedTxns`.",
    "max_connections": "Client connections (gRPC peers with an authenticated call open) "
    "served at once; calls from one more are refused. Also caps the gRPC port's "
    "connections at the accept. `GET /admin/v2/broker-stats/connections` [maxConnections].",
    "max_connections_per_address": "gRPC connections with a call open from one address; "
    "calls of one more are refused (`TooManyConnections`). Of an address past it, the "
    "oldest sockets with no call are shut down [maxConnectionsPerIp].",
    "kafka_max_connections": "Connections to the Kafka port at once; one more takes the "
    "place of the longest-waiting unauthenticated one, or is reset at its accept "
    "[Kafka: max.connections].",
    "kafka_max_connections_per_address": "The same from one address "
    "[Kafka: max.connections.per.ip].",
    "kafka_connections_max_idle_ms": "An authenticated Kafka connection that sends no "
    "request this long is closed [Kafka: connections.max.idle.ms].",
    "connection_authentication_timeout_s": "A new Kafka connection must be through its "
    "TLS handshake, SASL authentication and first request, and a gRPC connection through "
    "its TLS and HTTP/2 handshake, this long after its accept, or it is closed; a gRPC "
    "connection with no call open this long is closed too (clients reconnect).",
    "connection_idle_timeout_s": "A producer or consumer stream must send its opening "
    "request within this long or it is ended (`DEADLINE_EXCEEDED`, code `IdleStream`); "
    "an idle HTTP keep-alive connection closes after it too.",
    "max_http_connections": "Connections open on the HTTP admin port (TLS handshakes in "
    "progress included); one more is closed at once. "
    "`GET /admin/v2/broker-stats/http-connections`.",
    "http_request_header_timeout_s": "An HTTP connection that has not finished its TLS "
    "handshake and its first request's headers this long after its accept is closed.",
    "http_max_connections_per_address": "HTTP connections from one address, so one client "
    "cannot crowd out the others (health checks included).",
    "max_entries_per_frame": "Entries pushed to one consumer per gRPC frame.",
    "max_fetch_bytes": "Bytes of entries in one Fetch reply, one Subscribe frame and one "
    "peek step; the first entry goes out whatever its size, so readers move on "
    "[Kafka: fetch.max.bytes].",
    "metadata_sync_interval_s": "How often the metadata store (cursor positions) is fsynced.",
    "txn_snapshot_every_changes": "A topic's transaction buffer snapshots after this many "
    "changes (transactions begun or ended there), or as many as are open if more.",
    "txn_snapshot_interval_s": "A topic's transaction buffer also snapshots this long "
    "after the first change since its last snapshot.",
    "inactive_topic_unload_s": "A topic with no producer, consumer, open transaction or "
    "write in flight, unused this long, is unloaded (the next use loads it again). "
    "0: never.",
    "topic_recovery_wait_s": "A READ_COMMITTED read of a topic still replaying its log "
    "after a restart waits this long, then fails with `NotReady` (retryable; Kafka: "
    "NOT_LEADER_OR_FOLLOWER).",
    "max_topics_per_namespace": "Topics one namespace holds; one more (on first use or by "
    "an admin) is refused with `TooManyTopics` (HTTP 412). 0: unlimited "
    "[maxTopicsPerNamespace].",
    "max_num_partitions_per_partitioned_topic": "Partitions of one partitioned topic; "
    "more, at creation or growth, is refused (HTTP 400). 0: unlimited "
    "[maxNumPartitionsPerPartitionedTopic].",
    "failpoints": "Crash tests only: failpoints where the broker pauses or fails "
    "(also `STABLELINE_FAILPOINTS`); see operations/recovery.",
    "tls_cert_file": "The broker's certificate (PEM); with `tls_key_file`, TLS on every port.",
    "tls_key_file": "The broker certificate's private key (PEM).",
    "tls_trust_certs_file": "Clients must present a certificate this CA signed.",
    "authentication_enabled": "Require a token on every call (set by the token key flags).",
    "token_secret_key": "HS256 secret key file (at least 32 bytes) tokens are checked with.",
    "token_public_key": "RS256 public key file tokens are checked with.",
    "authorization_enabled": "Check each role's grants; superusers pass.",
    "allow_auto_topic_creation": "With authorization on, any role allowed the call may "
    "create a topic by its first use; false: only a role with produce on it.",
    "superuser_roles": "Roles that may do anything, the admin API included "
    "(comma-separated in a flag or variable).",
    "authenticate_metrics_endpoint": "`/metrics` needs a valid token of any role "
    "(authentication must be on); false: it is open, as in Pulsar.",
    "authentication_refresh_check_seconds": "How often open producer and consumer streams "
    "are checked for an expired token [authenticationRefreshCheckSeconds].",
    "metadata_store_url": 'The cluster\'s metadata store: "" keeps it in the data dir (a '
    "cluster of one); `etcd://[USER@]HOST:PORT[,HOST:PORT...][?tls_trust_certs_file=CA"
    "&tls_cert_file=C&tls_key_file=K]` shares an etcd [metadataStoreUrl].",
    "metadata_store_password_file": "A file whose first line is the etcd password of the "
    "URL's user.",
    "metadata_store_password": "The etcd password itself, from the config file or "
    "`STABLELINE_METADATA_STORE_PASSWORD` (never a flag); give this or the file.",
    "metadata_store_require_authentication": "Refuse to start when etcd answers a client "
    "that gives no credentials (`--secure` sets it); false: a WARNING.",
    "cluster_name": "The cluster this broker registers in [clusterName].",
    "metadata_session_timeout_s": "The etcd lease of the broker's session: a killed "
    "broker leaves the live list this long after its last keep-alive, and its replicated "
    "topics are taken by other brokers then (so the default serves them again within "
    "5 s); a broker cut off from etcd declares its session lost a sixth of it earlier, "
    "and takes no writes until etcd is back [metadataStoreSessionTimeoutMillis; "
    "Pulsar's is 30 s, Kafka's broker session 9 s].",
    "shutdown_hand_over_timeout_s": "At shutdown (SIGTERM) in a cluster, how long the "
    "broker spends handing what it leads to other brokers before it leaves: its "
    "transaction coordinator shards first (the ends under way finish, and each shard goes "
    "to a live broker, which takes it at once), then the replicated topics it leads to "
    "other members of their ensembles, so their clients see no failed call; what is left "
    "by then fails over as after a crash. 0: nothing is handed over "
    "[brokerShutdownTimeoutMs bounds Pulsar's whole shutdown].",
    "advertised_address": "HOST or HOST:PORT clients reach this broker's gRPC at, and its "
    'id in the cluster; "": the `grpc_address` host and bound port (a wildcard host '
    "advertises the machine's name) [advertisedAddress].",
    "transaction_coordinator_shards": "Transaction coordinator shards. 0: 1 with the "
    "embedded store; in a cluster, what its first broker chose (4 unless set). Fixed per "
    "cluster once written: a broker naming another count refuses to start "
    "[transactionCoordinatorCount].",
    "default_ensemble_size": "Brokers holding each ledger of a namespace without a "
    "persistence policy (`admin namespaces set-persistence`). 0: by the metadata store, "
    "resolved at start: 3 with etcd, 1 embedded. A topic placed when fewer brokers are "
    "live is refused with `NotEnoughBrokers` [managedLedgerDefaultEnsembleSize].",
    "default_write_quorum": "Brokers each entry is written to, at most the ensemble. 0: "
    "the ensemble size [managedLedgerDefaultWriteQuorum].",
    "default_ack_quorum": "Brokers that must hold an entry before it is acknowledged, at "
    "most the write quorum. 0: by the metadata store, resolved at start: 2 with etcd (at "
    "most the write quorum), 1 embedded [managedLedgerDefaultAckQuorum].",
    "replication_grace_period_s": "A member of a replicated topic's ensemble that is not "
    "live this long is replaced by the topic's writer with the least loaded live broker "
    "outside the ensemble, which is sent every ledger it lacks (autorecovery); a broker "
    "being decommissioned is replaced at once [auditorLostBookieRecoveryDelay].",
    "rereplication_rate_bytes_per_s": "Bytes per second of old entries (read back from "
    "this broker's files) it sends to members catching up, over all its topics, so "
    "clients' writes are not starved; new entries are not throttled.",
    "broker_client_token_file": "With security on, the superuser token this broker calls "
    "the others with (default: one made with `token_secret_key` for the first superuser "
    "role) [brokerClientAuthenticationParameters].",
    "broker_client_trust_certs_file": "The CA of the other brokers' certificates (default: "
    "`tls_trust_certs_file`, or `--secure`'s ca.pem) [brokerClientTrustCertsFilePath].",
    "load_report_interval_s": "In a cluster, how often each broker writes its load "
    "(msgs/s and bytes/s in and out over the interval, CPU, RSS, topics) to its "
    "registration; `admin brokers load` shows the reports and placement weighs them "
    "[loadBalancerReportUpdateMinIntervalMillis].",
    "load_balancer_enabled": "In a cluster, run the balancer (on one broker at a time): it "
    "moves the busiest topics off a broker whose load stays well above the cluster's mean "
    "[loadBalancerEnabled].",
    "load_balancer_threshold": "A broker is overloaded when its load score is more than "
    "this fraction above the cluster's mean (0.25: 25 %) "
    "[loadBalancerBrokerThresholdShedderPercentage].",
    "load_balancer_min_excess": "An overloaded broker is also at least this many load units "
    "per second above the mean (a message or a KiB in or out is one unit), so a nearly idle "
    "cluster is left alone.",
    "load_balancer_consecutive_reports": "Reports in a row a broker must be overloaded in "
    "before the balancer moves topics off it (and again after each round of moves).",
    "load_balancer_max_moves_per_minute": "Topic moves the balancer starts in any minute.",
    "load_balancer_move_cooldown_s": "A topic the balancer moved is not moved again for "
    "this long (no ping-pong).",
    "load_balancer_max_copies_per_broker": "Copies the balancer has made to one broker at "
    "once, of topics whose ensembles do not name it (how a broker that joins takes existing "
    "topics: sent a copy in place of a member, then the topic). 0: none, a topic moves only "
    "to a member of its ensemble.",
}

# The ledger's keys (managed_ledger/config.py), set at the top level or under [ledger].
LEDGER_KEY_DESCRIPTIONS: dict[str, str] = {
    "max_entries_per_ledger": "A ledger rolls over past this many entries.",
    "max_ledger_size_bytes": "A ledger rolls over past this many bytes.",
    "max_ledger_age_s": "A ledger rolls over this long after it was opened.",
    "fsync": "An append is acknowledged only after fdatasync; false trades durability for speed.",
    "max_entry_size_bytes": "The largest entry (a client batch) a ledger takes.",
    "max_group_commit_bytes": "Bytes that share one write + fsync (group commit).",
    "max_pending_bytes": "Bytes queued for one topic's writer; past it appends wait. "
    "One topic's share of `max_pending_write_bytes`, never more.",
    "cache_size_bytes": "Recent entries one topic keeps in memory for tailing readers; "
    "its share of `entry_cache_size_bytes`, never more.",
    "entry_cache_size_bytes": "Cached entries of all topics together, each charged its "
    "payload + 720 B; past it the oldest of any topic go first. 0: 1/8 of the memory "
    "the process may use, at most 256 MiB [managedLedgerCacheSizeMB].",
    "max_pending_write_bytes": "Bytes queued for the writers of all topics (each append "
    "charged its bytes + 400 B); past it appends wait, first come first served. 0: 1/32 "
    "of the memory, at most 32 MiB [maxMessagePublishBufferSizeInMB].",
    "cursor_flush_interval_s": "Cursor positions are written to the metadata store at "
    "most this often.",
    "max_persisted_acked_positions": "Individually acknowledged positions above the "
    "mark-delete position that are persisted; past it a crash redelivers the rest "
    "(at-least-once holds).",
    "max_open_ledger_files": "Ledger files open at once over all topics; the least "
    "recently used is closed past it. 0: half the open-files soft limit.",
    "retention_time_s": "A closed ledger that every cursor has consumed, below the stable "
    "position, is deleted once this long has passed since it was created (0, Pulsar's "
    "default: at once); the current ledger and topics without cursors keep everything.",
}


_LEDGER_FIELDS = {f.name: f for f in dataclasses.fields(ManagedLedgerConfig)}
_BROKER_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name != "ledger"}


def _coerce(name: str, value: Any, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)
        if isinstance(default, Path):
            return Path(value)
        if isinstance(default, tuple):
            # A TOML list, or "a,b" from a flag or an environment variable.
            items = value.split(",") if isinstance(value, str) else list(value)
            return tuple(str(item).strip() for item in items if str(item).strip())
        return type(default)(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"config {name}: cannot use {value!r} as {type(default).__name__}"
        ) from None


def load_config(
    config_file: Path | None = None, overrides: dict[str, Any] | None = None
) -> BrokerConfig:
    """Merge the sources of configuration; unknown keys are errors, not silently ignored."""
    values: dict[str, Any] = {}
    if config_file is not None:
        with open(config_file, "rb") as handle:
            values.update(tomllib.load(handle))
    for key, value in os.environ.items():
        if key.startswith(ENV_PREFIX):
            values[key[len(ENV_PREFIX) :].lower()] = value
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    broker_defaults = BrokerConfig()
    ledger_defaults = ManagedLedgerConfig()
    broker_kwargs: dict[str, Any] = {}
    ledger_kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key in _BROKER_FIELDS:
            broker_kwargs[key] = _coerce(key, value, getattr(broker_defaults, key))
        elif key in _LEDGER_FIELDS:
            ledger_kwargs[key] = _coerce(key, value, getattr(ledger_defaults, key))
        elif key == "ledger" and isinstance(value, dict):
            for sub_key, sub_value in value.items():
                if sub_key not in _LEDGER_FIELDS:
                    raise ValueError(f"unknown config key ledger.{sub_key}")
                ledger_kwargs[sub_key] = _coerce(
                    sub_key, sub_value, getattr(ledger_defaults, sub_key)
                )
        else:
            raise ValueError(f"unknown config key {key!r}")
    config = BrokerConfig(**broker_kwargs, ledger=ManagedLedgerConfig(**ledger_kwargs))
    for name in LIMIT_KEYS:
        if getattr(config, name) < 1:
            raise ValueError(f"config {name} must be >= 1, got {getattr(config, name)}")
    if config.kafka_group_min_session_timeout_ms > config.kafka_group_max_session_timeout_ms:
        raise ValueError(
            "config kafka_group_min_session_timeout_ms must not exceed "
            "kafka_group_max_session_timeout_ms"
        )
    _check_cluster_settings(config)
    for name, value in (
        ("max_open_ledger_files", config.ledger.max_open_ledger_files),
        ("entry_cache_size_bytes", config.ledger.entry_cache_size_bytes),
        ("max_pending_write_bytes", config.ledger.max_pending_write_bytes),
        ("inactive_topic_unload_s", config.inactive_topic_unload_s),
        ("max_topics_per_namespace", config.max_topics_per_namespace),
        ("kafka_group_initial_rebalance_delay_ms", config.kafka_group_initial_rebalance_delay_ms),
        ("kafka_max_produce_inflated_bytes", config.kafka_max_produce_inflated_bytes),
        ("kafka_max_groups_per_role", config.kafka_max_groups_per_role),
        ("kafka_max_group_members_per_role", config.kafka_max_group_members_per_role),
        ("default_ensemble_size", config.default_ensemble_size),
        ("default_write_quorum", config.default_write_quorum),
        ("default_ack_quorum", config.default_ack_quorum),
        ("shutdown_hand_over_timeout_s", config.shutdown_hand_over_timeout_s),
        ("load_balancer_threshold", config.load_balancer_threshold),
        ("load_balancer_min_excess", config.load_balancer_min_excess),
        ("load_balancer_move_cooldown_s", config.load_balancer_move_cooldown_s),
        ("load_balancer_max_copies_per_broker", config.load_balancer_max_copies_per_broker),
        ("replication_grace_period_s", config.replication_grace_period_s),
    ):
        if value < 0:
            raise ValueError(
                f"config {name} must be >= 0 (0: automatic/never/unlimited), got {value}"
            )
    return config


def _check_cluster_settings(config: BrokerConfig) -> None:
    from stableline.metadata import InvalidPath, layout, parse_etcd_url

    if config.metadata_store_url:
        if not config.metadata_store_url.startswith("etcd:"):
            raise ValueError(
                f"config metadata_store_url {config.metadata_store_url!r}: use "
                f"etcd://HOST:PORT[,HOST:PORT...], or leave it empty for the data dir"
            )
        parse_etcd_url(config.metadata_store_url)  # ValueError saying what is wrong
    if config.metadata_store_password and config.metadata_store_password_file:
        raise ValueError(
            "config metadata_store_password and metadata_store_password_file: give one"
        )
    if not 0 <= config.transaction_coordinator_shards <= 1024:
        raise ValueError(
            "config transaction_coordinator_shards must be 0 (automatic) to 1024, got "
            f"{config.transaction_coordinator_shards}"
        )
    try:
        layout.check_cluster_name(config.cluster_name)
    except InvalidPath as error:
        raise ValueError(f"config cluster_name: {error}") from None


def metadata_store_password(config: BrokerConfig) -> str | None:
    """The etcd password from metadata_store_password_file or metadata_store_password
    (None when neither is set); ValueError naming the file when it cannot be read."""
    if config.metadata_store_password_file:
        path = config.metadata_store_password_file
        try:
            with open(path, encoding="utf-8") as handle:
                first = handle.readline().rstrip("\r\n")
        except OSError as error:
            raise ValueError(
                f"config metadata_store_password_file: cannot read {path}: {error.strerror}"
            ) from None
        if not first:
            raise ValueError(f"config metadata_store_password_file: {path} is empty")
        return first
    return config.metadata_store_password or None


# Limits that bound a queue: each must be at least 1 (there is no "unlimited").
LIMIT_KEYS = (
    "max_message_size",
    "max_pending_publishes_per_producer",
    "max_unacked_messages_per_consumer",
    "max_unacked_messages_per_subscription",
    "max_consumers_per_subscription",
    "max_open_transactions",
    "max_open_transactions_per_client",
    "max_acks_per_transaction",
    "txn_ended_retention_s",
    "max_ended_transactions",
    "max_connections",
    "connection_idle_timeout_s",
    "max_fetch_bytes",
    "max_http_connections",
    "http_request_header_timeout_s",
    "max_connections_per_address",
    "kafka_max_connections",
    "kafka_max_connections_per_address",
    "kafka_connections_max_idle_ms",
    "connection_authentication_timeout_s",
    "rereplication_rate_bytes_per_s",
    "http_max_connections_per_address",
    "metadata_session_timeout_s",
    "kafka_max_groups",
    "kafka_max_group_members",
    "kafka_max_group_members_total",
    "kafka_max_partitions_per_request",
    "kafka_group_min_session_timeout_ms",
    "kafka_group_max_session_timeout_ms",
    "load_report_interval_s",
    "load_balancer_consecutive_reports",
    "load_balancer_max_moves_per_minute",
)
