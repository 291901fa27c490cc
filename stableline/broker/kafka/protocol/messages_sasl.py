"""The schemas of SaslHandshake (v1) and SaslAuthenticate (v0-1), from Kafka's message
specs (SaslHandshakeRequest/Response.json, SaslAuthenticateRequest/Response.json).

Only handshake v1 is served: after it every SASL token travels in a SaslAuthenticate
request (v0 would send raw tokens outside Kafka's framing). librdkafka and
kafka-python both use v1 when the broker offers it.
"""

from __future__ import annotations

from stableline.broker.kafka.protocol.codec import Reader, Writer
from stableline.broker.kafka.protocol.messages import ErrorCode


def read_sasl_handshake(reader: Reader, version: int) -> str:
    """The mechanism the client chose."""
    return reader.string()


def write_sasl_handshake(version: int, error: ErrorCode, mechanisms: list[str]) -> bytes:
    return Writer().int16(error).array(mechanisms, Writer.string).getvalue()


def read_sasl_authenticate(reader: Reader, version: int) -> bytes:
    """The client's SASL token."""
    token = reader.nullable_bytes()
    return b"" if token is None else token


def write_sasl_authenticate(
    version: int,
    error: ErrorCode,
    error_message: str | None = None,
    session_lifetime_ms: int = 0,
) -> bytes:
    writer = Writer().int16(error).string(error_message).bytes_(b"")  # no server token
    if version >= 1:
        writer.int64(session_lifetime_ms)
    return writer.getvalue()
