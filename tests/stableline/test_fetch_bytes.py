"""Replies are bounded in bytes: Fetch (max_bytes, capped by max_fetch_bytes) and
Subscribe frames; the first entry always goes out, so readers make progress."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

import stableline
from stableline._proto import broker_pb2, broker_pb2_grpc
from stableline.testing import BrokerProcess

MAX_FETCH_BYTES = 1024 * 1024
ENTRY = 300 * 1024  # three fit in max_fetch_bytes, a fourth does not
BIG = 2 * MAX_FETCH_BYTES  # alone past the cap


@pytest.fixture(scope="module")
def bounded(tmp_path_factory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("fetch-bytes") / "data",
        env={"STABLELINE_MAX_FETCH_BYTES": str(MAX_FETCH_BYTES)},
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


def produce(broker: BrokerProcess, topic: str, sizes: list[int]) -> None:
    with stableline.Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=1)
        for index, size in enumerate(sizes):
            producer.send(bytes([index]) * size)


def fetch(broker: BrokerProcess, topic: str, start, max_bytes: int = 0):
    with grpc.insecure_channel(
        broker.service_url, options=[("grpc.max_receive_message_length", -1)]
    ) as channel:
        return broker_pb2_grpc.BrokerStub(channel).Fetch(
            broker_pb2.FetchRequest(topic=topic, start=start, max_entries=100, max_bytes=max_bytes),
            timeout=30,
        )


def payload_bytes(response: broker_pb2.FetchResponse) -> int:
    return sum(len(entry.payload) for entry in response.entries)


def test_fetch_stops_at_max_fetch_bytes_and_continues_from_next_position(bounded):
    produce(bounded, "fetch-cap", [ENTRY] * 10)
    start = broker_pb2.Position(ledger_id=0, entry_id=0)
    counts = []
    while True:
        response = fetch(bounded, "fetch-cap", start)
        if not response.entries:
            break
        assert payload_bytes(response) <= MAX_FETCH_BYTES
        counts.append(len(response.entries))
        start = response.next_position
    assert counts == [3, 3, 3, 1]


def test_a_smaller_max_bytes_is_kept_and_a_larger_one_is_capped(bounded):
    produce(bounded, "fetch-asked", [ENTRY] * 5)
    start = broker_pb2.Position(ledger_id=0, entry_id=0)
    assert len(fetch(bounded, "fetch-asked", start, max_bytes=ENTRY + 1000).entries) == 1
    assert len(fetch(bounded, "fetch-asked", start, max_bytes=10 * MAX_FETCH_BYTES).entries) == 3


def test_an_entry_past_the_cap_comes_alone(bounded):
    produce(bounded, "fetch-big", [100, BIG, 100])
    start = broker_pb2.Position(ledger_id=0, entry_id=0)
    sizes = []
    while True:
        response = fetch(bounded, "fetch-big", start, max_bytes=1)
        if not response.entries:
            break
        sizes.append(len(response.entries))
        start = response.next_position
    assert sizes == [1, 1, 1]
    response = fetch(bounded, "fetch-big", broker_pb2.Position(ledger_id=0, entry_id=0))
    assert len(response.entries) == 1  # the big one would take the reply past the cap


def test_negative_max_bytes_is_invalid(bounded):
    produce(bounded, "fetch-negative", [10])
    with pytest.raises(grpc.RpcError) as raised:
        fetch(bounded, "fetch-negative", broker_pb2.Position(), max_bytes=-1)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_bytes" in raised.value.details()


def test_a_subscription_receives_entries_larger_than_a_frame(bounded):
    sizes = [ENTRY] * 6 + [BIG, ENTRY]
    produce(bounded, "frames", sizes)
    with stableline.Client(bounded.service_url) as client:
        consumer = client.subscribe(
            "frames", "all", initial_position=stableline.InitialPosition.Earliest
        )
        received = [consumer.receive(timeout_millis=10_000) for _ in sizes]
        assert [len(m.data()) for m in received] == sizes
        assert [m.data()[0] for m in received] == list(range(len(sizes)))


def test_frames_are_cut_by_entries_and_by_bytes_with_at_least_one_entry():
    from types import SimpleNamespace

    from stableline.broker.grpc.broker_service import _frames

    def deliveries(*sizes: int) -> list:
        return [SimpleNamespace(entry=SimpleNamespace(payload=bytes(n))) for n in sizes]

    def cut(sizes, max_entries, max_bytes) -> list[list[int]]:
        frames = _frames(deliveries(*sizes), max_entries, max_bytes)
        return [[len(d.entry.payload) for d in frame] for frame in frames]

    assert cut([10, 10, 10], 500, 100) == [[10, 10, 10]]
    assert cut([10, 10, 10], 2, 100) == [[10, 10], [10]]
    assert cut([40, 40, 40, 40], 500, 100) == [[40, 40], [40, 40]]
    assert cut([10, 500, 10], 500, 100) == [[10], [500], [10]]
