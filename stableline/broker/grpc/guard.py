"""A grpc.aio server interceptor: every data-plane and admin RPC passes the Guard first.

Each RPC maps to the action it needs on the topic it names: Produce -> produce;
Subscribe, Fetch, GetLastMessageId -> consume; Lookup and Admin
GetPartitionedTopicMetadata (a partition count, asked by clients before they produce
or subscribe) -> produce or consume (Pulsar's lookup right); transactions (new, end,
state) -> any authenticated role (their writes and acks go through Produce and
Subscribe, which check the topic); every other Admin RPC, and any RPC not in the
table, -> admin. The check runs
before the service sees the request (for a stream, before its first message
reaches the service), so a refused call writes nothing and creates no topic.
An allowed call runs with its caller in `CURRENT_CALLER` (caller.py): the service
checks what the role owns (a transaction is its opener's) against it. An allowed
Produce or Subscribe stream stays watched while open (grpc/open_streams.py): a revoked
grant or an expired token ends it with PERMISSION_DENIED or UNAUTHENTICATED.
Health and reflection stay open: probes and tools need no token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from stableline.broker.grpc.errors import RpcRefusal, abort, invalid
from stableline.broker.grpc.open_streams import OpenStreams
from stableline.broker.security.caller import CURRENT_CALLER
from stableline.broker.security.guard import AuthenticationFailed, Guard, NotPermitted
from stableline.broker.security.permissions import Action
from stableline.topic_name import TopicName

# Open to every caller; any other service is guarded, so one added later fails closed.
OPEN_SERVICES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


@dataclass(frozen=True, slots=True)
class Rule:
    # None: an authenticated role suffices.
    action: Action | None
    # The topic the request names, or None when it does not name one where it must.
    topic_of: Callable[[Any], str | None] | None = None
    # For streams: the message that must open it (for the error message).
    opening: str = ""


def _field(name: str, inner: str) -> Callable[[Any], str | None]:
    def topic_of(message: Any) -> str | None:
        if message.WhichOneof("request") != name:
            return None
        return getattr(getattr(message, name), inner)

    return topic_of


RULES: dict[str, Rule] = {
    "/stableline.v1.Broker/Produce": Rule(Action.PRODUCE, _field("open", "topic"), "open"),
    "/stableline.v1.Broker/Subscribe": Rule(
        Action.CONSUME, _field("subscribe", "topic"), "subscribe"
    ),
    "/stableline.v1.Broker/Fetch": Rule(Action.CONSUME, lambda r: r.topic),
    "/stableline.v1.Broker/GetLastMessageId": Rule(Action.CONSUME, lambda r: r.topic),
    "/stableline.v1.Broker/NewTransaction": Rule(None),
    "/stableline.v1.Broker/EndTransaction": Rule(None),
    "/stableline.v1.Broker/GetTransaction": Rule(None),
    "/stableline.v1.Broker/Lookup": Rule(Action.LOOKUP, lambda r: r.topic),
    # Clients read a topic's partition count before producing or subscribing
    # (Pulsar's partitioned-metadata lookup): the same right as a lookup.
    "/stableline.v1.Admin/GetPartitionedTopicMetadata": Rule(Action.LOOKUP, lambda r: r.topic),
}
ADMIN_RULE = Rule(Action.ADMIN)


def _metadata_value(metadata: Any, key: str) -> str | None:
    for name, value in metadata or ():
        if name == key:
            return value if isinstance(value, str) else value.decode()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, guard: Guard, streams: OpenStreams | None = None):
        assert guard.enabled
        self._guard = guard
        self._streams = streams

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        rule = RULES.get(method, ADMIN_RULE)
        header = _metadata_value(handler_call_details.invocation_metadata, "authorization")
        expires_at = None
        try:
            role: str | None = self._guard.authenticate(header)
            failure: RpcRefusal | None = None
            if handler.stream_stream is not None:
                expires_at = self._guard.token_expiry(header)
        except AuthenticationFailed as error:
            role = None
            failure = RpcRefusal("AuthenticationFailed", str(error))
        check = _Check(
            self._guard, rule, role, failure, method.rsplit("/", 1)[1], self._streams, expires_at
        )
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=check.unary(handler.unary_unary))
        if handler.stream_stream is not None:
            return handler._replace(stream_stream=check.streaming(handler.stream_stream))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=check.unary_streaming(handler.unary_stream))
        return handler._replace(stream_unary=check.stream_unary(handler.stream_unary))


@dataclass(frozen=True, slots=True)
class _Check:
    guard: Guard
    rule: Rule
    role: str | None
    failure: RpcRefusal | None
    method_name: str
    streams: OpenStreams | None = None
    expires_at: float | None = None

    async def verify(self, context, message: Any | None) -> TopicName | None:
        """Aborts the RPC (raising) unless the caller may make it with this message;
        returns the topic the message names (None for a rule without one)."""
        if self.failure is not None:
            await abort(context, self.failure)
        topic = None
        if self.rule.topic_of is not None:
            text = self.rule.topic_of(message) if message is not None else None
            if text is None:
                await abort(
                    context,
                    invalid(
                        f"the first message of a {self.method_name} stream must be "
                        f"{self.rule.opening!r}"
                    ),
                )
            try:
                topic = TopicName.parse(text)
            except ValueError as error:
                await abort(context, error)
        try:
            if self.rule.action is not None:
                self.guard.authorize(self.role, self.rule.action, topic)
        except NotPermitted as error:
            await abort(context, RpcRefusal("NotAuthorized", str(error)))
        assert self.role is not None
        # In the RPC's own task, before the handler runs: the handler and its tasks see it.
        CURRENT_CALLER.set(self.guard.caller(self.role))
        return topic

    def unary(self, behavior):
        async def guarded(request, context):
            await self.verify(context, request)
            return await behavior(request, context)

        return guarded

    def unary_streaming(self, behavior):
        async def guarded(request, context):
            await self.verify(context, request)
            async for response in behavior(request, context):
                yield response

        return guarded

    async def _opened(
        self, request_iterator, context
    ) -> tuple[AsyncIterator | None, TopicName | None]:
        """The stream with its first message checked and put back (None if it is
        empty), and the topic that message names."""
        if self.rule.topic_of is None:
            await self.verify(context, None)
            return request_iterator, None
        # Read the opening message even when the caller is already refused: ending the
        # call while the client still writes it would reach the client as an internal
        # error instead of this status.
        try:
            first = await anext(request_iterator)
        except StopAsyncIteration:
            return None, None
        topic = await self.verify(context, first)
        return _prepend(first, request_iterator), topic

    def streaming(self, behavior):
        async def guarded(request_iterator, context):
            requests, topic = await self._opened(request_iterator, context)
            if requests is None:
                return
            if self.streams is None or topic is None or self.rule.action is None:
                async for response in behavior(requests, context):
                    yield response
                return
            assert self.role is not None
            stream = self.streams.open(self.role, self.rule.action, topic, self.expires_at)
            responses = behavior(requests, context)
            try:
                while stream.ended_by is None:
                    # Only here may OpenStream.end cancel the task: never while gRPC
                    # writes a response (the yield), where the call would end without
                    # this status.
                    stream.in_handler = True
                    try:
                        response = await anext(responses)
                    except StopAsyncIteration:
                        break
                    finally:
                        stream.in_handler = False
                    yield response
            except asyncio.CancelledError:
                if stream.ended_by is None:
                    raise  # the client went away, or the broker is stopping
                asyncio.current_task().uncancel()
            finally:
                self.streams.close(stream)
                await responses.aclose()
            if stream.ended_by is not None:
                await abort(context, stream.ended_by)

        return guarded

    def stream_unary(self, behavior):
        async def guarded(request_iterator, context):
            requests, _topic = await self._opened(request_iterator, context)
            return await behavior(requests or _prepend(None, request_iterator), context)

        return guarded


async def _prepend(first: Any, rest: AsyncIterator) -> AsyncIterator:
    if first is not None:
        yield first
    async for item in rest:
        yield item
