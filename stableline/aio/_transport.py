"""Where the client meets the network: every gRPC channel the asyncio client opens is
made by one ChannelFactory, called with the broker's address, whether to use TLS, and
the client's options. The default opens a real gRPC channel; a test hands the client
(Client.with_options(..., channel_factory=...)) one that answers in process, so the
logic above the wire is tested where a real broker adds nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from stableline._auth import channel_credentials

if TYPE_CHECKING:
    from stableline.aio.options import ClientOptions

# (address, tls, options) -> a channel the generated stubs can be built on.
ChannelFactory = Callable[[str, bool, "ClientOptions"], grpc.aio.Channel]

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
    # A connection of its own per Client, as Pulsar clients have: gRPC would otherwise
    # share one between channels to the same broker, and the broker's per-connection
    # limits (max_connections, open transactions per client) would lump clients together.
    ("grpc.use_local_subchannel_pool", 1),
    # gRPC's own reconnect backoff grows to minutes by default; a restarted broker
    # should be found within about a second. Not grpc.min_reconnect_backoff_ms: gRPC
    # core takes it as the connection attempt's timeout as well (20 s by default), and
    # at 100 ms a broker on a busy machine that answers the handshake late was given
    # up on ("timed out before receiving SETTINGS frame").
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def grpc_channel(address: str, tls: bool, options: ClientOptions) -> grpc.aio.Channel:
    """A real gRPC channel to `address` (TLS with the options' certificates)."""
    if not tls:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    credentials = channel_credentials(
        options.tls_trust_certs_file_path,
        options.tls_certificate_file_path,
        options.tls_private_key_file_path,
    )
    return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
