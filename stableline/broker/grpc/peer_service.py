"""The Peer service: what other brokers of the cluster ask of this one for transactions
whose shard and topics are led by different brokers (cluster.proto).

Only brokers call it: with security on, its RPCs need a superuser role (the guard's
table leaves them out, so they need admin). A request made for a client names the
client's role, and the local coordinator checks it as it checks a client's own call.
Each RPC answers from this broker's own coordinators and topics, never forwarding:
a shard or topic not led here is refused NotOwner, and the caller looks again.
"""

from __future__ import annotations

from managed_ledger import TxnId
from stableline._proto import broker_pb2 as pb
from stableline._proto import cluster_pb2 as cpb
from stableline._proto import cluster_pb2_grpc
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import abort
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import BrokerParticipant


def _txn_id(message) -> TxnId:
    return TxnId(message.most_bits, message.least_bits)


def _checked_as(caller: cpb.OnBehalfOf) -> str | None:
    return caller.role if caller.checked else None


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
        return pb.NewTransactionResponse(
            txn_id=convert.txn_id_to_proto(opened.txn_id), state=opened.state.value
        )

    async def AddTopicToTransaction(self, request, context):
        try:
            txn_id = _txn_id(request.txn_id)
            coordinator = await self.coordinators.deciding(txn_id)
            coordinator.add_topic(txn_id, request.topic, _checked_as(request.caller))
        except Exception as error:
            await abort(context, error)
        return cpb.AddTopicToTransactionResponse()

    async def AddAckToTransaction(self, request, context):
        try:
            txn_id = _txn_id(request.txn_id)
            coordinator = await self.coordinators.deciding(txn_id)
            caller = _checked_as(request.caller)
            if request.check_only:
                coordinator.check_ack(txn_id, caller, request.check_count)
            else:
                coordinator.add_ack(
                    txn_id,
                    request.topic,
                    request.subscription,
                    [(m.ledger_id, m.entry_id, m.batch_index) for m in request.messages],
                    caller,
                )
        except Exception as error:
            await abort(context, error)
        return cpb.AddAckToTransactionResponse()

    async def GetTransactionState(self, request, context):
        try:
            txn_id = _txn_id(request.txn_id)
            coordinator = await self.coordinators.leading(txn_id)
            response = convert.transaction_to_proto(coordinator.get(txn_id))
            response.coordinator_low_watermark = coordinator.low_watermark
        except Exception as error:
            await abort(context, error)
        return response

    async def EndTransactionOnTopic(self, request, context):
        try:
            await self.participant.end_here(
                request.topic, _txn_id(request.txn_id), request.commit, request.low_watermark
            )
        except Exception as error:
            await abort(context, error)
        return cpb.EndTransactionOnTopicResponse()

    async def EndTransactionAcks(self, request, context):
        try:
            await self.participant.end_acks_here(
                request.topic,
                request.subscription,
                _txn_id(request.txn_id),
                [(m.ledger_id, m.entry_id, m.batch_index) for m in request.messages],
                request.commit,
            )
        except Exception as error:
            await abort(context, error)
        return cpb.EndTransactionAcksResponse()
