"""Connection slots on the gRPC port go to authenticated callers only, and a stream
that never opens is ended after connection_idle_timeout_s."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from stableline._proto import broker_pb2, broker_pb2_grpc
from stableline.testing import BrokerProcess

from .conftest import SUPERUSER, Keys, token_args

MAX_CONNECTIONS = 2
IDLE_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def slots_broker(tmp_path_factory, keys: Keys) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("slots") / "data",
        extra_args=token_args(keys),
        env={
            "STABLELINE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            "STABLELINE_CONNECTION_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S),
        },
    )
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log()


class SilentStream:
    """A Produce stream on its own connection that sends nothing until closed."""

    def __init__(self, broker: BrokerProcess, metadata=()):
        # Its own subchannel pool: one connection (one gRPC peer) per stream.
        self.channel = grpc.insecure_channel(
            broker.service_url, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self._release = threading.Event()
        self.call = broker_pb2_grpc.BrokerStub(self.channel).Produce(
            self._nothing(), metadata=metadata
        )

    def _nothing(self) -> Iterator[broker_pb2.ProduceRequest]:
        self._release.wait()
        return
        yield

    def close(self) -> None:
        self._release.set()
        self.call.cancel()
        self.channel.close()


def superuser_status(broker: BrokerProcess, keys: Keys) -> grpc.StatusCode:
    """How a superuser's call on a fresh connection ends (the topic does not exist:
    NOT_FOUND is an answer; RESOURCE_EXHAUSTED is the broker being full)."""
    with grpc.insecure_channel(
        broker.service_url, options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
        try:
            broker_pb2_grpc.BrokerStub(channel).GetLastMessageId(
                broker_pb2.GetLastMessageIdRequest(topic="no-such-topic"),
                metadata=(("authorization", f"Bearer {keys.token(SUPERUSER)}"),),
                timeout=10,
            )
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK


def test_token_less_silent_streams_take_no_slot_and_end_after_the_idle_timeout(slots_broker, keys):
    streams = [SilentStream(slots_broker) for _ in range(MAX_CONNECTIONS * 3)]
    try:
        # Each stream has reached the broker: its HTTP/2 stream is open.
        for stream in streams:
            grpc.channel_ready_future(stream.channel).result(timeout=10)
        assert superuser_status(slots_broker, keys) == grpc.StatusCode.NOT_FOUND
        for stream in streams:
            # code() waits for the end; the broker ends it (well within 4x the timeout).
            assert stream.call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "connection_idle_timeout_s" in stream.call.details()
        assert superuser_status(slots_broker, keys) == grpc.StatusCode.NOT_FOUND
    finally:
        for stream in streams:
            stream.close()


def test_an_authenticated_stream_that_never_opens_is_ended_and_not_counted(slots_broker, keys):
    metadata = (("authorization", f"Bearer {keys.token(SUPERUSER)}"),)
    streams = [SilentStream(slots_broker, metadata) for _ in range(MAX_CONNECTIONS + 1)]
    try:
        for stream in streams:
            grpc.channel_ready_future(stream.channel).result(timeout=10)
        assert superuser_status(slots_broker, keys) == grpc.StatusCode.NOT_FOUND
        for stream in streams:
            assert stream.call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        for stream in streams:
            stream.close()
