"""Calls from this broker to the other brokers of its cluster (the Peer service).

One gRPC channel per peer, made on first use and kept; TLS and a bearer token when
the cluster's security asks for them (PeerCredentials: the brokers' own role, a
superuser, as Pulsar's brokerClientAuthentication). A failed call raises a
BrokerError carrying the peer's own status and error code, so a refusal made by the
peer (TransactionEnded, NotAuthorized, ...) reaches this broker's client unchanged;
a peer that cannot be reached raises UNAVAILABLE naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from stableline._proto import cluster_pb2_grpc
from stableline.broker.grpc.errors import ERROR_METADATA_KEY, BrokerError

# A peer call waits this long; callers that must get through (a decided transaction's
# end) retry with their own backoff.
PEER_CALL_TIMEOUT_S = 10.0

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", -1),
]


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """How this broker reaches its peers: TLS trusting `trust_certs` (PEM bytes; None:
    plaintext) and a token sent as the bearer (None: none)."""

    trust_certs: bytes | None = None
    token: str | None = None
    # Client certificate and key (PEM) for peers that require one.
    cert_chain: bytes | None = None
    private_key: bytes | None = None


class Peers:
    """This broker's channels to the other brokers, by their gRPC address."""

    def __init__(self, credentials: PeerCredentials | None = None):
        self._credentials = credentials or PeerCredentials()
        self.timeout_s = PEER_CALL_TIMEOUT_S
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, cluster_pb2_grpc.PeerStub] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        """The channel to the broker at `address` (made on first use, then kept)."""
        channel = self._channels.get(address)
        if channel is None:
            credentials = self._credentials
            if credentials.trust_certs is not None:
                channel = grpc.aio.secure_channel(
                    address,
                    grpc.ssl_channel_credentials(
                        credentials.trust_certs,
                        credentials.private_key,
                        credentials.cert_chain,
                    ),
                    options=_CHANNEL_OPTIONS,
                )
            else:
                channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
            self._channels[address] = channel
        return channel

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call to a peer sends: this broker's bearer token, if any."""
        token = self._credentials.token
        return (("authorization", f"Bearer {token}"),) if token else ()

    def _stub(self, address: str) -> cluster_pb2_grpc.PeerStub:
        stub = self._stubs.get(address)
        if stub is None:
            stub = self._stubs[address] = cluster_pb2_grpc.PeerStub(self.channel(address))
        return stub

    async def call(
        self,
        address: str,
        method: Callable[[cluster_pb2_grpc.PeerStub], Any],
        request: Any,
        timeout_s: float = PEER_CALL_TIMEOUT_S,
    ) -> Any:
        """`method(stub)(request)` on the peer at `address`; BrokerError on failure."""
        try:
            return await method(self._stub(address))(
                request, timeout=timeout_s, metadata=self.metadata
            )
        except grpc.aio.AioRpcError as error:
            raise peer_error(address, error) from None

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            with contextlib.suppress(Exception):
                await asyncio.shield(channel.close())


def peer_error(address: str, error: grpc.aio.AioRpcError) -> BrokerError:
    """The peer's refusal as this broker's own error: same status, same code."""
    code = ""
    for key, value in error.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY:
            code = value
    if code:
        return BrokerError(error.code(), code, error.details() or code)
    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return BrokerError(
            grpc.StatusCode.UNAVAILABLE,
            "BrokerUnavailable",
            f"broker {address} did not answer ({error.code().name}: {error.details()}); "
            "retry once it is back",
        )
    return BrokerError(
        grpc.StatusCode.INTERNAL,
        "Internal",
        f"broker {address} failed the call ({error.code().name}: {error.details()})",
    )
