"""Admin calls from this broker to another broker of its cluster (a topic's owner).

What a call about a partitioned topic needs from partitions other brokers own: each
partition's stats, and its deletion, asked of its owner over the owner's gRPC Admin
service, one channel per broker, kept while this broker runs.

Promises:
- A call has a deadline (the peers' call timeout). The owner's refusal comes back as
  the same error the owner raised: TopicNotFoundError for NOT_FOUND, and for
  anything else PeerCallError (gRPC UNAVAILABLE, code TopicUnavailable: retry)
  naming the owner and what it said.
- It goes over this broker's channel to the owner (peers.py), with TLS and the
  brokers' own token where security is on.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import grpc

from stableline._errors import ERROR_METADATA_KEY
from stableline._proto import admin_pb2, admin_pb2_grpc
from stableline.broker.topics.registry import TopicNotFoundError
from stableline.metadata import BrokerInfo
from stableline.topic_name import TopicName

if TYPE_CHECKING:  # peers.py maps errors through errors.py, which imports this module
    from stableline.broker.cluster.peers import Peers


class PeerCallError(Exception):
    """Another broker did not answer a call made for one of its topics; retry later."""


class PeerAdmin:
    def __init__(self, peers: Peers):
        self._peers = peers

    def _stub(self, owner: BrokerInfo) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(self._peers.channel(owner.grpc_address))

    async def topic_stats(self, owner: BrokerInfo, topic: TopicName) -> dict[str, Any]:
        """The topic's stats document, as its owner's GET .../stats answers it."""
        stub = self._stub(owner)
        try:
            reply = await stub.GetStats(
                admin_pb2.TopicRequest(topic=str(topic)),
                timeout=self._peers.timeout_s,
                metadata=self._peers.metadata,
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(owner, topic, "stats", error) from None
        return json.loads(reply.json)

    async def delete_topic(self, owner: BrokerInfo, topic: TopicName) -> None:
        stub = self._stub(owner)
        try:
            await stub.DeleteTopic(
                admin_pb2.TopicRequest(topic=str(topic)),
                timeout=self._peers.timeout_s,
                metadata=self._peers.metadata,
            )
        except grpc.aio.AioRpcError as error:
            raise _refusal(owner, topic, "deletion", error) from None


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
