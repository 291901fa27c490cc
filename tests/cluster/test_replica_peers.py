"""The replica calls of the Peer service on three real brokers with TLS and tokens: a
broker, with the brokers' own credentials, keeps a copy of a topic on another and is
refused as a replica refuses (stale epoch, gap with the count held, damaged frame,
closed ledger); a client's role is refused the calls; a copy never makes the topic
one of the replica's own."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import zlib

import grpc
import pytest

from managed_ledger import (
    EntryHeader,
    Position,
    ReplicaCorruptEntryError,
    ReplicaFencedError,
    ReplicaGapError,
    ReplicaLedgerClosedError,
    ReplicaSnapshotMismatchError,
    ReplicaState,
    SnapshotCopy,
)
from managed_ledger.framing import encode_frame
from managed_ledger.snapshot_copy import meta_digest
from stableline._proto import cluster_pb2, cluster_pb2_grpc
from stableline.broker.cluster.peers import PeerCredentials
from stableline.broker.grpc.errors import RpcRefusal
from stableline.broker.grpc.peer_client import GrpcPeerClient
from tests.stableline.broker.security.conftest import http

from .test_security import SUPERUSER, SecureCluster, secure_cluster  # noqa: F401 (fixture)

_names = itertools.count()
NOTHING = Position(-1, -1)


def frame(i: int) -> bytes:
    header = EntryHeader(publish_time_ms=1_000 + i, sequence_id=i).stamped(i)
    return encode_frame(header.encode(), f"replicated-{i}".encode())


def peer_client(secure: SecureCluster) -> GrpcPeerClient:
    """What a broker of the cluster calls its peers with: TLS and the brokers' role."""
    return GrpcPeerClient(
        PeerCredentials(trust_certs=secure.ca_file.read_bytes(), token=secure.token(SUPERUSER))
    )


def test_a_peer_keeps_a_copy_and_is_refused_as_a_replica_refuses(
    secure_cluster: SecureCluster,  # noqa: F811
):
    replica = secure_cluster.cluster.brokers[1]
    address = f"127.0.0.1:{replica.grpc_port}"
    topic = f"persistent://public/default/copy-{next(_names)}"

    async def calls() -> None:
        client = peer_client(secure_cluster)
        try:
            assert await client.fence_replica(address, topic, 2) == ReplicaState(2, -1, 0, False)
            state = await client.replicate(address, topic, 2, 0, 0, [frame(0), frame(1)], NOTHING)
            assert state == ReplicaState(2, 0, 2, False)
            with pytest.raises(ReplicaFencedError, match=r"epoch 2.*epoch 1"):
                await client.replicate(address, topic, 1, 0, 2, [frame(2)], Position(0, 1))
            with pytest.raises(ReplicaGapError) as gap:
                await client.replicate(address, topic, 2, 0, 5, [frame(5)], Position(0, 1))
            assert gap.value.held == 2
            damaged = bytearray(frame(2))
            damaged[-1] ^= 1
            with pytest.raises(ReplicaCorruptEntryError, match="frame 0"):
                await client.replicate(address, topic, 2, 0, 2, [bytes(damaged)], Position(0, 1))
            assert await client.read_replica(address, topic, 0, 0, 10, 1 << 20) == [
                frame(0),
                frame(1),
            ]
            closed = await client.close_replica_ledger(address, topic, 3, 0, 1)
            assert closed == ReplicaState(3, 0, 2, True)
            with pytest.raises(ReplicaLedgerClosedError):
                await client.replicate(address, topic, 3, 0, 2, [frame(2)], Position(0, 1))
        finally:
            await client.close()

    asyncio.run(calls())
    # The copy is not one of the replica's topics, nor placed anywhere in the cluster.
    context = ssl.create_default_context(cafile=str(secure_cluster.ca_file))
    status, names = http(
        replica,
        "GET",
        "/admin/v2/persistent/public/default",
        secure_cluster.token(SUPERUSER),
        None,
        context,
    )
    assert status == 200 and topic not in names, names
    local = topic.removeprefix("persistent://")
    cluster = secure_cluster.cluster
    assert cluster.read_record(f"/stableline/ownership/{cluster.name}/topics/{local}") is None


def _stored(value: bytes) -> bytes:
    """A snapshot value as a transaction buffer stores it: its bytes, then their CRC32."""
    return value + zlib.crc32(value).to_bytes(4, "little")


def test_a_peer_keeps_a_snapshot_and_refuses_a_change_on_another(
    secure_cluster: SecureCluster,  # noqa: F811
):
    replica = secure_cluster.cluster.brokers[1]
    address = f"127.0.0.1:{replica.grpc_port}"
    topic = f"persistent://public/default/snapshot-{next(_names)}"
    held = {"meta": _stored(b"m1")}

    async def calls() -> None:
        client = peer_client(secure_cluster)
        try:
            await client.replicate_snapshot(address, topic, 2, SnapshotCopy(b"", True, held))
            change = SnapshotCopy(meta_digest(held["meta"]), False, {"meta": _stored(b"m2")})
            await client.replicate_snapshot(address, topic, 2, change)
            # The replica holds m2 now: a change on m1 again is refused, nothing written.
            with pytest.raises(ReplicaSnapshotMismatchError, match="whole snapshot"):
                await client.replicate_snapshot(address, topic, 2, change)
            with pytest.raises(ReplicaFencedError):
                await client.replicate_snapshot(address, topic, 1, SnapshotCopy(b"", True, held))
            damaged = {"meta": _stored(b"m3")[:-1] + b"!"}
            with pytest.raises(ReplicaCorruptEntryError, match="checksum"):
                await client.replicate_snapshot(address, topic, 2, SnapshotCopy(b"", True, damaged))
        finally:
            await client.close()

    asyncio.run(calls())


def test_a_replica_call_for_a_topic_the_broker_owns_is_refused(
    secure_cluster: SecureCluster,  # noqa: F811
):
    owner = secure_cluster.cluster.brokers[2]
    topic = f"persistent://public/default/owned-{next(_names)}"
    with secure_cluster.client("alice", owner) as alice:
        producer = alice.create_producer(topic)
        producer.send(b"kept by its owner")
        leader = secure_cluster.cluster.by_id(secure_cluster.cluster.topic_leader(topic))

        async def call() -> None:
            client = peer_client(secure_cluster)
            try:
                with pytest.raises(RpcRefusal, match="open on this broker") as refused:
                    await client.replicate(
                        f"127.0.0.1:{leader.grpc_port}", topic, 99, 0, 0, [frame(0)], NOTHING
                    )
                assert refused.value.code == "NotReady"
            finally:
                await client.close()

        asyncio.run(call())
        producer.close()


@pytest.mark.parametrize("role", ["mallory", None])
def test_a_client_is_refused_the_replica_calls(secure_cluster: SecureCluster, role):  # noqa: F811
    broker = secure_cluster.cluster.brokers[0]
    metadata = (("authorization", f"Bearer {secure_cluster.token(role)}"),) if role else ()
    with secure_cluster.channel(broker) as channel:
        stub = cluster_pb2_grpc.PeerStub(channel)
        calls = [
            (
                stub.ReplicateEntries,
                cluster_pb2.ReplicateEntriesRequest(
                    topic="persistent://public/default/forged", epoch=1, frames=[frame(0)]
                ),
            ),
            (stub.FenceReplica, cluster_pb2.FenceReplicaRequest(topic="forged", epoch=1)),
            (stub.ReadReplicaEntries, cluster_pb2.ReadReplicaEntriesRequest(topic="forged")),
            (stub.CloseReplicaLedger, cluster_pb2.CloseReplicaLedgerRequest(topic="forged")),
            (
                stub.ReplicateSnapshot,
                cluster_pb2.ReplicateSnapshotRequest(
                    topic="persistent://public/default/forged", epoch=1, whole=True
                ),
            ),
        ]
        for method, request in calls:
            with pytest.raises(grpc.RpcError) as refused:
                method(request, timeout=10, metadata=metadata)
            expected = (
                grpc.StatusCode.PERMISSION_DENIED if role else grpc.StatusCode.UNAUTHENTICATED
            )
            assert refused.value.code() == expected, method
