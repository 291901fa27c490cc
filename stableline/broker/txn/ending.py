"""The broker's side of ending a transaction: markers into topics, acks into subscriptions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from managed_ledger import Position, TxnId
from stableline.broker.cluster.ownership import NotOwnerError
from stableline.broker.cluster.peers import PeerClient
from stableline.broker.errors import Refusal
from stableline.broker.topics.latency import commit_timer
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.write_gate import BrokerFencedError, TopicMovingError
from stableline.broker.txn.coordinator_errors import CoordinatorUnavailableError
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.remote_acks import HeldRemoteAcks, NoRemoteAcks
from stableline.topic_name import TopicName
from txnbuffer import TransactionNotFoundError, TxnAck, TxnState

log = logging.getLogger(__name__)

T = TypeVar("T")


class BrokerParticipant:
    """Implements txnbuffer.TransactionParticipant on the topic registry: a topic owned
    here is ended here; in a cluster, one owned by another broker is ended there
    (its NotOwner answer names the owner; TopicUnavailable when it is down, and the
    coordinator's driver retries until it is back)."""

    def __init__(
        self,
        registry: TopicRegistry,
        peers: PeerClient | None = None,
        remote_acks: HeldRemoteAcks | None = None,
    ):
        self.registry = registry
        self.peers = peers
        self.remote_acks: HeldRemoteAcks = remote_acks or NoRemoteAcks()

    async def end_on_topic(
        self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        try:
            await self.end_here(topic, txn_id, commit, low_watermark)
        except NotOwnerError as error:
            if self.peers is None:
                raise
            await self.peers.end_on_topic(
                error.owner.grpc_address, topic, txn_id, commit, low_watermark
            )

    async def end_here(self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int) -> None:
        """Write the marker into `topic`, which must be owned here (else NotOwnerError)."""
        while True:
            try:
                loaded = await self.registry.get(TopicName.parse(topic), create=False)
            except TopicNotFoundError:
                log.info(
                    "transaction %s: topic %s was deleted; nothing to end there", txn_id, topic
                )
                return
            try:
                with commit_timer(commit):
                    # While this broker's writes are fenced the end waits (a decided
                    # transaction ends whatever happens; its client's call has its
                    # deadline).
                    await loaded.end_transaction_when_writable(txn_id, commit, low_watermark)
                return
            except TopicMovingError:
                # Handed to another broker: once it is, the next get names that
                # broker (NotOwnerError), or serves it here again.
                await loaded.hand_over_done()
            except BrokerFencedError:
                if not loaded.retired:
                    raise
                # Fenced after it was taken: the next get takes it again (or names
                # the broker that took it: NotOwnerError).

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        try:
            await self.end_acks_here(ack.topic, ack.subscription, txn_id, ack.message_ids, commit)
        except NotOwnerError as error:
            if self.peers is None:
                raise
            await self.peers.end_acks(error.owner.grpc_address, ack, txn_id, commit)

    async def end_acks_here(
        self,
        topic: str,
        subscription_name: str,
        txn_id: TxnId,
        message_ids: list[tuple[int, int, int]],
        commit: bool,
    ) -> None:
        """Apply the acks on a subscription of `topic`, which must be owned here."""
        try:
            loaded = await self.registry.get(TopicName.parse(topic), create=False)
        except TopicNotFoundError:
            return
        await loaded.write_gate.wait_open()
        loaded.write_gate.admit(loaded.name)  # fenced again meanwhile: the coordinator retries
        subscription = loaded.subscriptions.get(subscription_name)
        if subscription is None:
            return  # unsubscribed meanwhile: nothing left to acknowledge
        ids = [
            (Position(ledger_id, entry_id), batch_index)
            for ledger_id, entry_id, batch_index in message_ids
        ]
        subscription.end_transaction_acks(txn_id, ids, commit)
        if commit:
            # Durable before the coordinator logs the transaction complete (and so
            # never drives it again): a commit's acks survive a kill -9 right after.
            await subscription.cursor.persist()
        self.remote_acks.forget(topic, subscription_name, txn_id)


# Waits between asks of a coordinator shard's leader that did not answer.
_SETTLE_BACKOFF_S = (0.1, 5.0)


async def settle_leftovers(topic: Topic, coordinators: Coordinators) -> None:
    """After a topic's buffer recovered: settle the transactions it sees as ongoing
    with what their coordinators know, wherever their shards are led.

    A transaction its coordinator has decided is ended here as decided; one it has
    never heard of (its record was lost with the crash) is aborted; an open one
    is recorded as touching the topic, so its end or timeout reaches it. A leader
    that does not answer is asked again, with a growing wait, until it does.
    """
    await coordinators.ready.wait()
    settled = 0
    for txn_id in list(topic.buffer.ongoing):
        settled += await _until_answered(
            lambda txn_id=txn_id: _settle_one(topic, coordinators, txn_id),
            f"{topic.name}: cannot settle transaction {txn_id} yet",
        )
    if settled:
        log.info("%s: settled %d transactions left ongoing by the last run", topic.name, settled)


async def _until_answered(ask: Callable[[], Awaitable[T]], what: str) -> T:
    """`ask()` until the broker it needs answers (a shard's leader may be down or
    restarting), waiting longer each time."""
    delay = _SETTLE_BACKOFF_S[0]
    while True:
        try:
            return await ask()
        except (Refusal, CoordinatorUnavailableError) as error:
            log.warning("%s (%s); asking again in %.1f s", what, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _SETTLE_BACKOFF_S[1])


async def _ended_state(coordinators: Coordinators, txn_id: TxnId) -> TxnState:
    """The transaction's state; ABORTED for one its coordinator does not know."""
    try:
        state, _ = await coordinators.state_of(txn_id)
    except TransactionNotFoundError:
        return TxnState.ABORTED
    return state


async def settle_remote_acks(
    topic: Topic,
    restored: list[tuple[str, TxnId, list[tuple[int, int, int]]]],
    coordinators: Coordinators,
    remote_acks: HeldRemoteAcks,
) -> None:
    """Acks held again at a restart for transactions of shards led elsewhere: apply
    the end of those their leader has ended (or forgotten: released), leave the
    others to the end their leader will send."""
    for subscription_name, txn_id, ids in restored:
        state = await _until_answered(
            lambda txn_id=txn_id: _ended_state(coordinators, txn_id),
            f"{topic.name}: cannot settle acks of transaction {txn_id} yet",
        )
        if not state.terminal:
            continue
        await topic.write_gate.wait_open()
        topic.write_gate.admit(topic.name)
        subscription = topic.subscriptions.get(subscription_name)
        if subscription is None:
            continue
        subscription.end_transaction_acks(
            txn_id,
            [(Position(ledger, entry), batch) for ledger, entry, batch in ids],
            state.commits,
        )
        remote_acks.forget(str(topic.name), subscription_name, txn_id)


async def _settle_one(topic: Topic, coordinators: Coordinators, txn_id: TxnId) -> int:
    """Settle one leftover; 1 if it was ended here, 0 if it stays open."""
    local = coordinators.coordinator_of(txn_id)
    try:
        state, low_watermark = await coordinators.state_of(txn_id)
    except TransactionNotFoundError:
        # Unknown to its coordinator: aborted, with the watermark known (a lower one
        # than the coordinator's is safe: the buffer keeps the highest it saw).
        await topic.end_transaction_when_writable(
            txn_id, False, local.low_watermark if local is not None else 0
        )
        return 1
    if state is TxnState.OPEN:
        await coordinators.add_topic(txn_id, str(topic.name), None)
        return 0
    if state.terminal:
        await topic.end_transaction_when_writable(txn_id, state.commits, low_watermark)
        return 1
    return 0  # decided and still ending: its driver reaches this topic
