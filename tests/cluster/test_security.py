"""Security across brokers, on three real brokers with TLS, tokens and authorization
sharing one CA and one signing key: brokers call each other over TLS as a superuser
role, a client keeps its own role on every broker it is sent to, and a transaction
stays its opener's on every shard and topic, whichever broker is asked."""

from __future__ import annotations

import contextlib
import itertools
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import stableline
from stableline import AuthenticationToken
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline.broker.security.certificates import CertificateAuthority
from stableline.broker.security.tokens import create_secret_key, create_token
from stableline.testing import BrokerProcess
from tests.metadata.conftest import SHORT_SESSION_TIMEOUT_S, EtcdServer
from tests.stableline.broker.security.conftest import http

from .conftest import Cluster

SUPERUSER = "admin"
_names = itertools.count()


class SecureCluster:
    def __init__(self, cluster: Cluster, ca_file: Path, secret_key: bytes):
        self.cluster = cluster
        self.ca_file = ca_file
        self.secret_key = secret_key

    def token(self, role: str) -> str:
        return create_token(role, secret_key=self.secret_key)

    def client(self, role: str, broker: BrokerProcess) -> stableline.Client:
        return stableline.Client(
            broker.service_url,
            tls_trust_certs_file_path=self.ca_file,
            authentication=AuthenticationToken(self.token(role)),
        )

    def channel(self, broker: BrokerProcess) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(self.ca_file.read_bytes())
        return grpc.secure_channel(f"127.0.0.1:{broker.grpc_port}", credentials)

    def grant(self, role: str, actions: list[str]) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        for broker in self.cluster.brokers:
            status, body = http(
                broker,
                "POST",
                f"/admin/v2/namespaces/public/default/permissions/{role}",
                self.token(SUPERUSER),
                actions,
                context,
            )
            assert status == 204, body


@contextlib.contextmanager
def secure_brokers(
    cluster_etcd: EtcdServer, root: Path, kafka: bool = False
) -> Iterator[SecureCluster]:
    """Three brokers with TLS, tokens and authorization sharing one CA and signing key
    (with Kafka ports when `kafka`), alice and mallory granted produce and consume
    on public/default."""
    authority = CertificateAuthority("cluster CA")
    server = authority.issue_server(("localhost", "127.0.0.1"))
    files = {
        "ca.pem": authority.cert_pem,
        "broker.pem": server.cert_pem,
        "broker-key.pem": server.key_pem,
        "secret.key": create_secret_key(),
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    name = f"secure-{uuid.uuid4().hex[:12]}"
    brokers = [
        BrokerProcess(
            root / f"broker-{i}",
            extra_args=[
                *("--metadata-store", cluster_etcd.url, "--cluster", name),
                *(
                    "--tls-cert",
                    str(root / "broker.pem"),
                    "--tls-key",
                    str(root / "broker-key.pem"),
                ),
                *("--auth-token-secret-key", str(root / "secret.key")),
                *("--superuser-roles", SUPERUSER),
            ],
            env={
                "STABLELINE_METADATA_SESSION_TIMEOUT_S": str(SHORT_SESSION_TIMEOUT_S),
                # Pulsar's brokerClientTrustCertsFilePath: the CA of the brokers' certs.
                "STABLELINE_BROKER_CLIENT_TRUST_CERTS_FILE": str(root / "ca.pem"),
            },
        )
        for i in range(3)
    ]
    if kafka:
        for broker in brokers:
            broker.kafka_port = 0
    try:
        for broker in brokers:
            broker.start()
        secure = SecureCluster(
            Cluster(cluster_etcd, name, brokers), root / "ca.pem", files["secret.key"]
        )
        secure.grant("alice", ["produce", "consume"])
        secure.grant("mallory", ["produce", "consume"])
        yield secure
    finally:
        for broker in brokers:
            broker.stop()


@pytest.fixture(scope="module")
def secure_cluster(
    cluster_etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    with secure_brokers(cluster_etcd, tmp_path_factory.mktemp("secure-cluster")) as secure:
        yield secure


def _broker_id(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _topic_on_each_broker(secure: SecureCluster) -> dict[str, str]:
    """A fresh topic led by each broker, created by alice's first use through broker 0."""
    cluster = secure.cluster
    found: dict[str, str] = {}
    base = next(_names)
    with secure.client("alice", cluster.brokers[0]) as alice:
        for index in range(24):
            topic = f"persistent://public/default/sec-{base}-{index}"
            alice.create_producer(topic).close()
            found.setdefault(cluster.topic_leader(topic), topic)
            if len(found) == 3:
                return found
    raise AssertionError(f"placement did not reach every broker: {found}")


def test_a_transaction_over_every_broker_commits_for_its_opener(secure_cluster):
    topics = _topic_on_each_broker(secure_cluster)
    brokers = secure_cluster.cluster.brokers
    with secure_cluster.client("alice", brokers[1]) as alice:
        txn = alice.new_transaction(timeout_ms=60_000)
        for topic in topics.values():
            alice.create_producer(topic).send(topic.encode(), txn=txn)
        txn.commit()
        for topic in topics.values():
            consumer = alice.subscribe(
                topic, "check", initial_position=stableline.InitialPosition.Earliest
            )
            assert consumer.receive(timeout_millis=10_000).data() == topic.encode()


def test_another_role_cannot_send_into_or_end_a_transaction_on_any_broker(secure_cluster):
    cluster = secure_cluster.cluster
    topics = _topic_on_each_broker(secure_cluster)
    with secure_cluster.client("alice", cluster.brokers[0]) as alice:
        txn = alice.new_transaction(timeout_ms=60_000)
        leader = cluster.shard_leader(txn.id[0])
        proto_id = pb.TxnId(most_bits=txn.id[0], least_bits=txn.id[1])
        metadata = (("authorization", f"Bearer {secure_cluster.token('mallory')}"),)
        # A send into alice's transaction on a topic another broker owns: that broker
        # asks the shard's leader, which refuses mallory.
        remote_topic = next(t for owner, t in topics.items() if owner != leader)
        owner = cluster.by_id(cluster.topic_leader(remote_topic))
        before = alice.get_last_message_id(remote_topic)
        batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"forged")])
        requests = [
            pb.ProduceRequest(open=pb.ProducerOpen(topic=remote_topic)),
            pb.ProduceRequest(
                send=pb.ProducerSend(
                    sequence_id=0,
                    metadata=pb.EntryMetadata(num_messages=1, txn_id=proto_id),
                    payload=batch.SerializeToString(),
                )
            ),
        ]
        with secure_cluster.channel(owner) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            responses = list(stub.Produce(iter(requests), timeout=10, metadata=metadata))
        assert responses[-1].error.code == "NotAuthorized", responses
        assert alice.get_last_message_id(remote_topic) == before
        # Ending it on its leader is refused too; the transaction stays alice's.
        with secure_cluster.channel(cluster.by_id(leader)) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.EndTransaction(
                    pb.EndTransactionRequest(txn_id=proto_id, action=pb.TXN_ACTION_COMMIT),
                    timeout=10,
                    metadata=metadata,
                )
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        alice.create_producer(remote_topic).send(b"alice's", txn=txn)
        txn.commit()
        assert txn.state == "COMMITTED"


def test_the_peer_service_refuses_a_client_role(secure_cluster):
    """Only brokers (a superuser role) may speak for another role."""
    from stableline._proto import cluster_pb2, cluster_pb2_grpc

    broker = secure_cluster.cluster.brokers[0]
    with secure_cluster.channel(broker) as channel:
        stub = cluster_pb2_grpc.PeerStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.AddTopicToTransaction(
                cluster_pb2.AddTopicToTransactionRequest(
                    txn_id=pb.TxnId(most_bits=0, least_bits=1),
                    topic="persistent://public/default/x",
                    caller=cluster_pb2.OnBehalfOf(checked=False),
                ),
                timeout=10,
                metadata=(("authorization", f"Bearer {secure_cluster.token('mallory')}"),),
            )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
