"""The Produce and Subscribe streams open on the broker, re-checked while they last.

A stream is checked when it opens; a grant revoked or a token expiring later
must not leave it working. Every change of grants re-checks each open stream's
role against its topic, and every `authentication_refresh_check_seconds` (Pulsar's
authenticationRefreshCheckSeconds) the streams whose token has expired are found.
Either ends the stream with the status its opening would now get:
PERMISSION_DENIED (`AuthorizationError`) or UNAUTHENTICATED (`AuthenticationError`).

Ending a stream is asked from outside its task: `OpenStream.end` records why and
cancels the task only while it runs the service's handler (never while gRPC
writes a response, where a cancel would end the call without a status); the
guard (grpc/guard.py) then ends the call with the recorded error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from stableline.broker.grpc.errors import RpcRefusal
from stableline.broker.security.guard import Guard, NotPermitted
from stableline.broker.security.permissions import Action
from stableline.topic_name import TopicName

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class OpenStream:
    """One open stream: who opened it, for what, and how to end it."""

    role: str
    action: Action
    topic: TopicName
    expires_at: float | None  # the token's `exp` (None: it does not expire)
    task: asyncio.Task
    # True while the task runs the service's handler (where a cancel may land).
    in_handler: bool = False
    ended_by: RpcRefusal | None = None

    def end(self, error: RpcRefusal) -> None:
        if self.ended_by is not None:
            return
        self.ended_by = error
        if self.in_handler:
            self.task.cancel()


class OpenStreams:
    def __init__(self, guard: Guard, refresh_check_s: float):
        assert refresh_check_s > 0, refresh_check_s
        self._guard = guard
        self._refresh_check_s = refresh_check_s
        self._streams: set[OpenStream] = set()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._streams)

    def open(
        self, role: str, action: Action, topic: TopicName, expires_at: float | None
    ) -> OpenStream:
        """Watch the stream of the current task until close()."""
        task = asyncio.current_task()
        assert task is not None
        stream = OpenStream(role, action, topic, expires_at, task)
        self._streams.add(stream)
        if expires_at is not None and self._timer is None:
            self._schedule()
        return stream

    def close(self, stream: OpenStream) -> None:
        self._streams.discard(stream)

    def recheck_permissions(self) -> None:
        """End every stream whose role may no longer do what it opened the stream for."""
        for stream in list(self._streams):
            try:
                self._guard.authorize(stream.role, stream.action, stream.topic)
            except NotPermitted as error:
                log.info(
                    "ending the %s stream of role %r on %s: its grant was revoked",
                    stream.action.value,
                    stream.role,
                    stream.topic,
                )
                stream.end(
                    RpcRefusal(
                        "NotAuthorized",
                        f"{error} (the grant was revoked while the stream was open)",
                    )
                )

    def check_expiry(self, now: float | None = None) -> None:
        """End every stream whose token has expired."""
        now = time.time() if now is None else now
        for stream in list(self._streams):
            if stream.expires_at is not None and stream.expires_at <= now:
                log.info(
                    "ending the %s stream of role %r on %s: its token expired",
                    stream.action.value,
                    stream.role,
                    stream.topic,
                )
                stream.end(
                    RpcRefusal(
                        "AuthenticationFailed",
                        "the token has expired; open the stream again with a fresh token",
                    )
                )

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._refresh_check_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.check_expiry()
        if any(stream.expires_at is not None for stream in self._streams):
            self._schedule()
