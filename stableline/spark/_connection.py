"""How the driver and executors reach the brokers: addresses, TLS and token, as a plain
value that pickles to executors; every call goes through it.

The `service` option names one broker or several of a cluster; calls go to the
first (`target`) unless a topic's owner is known. `on_owner(topic, call)` makes a
call on the broker that owns the topic: where it is made answers it, or refuses it
with NotOwner, and then the topic is looked up on the named brokers in turn and the
call made on its owner. Standalone the first broker owns everything and no lookup
is made. The connection that answered goes into the plan, so executors read and
write on the owner directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from stableline._auth import channel_credentials
from stableline._errors import from_rpc_error
from stableline._owners import RedirectPolicy, first_answer, on_owner
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline._types import LookupResult

RPC_TIMEOUT_S = 30.0
# One redirect: a second NotOwner (the owner moved again meanwhile) is the caller's.
REDIRECTS = RedirectPolicy(max_redirects=1, past_unavailable=False)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Connection:
    target: str  # host:port of the broker called
    tls: bool = False
    trust_certs_file: str | None = None  # the broker's CA; system roots when None
    token: str | None = None
    # Every broker the service option named (target first): lookups ask them in turn.
    seeds: tuple[str, ...] = ()

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

    def to(self, address: str) -> Connection:
        """This connection's settings, for the broker at `address`."""
        return dataclasses.replace(self, target=address)

    def lookup(self, topic: str) -> Connection:
        """The connection to `topic`'s owner, asked of the named brokers in turn (the
        first that answers); a broker not reached is skipped."""

        def ask(seed: str) -> pb.LookupResponse:
            broker = self.to(seed)
            with broker.channel() as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)
                return broker.call(stub.Lookup, pb.LookupRequest(topic=topic))

        response = first_answer(self.seeds or (self.target,), ask)
        return self.to(LookupResult.from_proto(response).grpc_address)

    def any_broker(self, call: Callable[[Connection], T]) -> T:
        """`call(connection)` on the first of the named brokers that answers (one not
        reached is passed over): for what any broker of the cluster can answer, so a
        broker that is down fails no job that named others."""
        return first_answer(self.seeds or (self.target,), lambda seed: call(self.to(seed)))

    def on_owner(self, topic: str, call: Callable[[Connection], T]) -> tuple[T, Connection]:
        """`call(connection)` on the broker owning `topic`: first here, then, refused
        with NotOwner (or not reached, with other brokers named), on the owner a
        lookup names. (The answer, the connection that
        gave it.)"""
        return on_owner(
            REDIRECTS.redirects(several_seeds=False),
            self,
            call,
            lambda: self.lookup(topic),
            # A broker not reached is passed over for a lookup when another broker is
            # named that could answer it (the owner may have died and been replaced).
            owner_known=any(seed != self.target for seed in self.seeds),
        )


def result(future):
    """A call started with .future(): its answer, its gRPC errors as typed ones."""
    try:
        return future.result()
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None
