"""Topic lookup: which broker serves a topic, asked by a client before it connects.

Pulsar's lookup, on one broker: this broker owns every topic, so every answer names
it, at the addresses it advertises (`BrokerAddresses.advertised`: the listen hosts
with the ports bound; a wildcard host is advertised as this machine's name). The
gRPC Lookup RPC and HTTP's /lookup/v2/topic/... both ask `TopicLookup`; the cluster
will answer from its ownership records instead, and may name another broker.

Promises:
- A valid name of a topic that exists, or that the caller's first Produce or
  Subscribe would create (creation on first use, caller.may_create_on_first_use,
  with the namespace's auto topic creation policy),
  is answered with the owner's addresses, as Pulsar answers a missing topic when
  auto-creation would make it. Any other name raises TopicNotFoundError.
- A lookup creates, loads and writes nothing.
- An answer is never made before the broker has bound both its ports: a lookup in
  that moment of startup waits for them (TopicLookup.advertise).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from stableline.broker.security.caller import (
    Caller,
    may_create_on_first_use,
    not_created_on_first_use,
)
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.topic_name import TopicName

# Listen hosts that name no one address: clients are told this machine's name.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def advertised_host(listen_address: str) -> str:
    """The host clients are told for a listen address "HOST:PORT"."""
    host = listen_address.rpartition(":")[0]
    return socket.getfqdn() if host in WILDCARD_HOSTS else host


@dataclass(frozen=True, slots=True)
class BrokerAddresses:
    """Where clients reach one broker."""

    grpc_address: str  # "host:port" of the gRPC port
    http_address: str  # "host:port" of the HTTP admin port
    tls: bool  # every port speaks TLS
    kafka_address: str = ""  # "host:port" of the Kafka port; "" when it is off

    def __post_init__(self) -> None:
        assert self.grpc_address.rpartition(":")[2].isdigit(), self.grpc_address
        assert self.http_address.rpartition(":")[2].isdigit(), self.http_address
        assert not self.kafka_address or self.kafka_address.rpartition(":")[2].isdigit()

    @classmethod
    def advertised(
        cls, grpc_listen: str, grpc_port: int, http_listen: str, http_port: int, tls: bool
    ) -> BrokerAddresses:
        """The addresses of a broker listening on these addresses, bound to these ports
        (a listen port 0 became the bound one)."""
        return cls(
            f"{advertised_host(grpc_listen)}:{grpc_port}",
            f"{advertised_host(http_listen)}:{http_port}",
            tls,
        )

    @property
    def service_url(self) -> str:
        """The gRPC address as a client's service URL takes it."""
        return f"{'stableline+ssl' if self.tls else 'stableline'}://{self.grpc_address}"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.http_address}"


@dataclass(frozen=True, slots=True)
class TopicOwner:
    """A lookup's answer: the topic, and the broker serving it."""

    topic: TopicName
    broker: BrokerAddresses


class TopicLookup:
    """Answers lookups for one broker: every topic is its own."""

    def __init__(self, registry: TopicRegistry, allow_auto_topic_creation: bool):
        self._registry = registry
        self._allow_auto_topic_creation = allow_auto_topic_creation
        self._advertised: BrokerAddresses | None = None
        self._ready = asyncio.Event()

    @property
    def advertised(self) -> BrokerAddresses | None:
        """This broker's addresses; None until advertise()."""
        return self._advertised

    def advertise(self, addresses: BrokerAddresses) -> None:
        """This broker's addresses, once both its ports are bound; set once."""
        assert self._advertised is None, "a broker advertises its addresses once"
        self._advertised = addresses
        self._ready.set()

    async def owner(self, topic: TopicName, caller: Caller | None) -> TopicOwner:
        """The broker serving `topic` for this caller; TopicNotFoundError when the
        topic does not exist and the caller's first use would not create it."""
        policy = self._registry.namespace_policies.auto_topic_creation(topic.namespace_path)
        if not self._registry.exists(topic) and not may_create_on_first_use(
            caller, topic, self._allow_auto_topic_creation, policy
        ):
            raise TopicNotFoundError(not_created_on_first_use(caller, topic, policy))
        await self._ready.wait()
        assert self._advertised is not None
        # In a cluster: the record's owner, placing the topic if it has none yet
        # (the client's first use would create it on the owner).
        owner = await self._registry.placement.serving_broker(topic)
        if owner is None:
            return TopicOwner(topic, self._advertised)
        host, _, port = owner.http_url.partition("://")[2].rpartition(":")
        return TopicOwner(
            topic,
            BrokerAddresses(
                owner.grpc_address,
                f"{host}:{port}",
                owner.http_url.startswith("https"),
                owner.kafka_address,
            ),
        )
