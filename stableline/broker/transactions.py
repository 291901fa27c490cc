"""The broker's side of ending a transaction: markers into topics, acks into subscriptions."""

from __future__ import annotations

import asyncio
import logging

from managed_ledger import Position, TxnId
from stableline.broker.latency import commit_timer
from stableline.broker.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topic import Topic
from stableline.topic_name import TopicName
from txnbuffer import TransactionCoordinator, TransactionNotFoundError, TxnAck, TxnState

log = logging.getLogger(__name__)


class BrokerParticipant:
    """Implements txnbuffer.TransactionParticipant on the topic registry."""

    def __init__(self, registry: TopicRegistry):
        self.registry = registry

    async def end_on_topic(
        self, topic: str, txn_id: TxnId, commit: bool, low_watermark: int
    ) -> None:
        try:
            loaded = await self.registry.get(TopicName.parse(topic), create=False)
        except TopicNotFoundError:
            log.info("transaction %s: topic %s was deleted; nothing to end there", txn_id, topic)
            return
        with commit_timer(commit):
            # While this broker's writes are fenced the end waits (a decided
            # transaction ends whatever happens; its client's call has its deadline).
            await loaded.end_transaction_when_writable(txn_id, commit, low_watermark)

    async def end_acks(self, ack: TxnAck, txn_id: TxnId, commit: bool) -> None:
        try:
            loaded = await self.registry.get(TopicName.parse(ack.topic), create=False)
        except TopicNotFoundError:
            return
        await loaded.write_gate.wait_open()
        loaded.write_gate.admit(loaded.name)  # fenced again meanwhile: the coordinator retries
        subscription = loaded.subscriptions.get(ack.subscription)
        if subscription is None:
            return  # unsubscribed meanwhile: nothing left to acknowledge
        ids = [
            (Position(ledger_id, entry_id), batch_index)
            for ledger_id, entry_id, batch_index in ack.message_ids
        ]
        subscription.end_transaction_acks(txn_id, ids, commit)


async def settle_leftovers(
    topic: Topic, coordinator: TransactionCoordinator, coordinator_ready: asyncio.Event
) -> None:
    """After a topic's buffer recovered: settle the transactions it sees as ongoing
    with what the coordinator knows.

    A transaction the coordinator has decided is ended here as decided; one it has
    never heard of (its record was lost with the crash) is aborted; an open one
    is recorded as touching the topic, so its end or timeout reaches it.
    """
    await coordinator_ready.wait()
    settled = 0
    for txn_id in list(topic.buffer.ongoing):
        try:
            meta = coordinator.get(txn_id)
        except TransactionNotFoundError:
            await topic.end_transaction_when_writable(txn_id, False, coordinator.low_watermark)
            settled += 1
            continue
        if meta.state is TxnState.OPEN:
            coordinator.add_topic(txn_id, str(topic.name))
        elif meta.state.terminal:
            await topic.end_transaction_when_writable(
                txn_id, meta.state.commits, coordinator.low_watermark
            )
            settled += 1
    if settled:
        log.info("%s: settled %d transactions left ongoing by the last run", topic.name, settled)
