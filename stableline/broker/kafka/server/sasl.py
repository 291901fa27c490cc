"""Who is on one Kafka connection: SASL/PLAIN with the broker's tokens as passwords.

With authentication on, a connection starts unauthenticated and may send only
ApiVersions and SaslHandshake (mechanism PLAIN), then SaslAuthenticate with the
PLAIN message `authzid NUL username NUL password`. The password is a token the
broker's Guard accepts (the same JWT the gRPC and HTTP ports take), bare or as
`token:<jwt>` (KoP's form); the username is not checked (any, as KoP uses it for
something else): the token alone says who calls, its `sub` is the role. A token
the Guard refuses is answered SASL_AUTHENTICATION_FAILED with the Guard's reason,
then the connection is closed, as Kafka does. Any other request before the
handshake ends the connection unanswered (Kafka's InvalidRequestException: a
client with the wrong security.protocol sees a disconnect), and so does a frame
larger than MAX_UNAUTHENTICATED_FRAME_BYTES, before it is read.

Once authenticated, the connection's requests run with its caller in
CURRENT_CALLER (the connection's own task holds it), so api_base checks each
topic's grants as the gRPC guard does, at every request: a revoked grant applies
at once. The session lasts as long as its token: SaslAuthenticate v1 tells the
client how long (KIP-368), the client may authenticate again on the same
connection (as the same role), and a request after the token expired closes the
connection.

With authentication off every connection is anonymous from the start and a
SaslHandshake is answered ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import enum
import logging
import time

from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol import messages_sasl as ms
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.security.caller import CURRENT_CALLER
from stableline.broker.security.guard import AuthenticationFailed, Guard

log = logging.getLogger(__name__)

MECHANISMS = ["PLAIN"]
# What a connection may send before it is authenticated.
BEFORE_AUTHENTICATION = frozenset({m.ApiKey.API_VERSIONS, m.ApiKey.SASL_HANDSHAKE})
SASL_APIS = frozenset({m.ApiKey.SASL_HANDSHAKE, m.ApiKey.SASL_AUTHENTICATE})
# KoP's way of writing a token as a PLAIN password.
TOKEN_PREFIX = "token:"
# The largest frame read from a connection not authenticated yet: enough for any
# handshake, so an anonymous peer cannot make the broker read a large frame
# [Kafka: sasl.server.max.receive.size, the same 512 KiB].
MAX_UNAUTHENTICATED_FRAME_BYTES = 512 * 1024


class ConnectionRefused(Exception):
    """The request may not be answered on this connection: close it."""


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    """Authentication on: nothing but ApiVersions and SaslHandshake yet."""
    AUTHENTICATE = "authenticate"
    """PLAIN chosen: the next request must be SaslAuthenticate."""
    AUTHENTICATED = "authenticated"
    """Every request is served, as the session's role (or anonymous)."""


class KafkaSession:
    """One connection's authentication. `closing`: close the connection once the
    current response is sent."""

    def __init__(self, guard: Guard | None, peer: object = None) -> None:
        self._guard = guard if guard is not None and guard.enabled else None
        self.peer = peer
        self.state = SaslState.HANDSHAKE if self._guard else SaslState.AUTHENTICATED
        self.role: str | None = None
        self.expires_at: float | None = None
        self.closing = False

    def max_frame_bytes(self, limit: int) -> int:
        """The largest frame this connection may send now, `limit` once authenticated."""
        if self.state is SaslState.AUTHENTICATED:
            return limit
        return min(limit, MAX_UNAUTHENTICATED_FRAME_BYTES)

    def admit(self, api_key: int) -> None:
        """Raises ConnectionRefused unless this connection may send `api_key` now."""
        if api_key in SASL_APIS:
            return  # their handlers answer a request out of turn
        if self.state is SaslState.AUTHENTICATED:
            if self.expires_at is not None and time.time() >= self.expires_at:
                raise ConnectionRefused(f"the token of role {self.role!r} has expired")
            return
        if self.state is SaslState.HANDSHAKE and api_key in BEFORE_AUTHENTICATION:
            return
        raise ConnectionRefused(
            f"api key {api_key} before SASL authentication (the client needs "
            f"security.protocol SASL_SSL or SASL_PLAINTEXT with mechanism PLAIN)"
        )

    def handshake(self, reader: Reader, header: m.RequestHeader) -> bytes:
        mechanism = ms.read_sasl_handshake(reader, header.api_version)
        if self._guard is None:
            return ms.write_sasl_handshake(header.api_version, m.ErrorCode.ILLEGAL_SASL_STATE, [])
        if self.state is SaslState.AUTHENTICATE:
            self.closing = True
            return ms.write_sasl_handshake(header.api_version, m.ErrorCode.ILLEGAL_SASL_STATE, [])
        if mechanism not in MECHANISMS:
            self.closing = True
            log.info("kafka: %s asked for SASL mechanism %r", self.peer, mechanism)
            return ms.write_sasl_handshake(
                header.api_version, m.ErrorCode.UNSUPPORTED_SASL_MECHANISM, MECHANISMS
            )
        # From AUTHENTICATED too: a client authenticating again (KIP-368).
        self.state = SaslState.AUTHENTICATE
        return ms.write_sasl_handshake(header.api_version, m.ErrorCode.NONE, MECHANISMS)

    def authenticate(self, reader: Reader, header: m.RequestHeader) -> bytes:
        message = ms.read_sasl_authenticate(reader, header.api_version)
        if self._guard is None or self.state is not SaslState.AUTHENTICATE:
            self.closing = True
            return ms.write_sasl_authenticate(
                header.api_version,
                m.ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate must follow a SaslHandshake for PLAIN",
            )
        try:
            role, expires_at = self._guard.authenticate_token(plain_password(message))
            if self.role is not None and role != self.role:
                raise AuthenticationFailed(
                    f"this connection is role {self.role!r}; it cannot authenticate again "
                    f"as {role!r}"
                )
        except AuthenticationFailed as error:
            self.closing = True
            log.info("kafka: SASL authentication of %s failed: %s", self.peer, error)
            return ms.write_sasl_authenticate(
                header.api_version,
                m.ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"authentication failed: {error}",
            )
        self.state = SaslState.AUTHENTICATED
        self.role, self.expires_at = role, expires_at
        # Held by the connection's task: every later request of it runs as this role.
        CURRENT_CALLER.set(self._guard.caller(role))
        lifetime_ms = 0
        if expires_at is not None:
            lifetime_ms = max(1, int((expires_at - time.time()) * 1000))
        return ms.write_sasl_authenticate(
            header.api_version, m.ErrorCode.NONE, session_lifetime_ms=lifetime_ms
        )


def plain_password(message: bytes) -> str:
    """The password of a SASL PLAIN message (RFC 4616), the `token:` prefix taken
    off; AuthenticationFailed when the message is not PLAIN's."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed(
            "the SASL PLAIN message must be authzid NUL username NUL password"
        )
    try:
        password = parts[2].decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("the SASL PLAIN password is not UTF-8") from None
    return password.removeprefix(TOKEN_PREFIX)
