"""SIGTERM of a transaction coordinator shard's leader, over three real brokers on one
real etcd: the stopping broker hands the shard to another before it leaves, so
transactions committed in a loop meanwhile fail none, each is visible all or
nothing to READ_COMMITTED subscriptions, and the shard is led by another broker as
soon as the stopped one has exited (not a session timeout later)."""

from __future__ import annotations

import itertools
import threading

import grpc

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc
from tests.conftest import wait_until

from .conftest import Cluster, running_cluster

EARLIEST = stableline.InitialPosition.Earliest
WAIT_S = 30.0
# Commits before the stop and after it: enough that some are in flight at the stop.
COMMITS_EACH_SIDE = 20

_names = itertools.count()


def _broker_id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _topic_led_by(cluster: Cluster, broker) -> str:
    """A fresh replicated topic (3/3/2) whose owner is `broker`."""
    with grpc.insecure_channel(_broker_id(cluster.brokers[0])) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        for _ in range(100):
            topic = f"persistent://public/default/hand-over-{next(_names)}"
            admin.CreateTopic(admin_pb2.TopicRequest(topic=topic))
            if cluster.topic_leader(topic) == _broker_id(broker):
                return topic
    raise AssertionError(f"placement never chose {_broker_id(broker)}")


class CommitLoop:
    """Transactions writing one message to each topic, committed one after another
    on a thread of its own; every failure is kept."""

    def __init__(self, client: stableline.Client, topics: list[str]):
        self.client = client
        self.producers = [client.create_producer(topic) for topic in topics]
        self.committed: list[int] = []
        self.failures: list[BaseException] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="commit-loop")

    def _run(self) -> None:
        for index in itertools.count():
            if self.stopping.is_set():
                return
            try:
                txn = self.client.new_transaction(timeout_ms=60_000)
                for producer in self.producers:
                    producer.send(str(index).encode(), txn=txn)
                txn.commit()
            except Exception as error:  # counted: the test wants none
                self.failures.append(error)
                continue
            self.committed.append(index)


def test_commits_in_a_loop_fail_none_while_their_shards_leader_gets_sigterm(cluster_etcd, tmp_path):
    with running_cluster(cluster_etcd, tmp_path) as cluster:
        leader, *others = cluster.brokers
        # Topics on the brokers that stay: only the coordinator's shard moves.
        topics = [_topic_led_by(cluster, broker) for broker in others]
        # The stopping broker first: transactions are opened through it while it runs.
        seeds = ",".join(_broker_id(b) for b in cluster.brokers)
        client = stableline.Client(seeds, operation_timeout_seconds=WAIT_S)
        try:
            readers = [
                client.subscribe(topic, "committed", initial_position=EARLIEST) for topic in topics
            ]
            loop = CommitLoop(client, topics)
            shard = client.new_transaction(timeout_ms=60_000).id[0]
            assert cluster.shard_leader(shard) == _broker_id(leader)
            loop.thread.start()
            try:
                wait_until(
                    lambda: len(loop.committed) >= COMMITS_EACH_SIDE or loop.failures,
                    WAIT_S,
                    "commits before the stop",
                )
                assert leader.stop() == 0
                # Handed over before it left: no session timeout was waited out.
                new_leader = cluster.shard_leader(shard)
                assert new_leader in {_broker_id(b) for b in others}
                assert f"coordinator shard {shard}: handed over to broker" in leader.log()
                at_stop = len(loop.committed)
                wait_until(
                    lambda: len(loop.committed) >= at_stop + COMMITS_EACH_SIDE or loop.failures,
                    WAIT_S,
                    "commits after the stop",
                )
            finally:
                loop.stopping.set()
                loop.thread.join(WAIT_S)
            assert loop.failures == []
            # Every committed transaction on every topic, nothing else (none aborted).
            expected = sorted(loop.committed)
            for reader in readers:
                seen = []
                for _ in expected:
                    message = reader.receive(timeout_millis=int(WAIT_S * 1000))
                    seen.append(int(message.data()))
                    reader.acknowledge(message)
                assert seen == expected
                try:
                    extra = reader.receive(timeout_millis=300)
                except stableline.Timeout:
                    extra = None
                assert extra is None, extra.data()
        finally:
            client.close()
