"""The asyncio client over an in-process fake transport (Client.with_options's
channel_factory): the redirect logic above the wire, tested without a broker. Each
fake broker answers unary calls from a table of handlers and records what it was
asked; a request goes through the real serializers, as on the wire."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from stableline import aio
from stableline._errors import ERROR_METADATA_KEY
from stableline._proto import broker_pb2 as pb

Handler = Callable[[object], object]


def refusal(code: str, details: str) -> grpc.aio.AioRpcError:
    """What a broker's typed error looks like on the wire: its code in the trailers."""
    return grpc.aio.AioRpcError(
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.aio.Metadata(),
        grpc.aio.Metadata((ERROR_METADATA_KEY, code)),
        details,
    )


class FakeBroker:
    """A channel whose unary calls run `handlers[method name](request)` in process."""

    def __init__(self, address: str, calls: list[tuple[str, str]], handlers: dict[str, Handler]):
        self.address = address
        self.calls = calls
        self.handlers = handlers
        self.closed = False

    def unary_unary(self, path, request_serializer=None, response_deserializer=None, **_):
        name = path.rsplit("/", 1)[-1]

        async def call(request, timeout=None, metadata=None, **_kwargs):
            self.calls.append((self.address, name))
            wire = request_serializer(request)  # what would be sent is sendable
            handler = self.handlers.get(name)
            if handler is None:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNIMPLEMENTED, grpc.aio.Metadata(), grpc.aio.Metadata()
                )
            response = handler(type(request).FromString(wire))
            return response_deserializer(response.SerializeToString())

        return call

    def _no_streams(self, path, *args, **kwargs):
        def call(*_args, **_kwargs):
            raise AssertionError(f"the fake transport has no streams ({path})")

        return call

    unary_stream = stream_unary = stream_stream = _no_streams

    async def close(self, grace=None) -> None:
        self.closed = True


@pytest.fixture
def cluster():
    """Two fake brokers: a (the service URL's) owns nothing, b owns every topic."""
    calls: list[tuple[str, str]] = []

    def not_owner(request):
        raise refusal("NotOwner", f"{request.topic} is owned by b")

    def lookup(request):
        return pb.LookupResponse(
            topic=request.topic, action=pb.LOOKUP_ACTION_CONNECT, grpc_address="b:6650"
        )

    def last(request):
        return pb.GetLastMessageIdResponse(
            last_confirmed_entry=pb.Position(ledger_id=7, entry_id=41)
        )

    handlers = {
        "a:6650": {"GetLastMessageId": not_owner, "Lookup": lookup},
        "b:6650": {"GetLastMessageId": last, "Lookup": lookup},
    }
    brokers: dict[str, FakeBroker] = {}

    def channel_factory(address: str, tls: bool, options: aio.ClientOptions) -> FakeBroker:
        assert not tls
        brokers[address] = FakeBroker(address, calls, handlers[address])
        return brokers[address]

    return channel_factory, calls, brokers


async def test_a_not_owner_answer_is_followed_to_the_owner_and_the_owner_kept(cluster):
    channel_factory, calls, brokers = cluster
    client = aio.Client.with_options("a:6650", aio.ClientOptions(), channel_factory)
    try:
        assert await client.get_last_message_id("t") == aio.MessageId(7, 41, -1)
        assert calls == [
            ("a:6650", "GetLastMessageId"),
            ("a:6650", "Lookup"),
            ("b:6650", "GetLastMessageId"),
        ]
        calls.clear()
        assert await client.get_last_message_id("t") == aio.MessageId(7, 41, -1)
        assert calls == [("b:6650", "GetLastMessageId")]  # the owner, asked directly
    finally:
        await client.close()
    assert all(broker.closed for broker in brokers.values())


async def test_brokers_that_keep_answering_not_owner_are_given_up_on(cluster):
    channel_factory, calls, _brokers = cluster

    def elsewhere(request):
        return pb.LookupResponse(
            topic=request.topic, action=pb.LOOKUP_ACTION_CONNECT, grpc_address="a:6650"
        )

    client = aio.Client.with_options("a:6650", aio.ClientOptions(), channel_factory)
    client._connections.service._channel.handlers["Lookup"] = elsewhere
    try:
        with pytest.raises(aio.NotOwner):
            await client.get_last_message_id("t")
        lookups = [call for call in calls if call[1] == "Lookup"]
        assert len(lookups) == 3  # MAX_REDIRECTS, then the last NotOwner is the caller's
    finally:
        await client.close()
