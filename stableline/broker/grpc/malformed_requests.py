"""Requests whose bytes do not parse get INVALID_ARGUMENT, not UNKNOWN and a traceback.

gRPC parses each request with its message's FromString before the servicer runs;
a DecodeError there (a corrupt wire format, bad UTF-8 in a string field) would
end the call with UNKNOWN and log a traceback. This interceptor parses with a
deserializer that turns such bytes into a MalformedRequest value instead, and
ends the call with INVALID_ARGUMENT (code "InvalidArgument") when one arrives:
at once for a unary request; for a request stream, the servicer sees its stream
end at the bad message, finishes what it had, and then the call ends with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from stableline.broker.grpc.errors import abort, invalid


@dataclass(frozen=True, slots=True)
class MalformedRequest:
    method: str
    reason: str

    def error_message(self) -> str:
        return f"{self.method}: the request does not parse as its message ({self.reason})"


class MalformedRequestInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        handler = handler._replace(
            request_deserializer=_tolerant(method, handler.request_deserializer)
        )
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=_unary_request(handler.unary_unary))
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=_unary_request_stream(handler.unary_stream))
        if handler.stream_unary is not None:
            return handler._replace(stream_unary=_request_stream(handler.stream_unary))
        return handler._replace(stream_stream=_request_stream_stream(handler.stream_stream))


def _tolerant(method: str, deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as error:  # DecodeError, and whatever else a parser may raise
            return MalformedRequest(method, str(error) or type(error).__name__)

    return deserialize


async def _refuse(context, request: MalformedRequest) -> None:
    await abort(context, invalid(request.error_message()))


def _unary_request(behavior):
    async def guarded(request: Any, context) -> Any:
        if isinstance(request, MalformedRequest):
            await _refuse(context, request)
        return await behavior(request, context)

    return guarded


def _unary_request_stream(behavior):
    async def guarded(request: Any, context) -> AsyncIterator[Any]:
        if isinstance(request, MalformedRequest):
            await _refuse(context, request)
        async for response in behavior(request, context):
            yield response

    return guarded


class _CheckedRequests:
    """The request stream up to its first malformed message, which it keeps."""

    def __init__(self, requests: AsyncIterator[Any]):
        self._requests = requests
        self.malformed: MalformedRequest | None = None

    def __aiter__(self) -> _CheckedRequests:
        return self

    async def __anext__(self) -> Any:
        if self.malformed is not None:
            raise StopAsyncIteration
        request = await anext(self._requests)
        if isinstance(request, MalformedRequest):
            self.malformed = request
            raise StopAsyncIteration
        return request


def _request_stream(behavior):
    async def guarded(requests: AsyncIterator[Any], context) -> Any:
        checked = _CheckedRequests(requests)
        response = await behavior(checked, context)
        if checked.malformed is not None:
            await _refuse(context, checked.malformed)
        return response

    return guarded


def _request_stream_stream(behavior):
    async def guarded(requests: AsyncIterator[Any], context) -> AsyncIterator[Any]:
        checked = _CheckedRequests(requests)
        async for response in behavior(checked, context):
            yield response
        if checked.malformed is not None:
            await _refuse(context, checked.malformed)

    return guarded
