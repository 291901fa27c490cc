"""Moving topics over three real brokers on one real etcd (3/3/2, the etcd default):
unload and transfer of a replicated topic under produce and consume load fail no send,
duplicate, reorder or lose nothing, and the READ_COMMITTED stable position never goes
back; a topic of one copy unloads in place and refuses a transfer; a broker stopped
with SIGTERM hands its topics over first, so a producer sending to one sees no failure.
The longest time without an acknowledged send around each move is printed (not
asserted: the machine is shared)."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner

import stableline
from stableline.cli.main import main
from stableline.topic_name import TopicName
from tests.conftest import wait_until

from .conftest import Cluster, one_copy_namespace

_topics = itertools.count()
OPERATION_TIMEOUT_S = 20.0


def _topic(namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/moving-{next(_topics)}"


def _service_url(brokers) -> str:
    return "stableline://" + ",".join(f"127.0.0.1:{b.grpc_port}" for b in brokers)


def _client(brokers) -> stableline.Client:
    return stableline.Client(_service_url(brokers), operation_timeout_seconds=OPERATION_TIMEOUT_S)


def _admin(broker, method: str, path: str) -> tuple[int, bytes]:
    """One admin call at `broker` (no redirect followed): (status, body)."""
    request = urllib.request.Request(
        broker.http_url + path, method=method, headers={"X-Stableline-Request": "test"}
    )
    opener = urllib.request.build_opener(_NoRedirects())
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _path(topic: str) -> str:
    name = TopicName.parse(topic)
    return f"/admin/v2/persistent/{name.tenant}/{name.namespace}/{name.local_name}"


class Load:
    """A producer sending unique payloads one at a time (the time of each receipt kept)
    and a READ_COMMITTED consumer acknowledging what it receives, in threads, with a
    sampler of the topic's stable position as its owner reports it."""

    def __init__(self, cluster: Cluster, topic: str):
        self.cluster, self.topic = cluster, topic
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.send_failures: list[BaseException] = []
        self.received: dict[tuple, bytes] = {}  # message id -> payload, first delivery
        self.received_order: list[bytes] = []
        self.stable_positions: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
            threading.Thread(target=self._sample, daemon=True),
        ]
        self._consumer_ready = threading.Event()

    def __enter__(self) -> Load:
        self._threads[1].start()
        assert self._consumer_ready.wait(OPERATION_TIMEOUT_S), "consumer not subscribed"
        self._threads[0].start()
        self._threads[2].start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(OPERATION_TIMEOUT_S * 2)

    def stop_producing(self) -> None:
        self._stop.set()
        self._threads[0].join(OPERATION_TIMEOUT_S * 2)

    def _produce(self) -> None:
        with _client(self.cluster.brokers) as client:
            producer = client.create_producer(self.topic)
            for n in itertools.count():
                if self._stop.is_set():
                    return
                payload = b"m-%07d" % n
                try:
                    producer.send(payload)
                except BaseException as error:  # the test fails on any
                    self.send_failures.append(error)
                    return
                self.acked.append(payload)
                self.ack_times.append(time.monotonic())

    def _consume(self) -> None:
        with _client(self.cluster.brokers) as client:
            consumer = client.subscribe(
                self.topic, "committed", initial_position=stableline.InitialPosition.Earliest
            )
            self._consumer_ready.set()
            while True:
                try:
                    message = consumer.receive(timeout_millis=500)
                except stableline.Timeout:
                    if self._stop.is_set() and len(self.received) >= len(self.acked):
                        return
                    continue
                key = tuple(message.message_id())
                if key not in self.received:
                    self.received[key] = message.data()
                    self.received_order.append(message.data())
                consumer.acknowledge(message)

    def _sample(self) -> None:
        name = TopicName.parse(self.topic)
        path = (
            f"/admin/v3/transactions/stablePosition/{name.tenant}/{name.namespace}/"
            f"{name.local_name}"
        )
        brokers = itertools.cycle(self.cluster.brokers)
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(next(brokers).http_url + path, timeout=5) as answer:
                    document = json.loads(answer.read())
            except (OSError, ValueError):
                continue  # a broker between owners, or stopped
            if document["state"] == "Ready":
                ledger, entry = document["maxReadPosition"].split(":")
                self.stable_positions.append((int(ledger), int(entry)))
            self._stop.wait(0.05)

    def gap_around(self, started: float, ended: float) -> float:
        """The longest time without a receipt from the last one before `started` to
        the first after `ended`."""
        times = self.ack_times
        before = [t for t in times if t < started]
        after = [t for t in times if t > ended]
        first = before[-1] if before else started
        last = after[0] if after else ended
        inside = [first, *(t for t in times if first < t < last), last]
        return max(b - a for a, b in itertools.pairwise(inside))

    def wait_progress(self, sends: int) -> None:
        target = len(self.acked) + sends
        wait_until(
            lambda: len(self.acked) >= target or self.send_failures,
            OPERATION_TIMEOUT_S,
            f"{sends} more acknowledged sends",
        )
        assert not self.send_failures, self.send_failures

    def check(self) -> None:
        assert not self.send_failures, self.send_failures
        wait_until(
            lambda: len(self.received) >= len(self.acked),
            OPERATION_TIMEOUT_S,
            "every acknowledged message received",
        )
        # Unique payloads in send order: nothing lost, duplicated (no payload under two
        # message ids) or reordered.
        assert self.received_order[: len(self.acked)] == self.acked
        assert len(self.received_order) == len(self.acked)
        assert self.stable_positions, "no stable position sampled"
        assert self.stable_positions == sorted(self.stable_positions), "stable position went back"


def _replication(cluster: Cluster, topic: str) -> dict:
    leader = cluster.by_id(cluster.topic_leader(topic))
    return leader.admin(_path(topic) + "/stats")["replication"]


def _other_members(cluster: Cluster, topic: str) -> list[str]:
    leader = cluster.topic_leader(topic)
    record = cluster.read_record(
        f"/stableline/ownership/{cluster.name}/topics/{topic.removeprefix('persistent://')}"
    )
    assert record is not None and len(record["ensemble"]) == 3
    return [m for m in record["ensemble"] if m != leader]


def test_unload_and_transfers_under_load_fail_lose_duplicate_and_reorder_nothing(cluster):
    topic = _topic()
    with Load(cluster, topic) as load:
        load.wait_progress(20)
        gaps = []
        for move in range(3):
            leader = cluster.topic_leader(topic)
            owner = cluster.by_id(leader)
            started = time.monotonic()
            if move == 0:
                status, body = _admin(owner, "PUT", _path(topic) + "/unload")
                assert status == 204, body
            else:
                target = _other_members(cluster, topic)[0]
                status, body = _admin(owner, "POST", _path(topic) + f"/transfer?broker={target}")
                assert status == 200, body
                assert json.loads(body) == {"broker": target}
            ended = time.monotonic()
            assert cluster.topic_leader(topic) != leader
            load.wait_progress(20)
            gaps.append(load.gap_around(started, ended))
        load.stop_producing()
        load.check()
    print(
        "longest time without an acknowledged send per move (unload, transfer, transfer): "
        + ", ".join(f"{gap * 1000:.0f} ms" for gap in gaps)
        + f"; {len(load.acked)} sends"
    )


def test_a_call_at_another_broker_is_redirected_to_the_owner(cluster):
    topic = _topic()
    with _client(cluster.brokers) as client:
        client.create_producer(topic).send(b"one")
    leader = cluster.topic_leader(topic)
    other = next(b for b in cluster.brokers if f"127.0.0.1:{b.grpc_port}" != leader)
    status, _ = _admin(other, "PUT", _path(topic) + "/unload")
    assert status == 307


def test_a_namespace_unload_at_any_broker_moves_every_topic_of_it(cluster):
    namespace = f"public/moves-{next(_topics)}"
    topics = [_topic(namespace) for _ in range(3)]
    with _client(cluster.brokers) as client:
        for topic in topics:
            client.create_producer(topic).send(b"before")
    leaders = {topic: cluster.topic_leader(topic) for topic in topics}
    status, body = _admin(cluster.brokers[0], "PUT", f"/admin/v2/namespaces/{namespace}/unload")
    assert status == 200, body
    document = json.loads(body)
    assert document["failed"] == {}
    assert set(document["unloaded"]) == set(topics)
    for topic in topics:
        assert cluster.topic_leader(topic) == document["unloaded"][topic] != leaders[topic]
    with _client(cluster.brokers) as client:
        for topic in topics:
            client.create_producer(topic).send(b"after")
            consumer = client.subscribe(
                topic, "all", initial_position=stableline.InitialPosition.Earliest
            )
            assert [consumer.receive(10_000).data() for _ in range(2)] == [b"before", b"after"]


def test_a_one_copy_topic_unloads_in_place_and_refuses_a_transfer(cluster):
    topic = _topic(one_copy_namespace(cluster.brokers[0]))
    with _client(cluster.brokers) as client:
        producer = client.create_producer(topic)
        producer.send(b"before")
        leader = cluster.topic_leader(topic)
        owner = cluster.by_id(leader)
        other = next(b for b in cluster.brokers if b is not owner)
        status, body = _admin(
            owner, "POST", _path(topic) + f"/transfer?broker=127.0.0.1:{other.grpc_port}"
        )
        assert status == 409
        assert "one copy" in json.loads(body)["reason"]
        status, body = _admin(owner, "PUT", _path(topic) + "/unload")
        assert status == 204, body
        producer.send(b"after")  # the producer follows the unload by itself
        assert cluster.topic_leader(topic) == leader
        consumer = client.subscribe(
            topic, "all", initial_position=stableline.InitialPosition.Earliest
        )
        assert [consumer.receive(10_000).data() for _ in range(2)] == [b"before", b"after"]


def test_a_broker_stopped_with_sigterm_hands_its_topic_over_and_no_send_fails(cluster):
    topic = _topic()
    with Load(cluster, topic) as load:
        load.wait_progress(20)
        leader = cluster.topic_leader(topic)
        stopping = cluster.by_id(leader)
        started = time.monotonic()
        assert stopping.stop() == 0
        ended = time.monotonic()
        try:
            new_leader = cluster.topic_leader(topic)
            assert new_leader != leader
            # Handed over by the stopping broker itself (without that, another member
            # takes it once the stopped broker's registration is gone).
            assert f"topic {topic}: handed over to broker {new_leader}" in stopping.log()
            load.wait_progress(20)
            load.stop_producing()
            load.check()
        finally:
            stopping.start()
    print(
        f"SIGTERM of the topic's leader took {ended - started:.2f} s; longest time without "
        f"an acknowledged send {load.gap_around(started, ended) * 1000:.0f} ms"
    )


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_cli_transfers_and_unloads_through_any_broker(cluster):
    namespace = f"public/cli-moves-{next(_topics)}"
    topic = _topic(namespace)
    with _client(cluster.brokers) as client:
        client.create_producer(topic).send(b"one")
    target = _other_members(cluster, topic)[0]
    # Asked of a broker that does not serve the topic: the redirect is followed.
    elsewhere = next(
        b for b in cluster.brokers if f"127.0.0.1:{b.grpc_port}" != cluster.topic_leader(topic)
    )
    output = _cli(
        "admin", "topics", "transfer", topic, "--to", target, "--admin-url", elsewhere.http_url
    )
    assert output.strip() == f"{topic} is served by {target}"
    assert cluster.topic_leader(topic) == target
    _cli("admin", "topics", "unload", topic, "--admin-url", elsewhere.http_url)
    assert cluster.topic_leader(topic) != target
    output = _cli("admin", "namespaces", "unload", namespace, "--admin-url", elsewhere.http_url)
    assert output.startswith(f"{topic}: 127.0.0.1:")


def test_a_transaction_open_across_a_move_commits_on_the_new_owner(cluster):
    topic = _topic()
    with _client(cluster.brokers) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(
            topic, "committed", initial_position=stableline.InitialPosition.Earliest
        )
        producer.send(b"plain")
        txn = client.new_transaction(timeout_ms=60_000)
        for n in range(3):
            producer.send(b"in-txn-%d" % n, txn=txn)
        leader = cluster.topic_leader(topic)
        status, body = _admin(cluster.by_id(leader), "PUT", _path(topic) + "/unload")
        assert status == 204, body
        assert cluster.topic_leader(topic) != leader
        txn.commit()
        # First deliveries, by message id: what was delivered and not acknowledged
        # before the move is delivered again by the new owner.
        first: dict[tuple, bytes] = {}
        while len(first) < 4:
            message = consumer.receive(10_000)
            first.setdefault(tuple(message.message_id()), message.data())
            consumer.acknowledge(message)
        assert list(first.values()) == [b"plain", b"in-txn-0", b"in-txn-1", b"in-txn-2"]


@pytest.mark.slow
def test_a_rolling_restart_of_every_broker_fails_no_send_and_loses_nothing(cluster):
    topic = _topic()
    with Load(cluster, topic) as load:
        load.wait_progress(20)
        for broker in cluster.brokers:
            assert broker.stop() == 0
            # Handed over before it left, not taken once its session lapsed.
            assert cluster.topic_leader(topic) != f"127.0.0.1:{broker.grpc_port}"
            broker.start()
            load.wait_progress(20)
            # As an operator does between two restarts: every copy is back first (with
            # one member away and another behind, a write has fewer than Qa copies).
            wait_until(
                lambda: _replication(cluster, topic)["underReplicated"] is False,
                OPERATION_TIMEOUT_S,
                "the restarted broker caught up",
            )
        load.stop_producing()
        load.check()
    print(f"rolling restart of 3 brokers: {len(load.acked)} sends, none failed")


def test_the_broker_a_topic_is_handed_to_takes_it_at_once_not_on_its_first_use(cluster):
    topic = _topic()
    with _client(cluster.brokers) as client:
        client.create_producer(topic).send(b"one")
    # No client is left to touch the topic: only the records watch can load it there.
    target = _other_members(cluster, topic)[0]
    owner = cluster.by_id(cluster.topic_leader(topic))
    status, body = _admin(owner, "POST", _path(topic) + f"/transfer?broker={target}")
    assert status == 200, body

    def loaded_at_target() -> bool:
        status, body = _admin(
            cluster.by_id(target), "GET", "/admin/v3/transactions/stablePositions"
        )
        return status == 200 and topic in {d["topic"] for d in json.loads(body)}

    wait_until(loaded_at_target, OPERATION_TIMEOUT_S, f"{topic} loaded on {target}")
    _, metrics = _admin(owner, "GET", "/metrics")
    assert 'stableline_topic_moves_total{result="handed_over"}' in metrics.decode()
    assert "stableline_topic_hand_over_seconds_count" in metrics.decode()
    record = cluster.read_record(
        f"/stableline/ownership/{cluster.name}/topics/{topic.removeprefix('persistent://')}"
    )
    assert record is not None and record["leader"] == target
