"""The Peer service: what other brokers of the cluster ask of this one for transactions
whose shard and topics are led by different brokers (cluster.proto).

Only brokers call it: with security on, its RPCs need a superuser role (the guard's
table leaves them out, so they need admin). A request made for a client names the
client's role, and the local coordinator checks it as it checks a client's own call.
Each RPC answers from this broker's own coordinators and topics, never forwarding:
a shard or topic not led here is refused NotOwner, and the caller looks again.
"""

from __future__ import annotations

from stableline._proto import cluster_pb2 as cpb
from stableline._proto import cluster_pb2_grpc
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import abort
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import BrokerParticipant


class PeerService(cluster_pb2_grpc.PeerServicer):
    def __init__(self, coordinators: Coordinators, participant: BrokerParticipant):
        self.coordinators = coordinators
        self.participant = participant

    async def OpenTransaction(self, request, context):
        try:
            await self.coordinators.ready.wait()
            opened = self.coordinators.open_on_shard(
                request.coordinator_shard,
                request.timeout_ms,
                request.name,
                request.owner,
                request.client,
            )
        except Exception as error:
            await abort(context, error)
        return convert.new_transaction_response(opened.txn_id, opened.state)

    async def AddTopicToTransaction(self, request, context):
        try:
            txn_id = convert.txn_id(request.txn_id)
            coordinator = await self.coordinators.deciding(txn_id)
            coordinator.add_topic(txn_id, request.topic, convert.checked_as(request.caller))
        except Exception as error:
            await abort(context, error)
        return cpb.AddTopicToTransactionResponse()

    async def AddAckToTransaction(self, request, context):
        try:
            txn_id = convert.txn_id(request.txn_id)
            coordinator = await self.coordinators.deciding(txn_id)
            caller = convert.checked_as(request.caller)
            if request.check_only:
                coordinator.check_ack(txn_id, caller, request.check_count)
            else:
                coordinator.add_ack(
                    txn_id,
                    request.topic,
                    request.subscription,
                    convert.acked_messages(request.messages),
                    caller,
                )
        except Exception as error:
            await abort(context, error)
        return cpb.AddAckToTransactionResponse()

    async def GetTransactionState(self, request, context):
        try:
            txn_id = convert.txn_id(request.txn_id)
            coordinator = await self.coordinators.leading(txn_id)
            response = convert.transaction_to_proto(coordinator.get(txn_id))
            response.coordinator_low_watermark = coordinator.low_watermark
        except Exception as error:
            await abort(context, error)
        return response

    async def EndTransactionOnTopic(self, request, context):
        try:
            await self.participant.end_here(
                request.topic, convert.txn_id(request.txn_id), request.commit, request.low_watermark
            )
        except Exception as error:
            await abort(context, error)
        return cpb.EndTransactionOnTopicResponse()

    async def EndTransactionAcks(self, request, context):
        try:
            await self.participant.end_acks_here(
                request.topic,
                request.subscription,
                convert.txn_id(request.txn_id),
                convert.acked_messages(request.messages),
                request.commit,
            )
        except Exception as error:
            await abort(context, error)
        return cpb.EndTransactionAcksResponse()
