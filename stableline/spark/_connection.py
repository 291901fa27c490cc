"""How the driver and executors reach the broker: address, TLS and token, as a plain
value that pickles to executors; every call goes through it."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from stableline._auth import channel_credentials
from stableline._errors import from_rpc_error

RPC_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Connection:
    target: str  # host:port
    tls: bool = False
    trust_certs_file: str | None = None  # the broker's CA; system roots when None
    token: str | None = None

    def channel(self, options: list | None = None) -> grpc.Channel:
        if not self.tls:
            return grpc.insecure_channel(self.target, options=options)
        credentials = channel_credentials(self.trust_certs_file)
        return grpc.secure_channel(self.target, credentials, options=options)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def call(self, method, request, timeout_s: float = RPC_TIMEOUT_S):
        """A unary call with the token, its gRPC errors as the client's typed ones."""
        try:
            return method(request, timeout=timeout_s, metadata=self.metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None


def result(future):
    """A call started with .future(): its answer, its gRPC errors as typed ones."""
    try:
        return future.result()
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
