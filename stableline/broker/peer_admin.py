"""Admin calls from this broker to another broker of its cluster (a topic's owner).

What a call about a partitioned topic needs from partitions other brokers own: each
partition's stats, and its deletion, asked of its owner over the owner's gRPC Admin
service, one channel per broker, kept while this broker runs.

Promises:
- A call has a deadline (`PEER_CALL_TIMEOUT_S`). The owner's refusal comes back as
  the same error the owner raised: TopicNotFoundError for NOT_FOUND, and for
  anything else PeerCallError (gRPC UNAVAILABLE, code TopicUnavailable: retry)
  naming the owner and what it said.
- Calls between brokers are not authenticated yet: a broker whose security is on
  (TLS or tokens) has no credentials to present to its peers, so it refuses such
  a call at once with PeerCallsNotSupported, naming the broker to ask directly,
  rather than send an unauthenticated request.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from stableline._errors import ERROR_METADATA_KEY
from stableline._proto import admin_pb2, admin_pb2_grpc
from stableline.broker.registry import TopicNotFoundError
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName

PEER_CALL_TIMEOUT_S = 10.0


class PeerCallError(Exception):
    """Another broker did not answer a call made for one of its topics; retry later."""


class PeerCallsNotSupported(Exception):
    """This broker cannot call its peers (security is on and brokers have no
    credentials for each other yet)."""


class PeerAdmin:
    def __init__(self, security_on: bool):
        self.security_on = security_on
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, owner: BrokerInfo, topic: TopicName) -> admin_pb2_grpc.AdminStub:
        if self.security_on:
            raise PeerCallsNotSupported(
                f"{topic} is owned by broker {owner.grpc_address}, and with security on "
                f"brokers cannot call each other yet (they have no credentials for their "
                f"peers): ask that broker directly ({owner.http_url})"
            )
        channel = self._channels.get(owner.grpc_address)
        if channel is None:
            channel = grpc.aio.insecure_channel(owner.grpc_address)
            self._channels[owner.grpc_address] = channel
        return admin_pb2_grpc.AdminStub(channel)

    async def topic_stats(self, owner: BrokerInfo, topic: TopicName) -> dict[str, Any]:
        """The topic's stats document, as its owner's GET .../stats answers it."""
        stub = self._stub(owner, topic)
        try:
            reply = await stub.GetStats(
                admin_pb2.TopicRequest(topic=str(topic)), timeout=PEER_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(owner, topic, "stats", error) from None
        return json.loads(reply.json)

    async def delete_topic(self, owner: BrokerInfo, topic: TopicName) -> None:
        stub = self._stub(owner, topic)
        try:
            await stub.DeleteTopic(
                admin_pb2.TopicRequest(topic=str(topic)), timeout=PEER_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(owner, topic, "deletion", error) from None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


def _refusal(
    owner: BrokerInfo, topic: TopicName, what: str, error: grpc.aio.AioRpcError
) -> Exception:
    details = error.details() or error.code().name
    if error.code() is grpc.StatusCode.NOT_FOUND:
        return TopicNotFoundError(details)
    code = dict(error.trailing_metadata() or ()).get(ERROR_METADATA_KEY, error.code().name)
    return PeerCallError(
        f"broker {owner.grpc_address}, which owns {topic}, did not answer its {what}: "
        f"{code}: {details}; retry later"
    )
