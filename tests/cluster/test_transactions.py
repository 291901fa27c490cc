"""Transactions whose topics and coordinator shard live on different brokers, over three
real brokers on one real etcd: all-or-nothing on every topic at commit, nothing at
abort, acknowledgements on a fourth topic applied or given back with it, named
transactions found through any broker, and a shard that outlives its leader: kill -9
of it before or after the decision, and the broker that takes the shard over ends
the transaction from its log in etcd."""

from __future__ import annotations

import contextlib
import itertools
import threading

import grpc
import pytest

import stableline
from stableline._proto import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from tests.conftest import wait_until

from .conftest import Cluster, one_copy_namespace

EARLIEST = stableline.InitialPosition.Earliest
READ_UNCOMMITTED = stableline.IsolationLevel.READ_UNCOMMITTED
WAIT_S = 30.0

_names = itertools.count()


def _broker_id(broker) -> str:
    return f"127.0.0.1:{broker.grpc_port}"


def _topics_led_by_each(
    cluster: Cluster, per_broker: int, replicated: bool = False
) -> dict[str, list[str]]:
    """Fresh topics created through broker 0 until each broker leads `per_broker`."""
    base = next(_names)
    # One copy each unless `replicated`: most promises here are the coordinator's, for
    # topics that stay put while their broker is down (a replicated one moves on).
    namespace = "public/default" if replicated else one_copy_namespace(cluster.brokers[0])
    led: dict[str, list[str]] = {_broker_id(b): [] for b in cluster.brokers}
    with grpc.insecure_channel(_broker_id(cluster.brokers[0])) as channel:
        admin = admin_pb2_grpc.AdminStub(channel)
        # Placement evens out the leaders' counts first (a restart moved some away).
        for index in range(100 * per_broker):
            topic = f"persistent://{namespace}/txn-{base}-{index}"
            admin.CreateTopic(admin_pb2.TopicRequest(topic=topic))
            owned = led[cluster.topic_leader(topic)]
            if len(owned) < per_broker:
                owned.append(topic)
            if all(len(topics) == per_broker for topics in led.values()):
                return led
    raise AssertionError(f"placement did not reach every broker: {led}")


def _receive_all(consumer, count: int) -> list[bytes]:
    values = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=int(WAIT_S * 1000))
        values.append(message.data())
        consumer.acknowledge(message)
    return values


def _nothing_more(consumer) -> None:
    with pytest.raises(stableline.Timeout):
        consumer.receive(timeout_millis=300)


def _transaction_over_every_broker(cluster: Cluster, commit: bool) -> None:
    led = _topics_led_by_each(cluster, 2)
    client = stableline.Client(_broker_id(cluster.brokers[0]))
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        shard_leader = cluster.shard_leader(txn.id[0])
        writes = [topics[0] for topics in led.values()]
        # The acknowledged topic is owned by a broker that does not lead the shard.
        acked_topic = next(t[1] for owner, t in led.items() if owner != shard_leader)
        ack_producer = client.create_producer(acked_topic)
        for index in range(3):
            ack_producer.send(f"input-{index}".encode())
        inputs = client.subscribe(
            acked_topic,
            "work",
            consumer_type=stableline.ConsumerType.Shared,
            initial_position=EARLIEST,
        )
        committed = {t: client.subscribe(t, "rc", initial_position=EARLIEST) for t in writes}
        uncommitted = {
            t: client.subscribe(
                t, "ru", initial_position=EARLIEST, isolation_level=READ_UNCOMMITTED
            )
            for t in writes
        }
        for topic in writes:
            producer = client.create_producer(topic)
            for index in range(2):
                producer.send(f"{topic}/{index}".encode(), txn=txn)
        for _ in range(3):
            inputs.acknowledge(inputs.receive(timeout_millis=int(WAIT_S * 1000)), txn=txn)

        # Undecided: every write is durable (READ_UNCOMMITTED sees it) and none visible.
        for topic in writes:
            assert _receive_all(uncommitted[topic], 2) == [
                f"{topic}/{i}".encode() for i in range(2)
            ]
            _nothing_more(committed[topic])

        (txn.commit if commit else txn.abort)()
        for topic in writes:
            client.create_producer(topic).send(b"after")
            expected = [f"{topic}/{i}".encode() for i in range(2)] if commit else []
            assert _receive_all(committed[topic], len(expected) + 1) == [*expected, b"after"]
        if commit:
            inputs.close()
            again = client.subscribe(
                acked_topic, "work", consumer_type=stableline.ConsumerType.Shared
            )
            _nothing_more(again)
        else:
            # Given back by the abort: the broker redelivers them by itself.
            redelivered = sorted(_receive_all(inputs, 3))
            assert redelivered == [f"input-{i}".encode() for i in range(3)]
        assert txn.state == ("COMMITTED" if commit else "ABORTED")
    finally:
        client.close()


def test_a_transaction_over_topics_on_every_broker_commits_all_of_it(cluster):
    _transaction_over_every_broker(cluster, commit=True)


def test_a_transaction_over_topics_on_every_broker_aborts_all_of_it(cluster):
    _transaction_over_every_broker(cluster, commit=False)


def test_a_named_transaction_is_the_same_through_every_broker(cluster):
    name = f"named-{next(_names)}"
    opened = []
    for broker in cluster.brokers:
        with grpc.insecure_channel(_broker_id(broker)) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            response = stub.NewTransaction(
                broker_pb2.NewTransactionRequest(timeout_ms=60_000, name=name)
            )
            opened.append((response.txn_id.most_bits, response.txn_id.least_bits))
            leader = cluster.shard_leader(response.txn_id.most_bits)
            assert response.coordinator_address == ("" if leader == _broker_id(broker) else leader)
    assert len(set(opened)) == 1


def test_ending_a_transaction_on_a_broker_that_does_not_lead_its_shard_names_the_leader(cluster):
    client = stableline.Client(_broker_id(cluster.brokers[0]))
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        leader = cluster.shard_leader(txn.id[0])
        other = next(b for b in cluster.brokers if _broker_id(b) != leader)
        with grpc.insecure_channel(_broker_id(other)) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.EndTransaction(
                    broker_pb2.EndTransactionRequest(
                        txn_id=broker_pb2.TxnId(most_bits=txn.id[0], least_bits=txn.id[1]),
                        action=broker_pb2.TXN_ACTION_COMMIT,
                    )
                )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert leader in refused.value.details()
        assert txn.state == "OPEN"
        # The HTTP admin sends a question about it to the leader (307), as for topics.
        assert _transaction_status(other, txn.id) == "OPEN"
        txn.abort()
    finally:
        client.close()


def test_a_decided_commit_completes_on_every_broker_after_kill_9_of_the_shard_leader(cluster):
    """The leader decides and is killed before one topic's marker: the broker that
    takes the shard over re-drives the commit from the shard's log in etcd, without
    the killed leader; back, that one leads the shard no more."""
    led = _topics_led_by_each(cluster, 1)
    leader = cluster.brokers[0]
    leader_id = _broker_id(leader)
    remote = next(t[0] for owner, t in led.items() if owner != leader_id)
    writes = [topics[0] for topics in led.values()]
    # The leader decides, writes what markers it can, and stops before `remote`'s.
    environment = dict(leader.env)
    leader.env = {**environment, "STABLELINE_FAILPOINTS": f"txn-end-topic:{remote}"}
    leader.restart()
    leader.env = environment
    client = stableline.Client(leader_id, operation_timeout_seconds=5.0)
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        assert cluster.shard_leader(txn.id[0]) == leader_id
        for topic in writes:
            client.create_producer(topic).send(topic.encode(), txn=txn)
        committing = threading.Thread(target=_commit_quietly, args=(txn,), daemon=True)
        committing.start()
        assert leader.wait_for_event("failpoint", WAIT_S)["detail"] == remote
        leader.kill()
        committing.join(WAIT_S)
    finally:
        client.close()
    owner = cluster.by_id(cluster.topic_leader(remote))
    with stableline.Client(_broker_id(owner)) as reader_client:
        reader = reader_client.subscribe(remote, "after-kill", initial_position=EARLIEST)
        assert _receive_all(reader, 1) == [remote.encode()]
    successor = cluster.by_id(cluster.shard_leader(txn.id[0]))
    assert successor is not leader
    # The killed leader's own topic (one copy: it waits for its broker) ends last.
    assert _transaction_status(successor, txn.id) == "COMMITTING"
    leader.start()
    with stableline.Client(leader_id) as client:
        for topic in writes:
            consumer = client.subscribe(topic, "after-restart", initial_position=EARLIEST)
            assert _receive_all(consumer, 1) == [topic.encode()]
    wait_until(
        lambda: _transaction_status(successor, txn.id) == "COMMITTED",
        WAIT_S,
        "the new leader to complete the commit",
    )
    assert cluster.shard_leader(txn.id[0]) == _broker_id(successor)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_an_open_transaction_is_ended_by_the_shards_next_leader_after_kill_9(cluster, commit):
    """The shard's leader is killed with a transaction open on three brokers' topics:
    the client's end goes to the broker that took the shard over, which knows every
    topic the transaction wrote to; all of it or none of it becomes visible. The
    topics are replicated, so the killed broker's own moves on too."""
    led = _topics_led_by_each(cluster, 1, replicated=True)
    seeds = ",".join(_broker_id(b) for b in cluster.brokers)
    client = stableline.Client(seeds, operation_timeout_seconds=20.0)
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        leader = cluster.by_id(cluster.shard_leader(txn.id[0]))
        writes = [topics[0] for topics in led.values()]
        for topic in writes:
            client.create_producer(topic).send(topic.encode(), txn=txn)
        leader.kill()
        (txn.commit if commit else txn.abort)()
        assert txn.state == ("COMMITTED" if commit else "ABORTED")
        successor = cluster.by_id(cluster.shard_leader(txn.id[0]))
        assert successor is not leader
        assert _transaction_status(successor, txn.id) == txn.state
    finally:
        client.close()
    leader.start()
    with stableline.Client(seeds) as reader_client:
        for topic in writes:
            reader = reader_client.subscribe(topic, "after", initial_position=EARLIEST)
            reader_client.create_producer(topic).send(b"after")
            expected = [topic.encode()] if commit else []
            assert _receive_all(reader, len(expected) + 1) == [*expected, b"after"]


def _commit_quietly(txn) -> None:
    """Commit from a thread: it hangs at the failpoint and fails once the leader is
    killed; the leader's restart decides what happened."""
    with contextlib.suppress(stableline.StableLineError):
        txn.commit()


def _transaction_status(broker, txn_id: tuple[int, int]) -> str:
    return broker.admin(f"/admin/v3/transactions/transactionMetadata/{txn_id[0]}/{txn_id[1]}")[
        "status"
    ]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_acks_held_for_another_brokers_transaction_survive_kill_9_of_the_subscriptions_broker(
    cluster, commit
):
    led = _topics_led_by_each(cluster, 1)
    client = stableline.Client(_broker_id(cluster.brokers[0]))
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        shard_leader = cluster.shard_leader(txn.id[0])
        topic = next(t[0] for owner, t in led.items() if owner != shard_leader)
        owner = cluster.by_id(cluster.topic_leader(topic))
        producer = client.create_producer(topic)
        for index in range(3):
            producer.send(f"input-{index}".encode())
        producer.close()
        consumer = client.subscribe(
            topic,
            "work",
            consumer_type=stableline.ConsumerType.Shared,
            initial_position=EARLIEST,
        )
        for _ in range(3):
            consumer.acknowledge(consumer.receive(timeout_millis=int(WAIT_S * 1000)), txn=txn)
        consumer.close()
        owner.kill()
        owner.start()
        # Held again after the restart: no consumer gets them while the transaction is open.
        again = client.subscribe(topic, "work", consumer_type=stableline.ConsumerType.Shared)
        _nothing_more(again)
        (txn.commit if commit else txn.abort)()
        if commit:
            _nothing_more(again)
        else:
            assert sorted(_receive_all(again, 3)) == [f"input-{i}".encode() for i in range(3)]
    finally:
        client.close()


def test_a_commit_waits_out_a_killed_topic_owner_and_completes_there_after_its_restart(cluster):
    led = _topics_led_by_each(cluster, 1)
    client = stableline.Client(_broker_id(cluster.brokers[0]), operation_timeout_seconds=5.0)
    try:
        txn = client.new_transaction(timeout_ms=60_000)
        shard_leader = cluster.shard_leader(txn.id[0])
        victim_topic = next(t[0] for owner, t in led.items() if owner != shard_leader)
        victim = cluster.by_id(cluster.topic_leader(victim_topic))
        writes = [topics[0] for topics in led.values()]
        for topic in writes:
            producer = client.create_producer(topic)
            for index in range(3):
                producer.send(f"{topic}/{index}".encode(), txn=txn)
        victim.kill()
        committing = threading.Thread(target=_commit_quietly, args=(txn,), daemon=True)
        committing.start()
        # The decision is logged at once; the killed owner's marker waits for it.
        wait_until(
            lambda: _transaction_status(cluster.by_id(shard_leader), txn.id) == "COMMITTING",
            WAIT_S,
            "the commit to be decided",
        )
        victim.start()
        committing.join(WAIT_S)
    finally:
        client.close()
    with stableline.Client(_broker_id(cluster.brokers[0])) as client:
        for topic in writes:
            consumer = client.subscribe(topic, "after", initial_position=EARLIEST)
            assert _receive_all(consumer, 3) == [f"{topic}/{i}".encode() for i in range(3)]
    wait_until(
        lambda: _transaction_status(cluster.by_id(shard_leader), txn.id) == "COMMITTED",
        WAIT_S,
        "the commit to complete",
    )


def test_a_send_joining_another_brokers_transaction_keeps_its_place_in_the_stream(cluster):
    """The join is asked of the shard's leader before the entry is written; a plain
    send right after it must not be written first (its higher sequence id would make
    the transactional one a duplicate)."""
    import asyncio

    from stableline.aio import Client as AsyncClient

    led = _topics_led_by_each(cluster, 1)

    async def run() -> list[bytes]:
        async with AsyncClient(_broker_id(cluster.brokers[0])) as client:
            txn = await client.new_transaction(timeout_ms=60_000)
            shard_leader = await asyncio.to_thread(cluster.shard_leader, txn.id[0])
            topic = next(t[0] for owner, t in led.items() if owner != shard_leader)
            producer = await client.create_producer(topic, batching_max_publish_delay_ms=0)
            receipts = []
            for index in range(20):
                receipts.append(producer.send_nowait(f"txn-{index}".encode(), txn=txn))
                receipts.append(producer.send_nowait(f"plain-{index}".encode()))
            for receipt in receipts:
                await receipt
            await txn.commit()
            reader = await client.create_reader(topic, stableline.MessageId.earliest)
            return [(await reader.read_next(10_000)).data() for _ in range(40)]

    values = asyncio.run(run())
    assert sorted(values) == sorted(
        [f"txn-{i}".encode() for i in range(20)] + [f"plain-{i}".encode() for i in range(20)]
    )


def test_a_transaction_over_a_partitioned_topics_partitions_on_every_broker(cluster):
    topic = f"persistent://public/default/txn-partitioned-{next(_names)}"
    with grpc.insecure_channel(_broker_id(cluster.brokers[0])) as channel:
        admin_pb2_grpc.AdminStub(channel).CreatePartitionedTopic(
            admin_pb2.PartitionedTopicRequest(topic=topic, partitions=6)
        )
    owners = {cluster.topic_leader(f"{topic}-partition-{i}") for i in range(6)}
    # Placed on the least-loaded brokers: on all three when they lead as many topics,
    # on at least two whatever the module's earlier tests placed.
    assert len(owners) >= 2
    keys = [f"key-{i}" for i in range(24)]
    with stableline.Client(_broker_id(cluster.brokers[1])) as client:
        committed = client.subscribe(topic, "rc", initial_position=EARLIEST)
        producer = client.create_producer(topic)
        for end in ("abort", "commit"):
            txn = client.new_transaction(timeout_ms=60_000)
            for key in keys:
                producer.send(f"{end}/{key}".encode(), partition_key=key, txn=txn)
            _nothing_more(committed)
            getattr(txn, end)()
        received = sorted(_receive_all(committed, len(keys)))
        assert received == sorted(f"commit/{key}".encode() for key in keys)
        _nothing_more(committed)
