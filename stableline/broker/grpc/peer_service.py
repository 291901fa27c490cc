"""The Peer service: what other brokers of the cluster ask of this one for transactions
whose shard and topics are led by different brokers, and for the copies of topics
this broker keeps as a replica of their ledgers (cluster.proto).

Only brokers call it: with security on, its RPCs need a superuser role (the guard's
table leaves them out, so they need admin). A request made for a client names the
client's role, and the local coordinator checks it as it checks a client's own call.
Each RPC answers from this broker's own coordinators and topics, never forwarding:
a shard or topic not led here is refused NotOwner, and the caller looks again.
The replica calls go to ReplicaLogs (managed_ledger/replica.py), whose refusals keep
their codes (a ReplicaGap with the count held, grpc/errors.py); a replica's copy is
never one of this broker's topics (the registry does not know it), and a topic this
broker has open as its owner takes no replica call (NotReady: retry once it has let
go), so the two never write one ledger list.
The Kafka group calls go to the Kafka face's GroupOffsetsHere, once the app has
handed it over (`group_offsets`); before that, or without a Kafka port, they are
refused NotReady (the group's coordinator retries).
"""

from __future__ import annotations

from managed_ledger import Position, ReplicaLogs, SnapshotCopy
from stableline._proto import cluster_pb2 as cpb
from stableline._proto import cluster_pb2_grpc
from stableline.broker.cluster.peers import GroupOffsetCommit, GroupOffsetHold, GroupOffsetsHere
from stableline.broker.errors import BrokerError
from stableline.broker.failpoints import REPLICA_CURSORS
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import abort
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic_state import TopicState
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.ending import BrokerParticipant
from stableline.topic_name import TopicName


class NoKafkaGroupsError(BrokerError):
    """A Kafka group call to a broker whose Kafka port is not open (yet)."""

    code = "NotReady"


class OwnedHereError(BrokerError):
    """A replica call for a topic this broker has open (or is opening) as its owner."""

    code = "NotReady"


class PeerService(cluster_pb2_grpc.PeerServicer):
    def __init__(
        self,
        coordinators: Coordinators,
        participant: BrokerParticipant,
        replicas: ReplicaLogs,
        registry: TopicRegistry,
    ):
        self.coordinators = coordinators
        self.participant = participant
        self.replicas = replicas
        self.registry = registry
        self.group_offsets: GroupOffsetsHere | None = None

    async def OpenTransaction(self, request, context):
        try:
            await self.coordinators.ready.wait()
            opened = await self.coordinators.open_on_shard(
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
            await coordinator.log.flushed()
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
                await coordinator.log.flushed()
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

    # ------------------------------------------------------------ replicas

    async def ReplicateEntries(self, request, context):
        try:
            state = await self.replicas.append(
                self._replica_name(request.topic),
                request.epoch,
                request.ledger_id,
                request.first_entry_id,
                list(request.frames),
                Position(request.last_add_confirmed_ledger_id, request.last_add_confirmed_entry_id),
            )
        except Exception as error:
            await abort(context, error)
        return convert.replica_state_to_proto(state)

    async def FenceReplica(self, request, context):
        try:
            state = await self.replicas.fence(self._replica_name(request.topic), request.epoch)
        except Exception as error:
            await abort(context, error)
        return convert.replica_state_to_proto(state)

    async def ReadReplicaEntries(self, request, context):
        try:
            frames = self.replicas.read(
                self._replica_name(request.topic),
                request.ledger_id,
                request.first_entry_id,
                request.max_entries,
                request.max_bytes,
            )
        except Exception as error:
            await abort(context, error)
        return cpb.ReadReplicaEntriesResponse(frames=frames)

    async def CloseReplicaLedger(self, request, context):
        try:
            state = await self.replicas.close_ledger(
                self._replica_name(request.topic),
                request.epoch,
                request.ledger_id,
                request.last_entry_id,
            )
        except Exception as error:
            await abort(context, error)
        return convert.replica_state_to_proto(state)

    async def TrimReplica(self, request, context):
        try:
            state = await self.replicas.trim(
                self._replica_name(request.topic), request.epoch, request.below_ledger_id
            )
        except Exception as error:
            await abort(context, error)
        return convert.replica_state_to_proto(state)

    async def ReplicateCursors(self, request, context):
        try:
            if self.registry.failpoint is not None:
                await self.registry.failpoint(REPLICA_CURSORS, request.topic)
            await self.replicas.write_cursors(
                self._replica_name(request.topic),
                request.epoch,
                dict(request.states),
                list(request.deleted),
            )
        except Exception as error:
            await abort(context, error)
        return cpb.ReplicateCursorsResponse()

    async def ReadReplicaCursors(self, request, context):
        try:
            states = self.replicas.cursor_states(self._replica_name(request.topic))
        except Exception as error:
            await abort(context, error)
        return cpb.ReadReplicaCursorsResponse(states=states)

    async def ReplicateSnapshot(self, request, context):
        try:
            await self.replicas.write_snapshot(
                self._replica_name(request.topic),
                request.epoch,
                SnapshotCopy(
                    request.follows,
                    request.whole,
                    dict(request.puts),
                    tuple(request.delete_prefixes),
                ),
            )
        except Exception as error:
            await abort(context, error)
        return cpb.ReplicateSnapshotResponse()

    # ------------------------------------------------------------ Kafka groups

    def _groups(self) -> GroupOffsetsHere:
        if self.group_offsets is None:
            raise NoKafkaGroupsError("this broker's Kafka port is not open: retry")
        return self.group_offsets

    async def CommitGroupOffsets(self, request, context):
        try:
            codes = await self._groups().commit_here(
                request.group_id,
                request.read_committed,
                [
                    GroupOffsetCommit(each.topic, each.partition, each.offset, each.metadata)
                    for each in request.offsets
                ],
            )
        except Exception as error:
            await abort(context, error)
        return cpb.CommitGroupOffsetsResponse(error_codes=codes)

    async def FetchGroupOffsets(self, request, context):
        try:
            fetched = await self._groups().fetch_here(
                request.group_id, [(each.topic, each.partition) for each in request.partitions]
            )
        except Exception as error:
            await abort(context, error)
        return cpb.FetchGroupOffsetsResponse(
            offsets=[
                cpb.FetchedGroupOffset(
                    offset=each.offset, metadata=each.metadata, error_code=each.error_code
                )
                for each in fetched
            ]
        )

    async def HoldGroupOffsets(self, request, context):
        try:
            codes = await self._groups().hold_here(
                request.group_id,
                request.read_committed,
                convert.txn_id(request.txn_id),
                [
                    GroupOffsetHold(each.topic, each.partition, each.offset, each.held_from)
                    for each in request.holds
                ],
            )
        except Exception as error:
            await abort(context, error)
        return cpb.HoldGroupOffsetsResponse(error_codes=codes)

    def _replica_name(self, topic: str) -> str:
        """The name the copy is kept under (the one its owner's ManagedLedger uses);
        refused while this broker has the topic open as its owner."""
        name = TopicName.parse(topic)
        if self.registry.state(name) is not TopicState.UNLOADED:
            raise OwnedHereError(
                f"{name} is open on this broker as its owner; it keeps no replica of it "
                "until it lets go: retry"
            )
        return name.storage_name
