"""InitProducerId, AddPartitionsToTxn and EndTxn: a producer's calls on its
transaction coordinator.

InitProducerId without a transactional id gives an idempotent producer a new
producer id (epoch 0), from any broker. With one, and the other two, it is the
transactional id's coordinator (txn_coordinator.py) that answers: these requests
translate to its calls, and its refusals to the error codes each version's clients
expect (PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH below the version that
introduced it). An AddPartitionsToTxn naming a partition that does not exist is
refused for that partition (UNKNOWN_TOPIC_OR_PARTITION) and not attempted for the
others (OPERATION_NOT_ATTEMPTED), as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stableline.broker.coordinator_errors import CoordinatorUnavailableError
from stableline.broker.write_gate import BrokerFencedError
from stableline.kafka import messages as m
from stableline.kafka import messages_txn as mt
from stableline.kafka.api_base import KafkaApiBase
from stableline.kafka.codec import Reader
from stableline.kafka.txn_coordinator import KafkaTransactionCoordinator, TxnRefused
from stableline.metadata import MetadataStoreError
from txnbuffer import TooManyTransactionsError

log = logging.getLogger(__name__)

T = TypeVar("T")


def _refusal(error: Exception) -> TxnRefused | None:
    """A failure of the coordinator's own calls as a Kafka refusal (None: not one
    of those, a fault of this broker)."""
    if isinstance(error, TxnRefused):
        return error
    if isinstance(error, BrokerFencedError):
        # This broker takes no writes now: the client finds its coordinator again.
        return TxnRefused(m.ErrorCode.NOT_COORDINATOR, str(error))
    if isinstance(
        error, CoordinatorUnavailableError | TooManyTransactionsError | MetadataStoreError
    ):
        # Retried by clients after a back-off: the shard's leader comes back, other
        # transactions end, the metadata store answers again.
        return TxnRefused(m.ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
    return None


class TransactionApis(KafkaApiBase):
    HANDLES = {
        m.ApiKey.INIT_PRODUCER_ID: "_init_producer_id",
        m.ApiKey.ADD_PARTITIONS_TO_TXN: "_add_partitions_to_txn",
        m.ApiKey.END_TXN: "_end_txn",
    }

    async def _coordinate(
        self,
        call: Callable[[KafkaTransactionCoordinator], Awaitable[T]],
        header: m.RequestHeader,
        api: str,
    ) -> T | TxnRefused:
        """`call` on the transaction coordinator: its answer, or the refusal to send."""
        if self._kafka_txns is None:
            return TxnRefused(
                m.ErrorCode.COORDINATOR_NOT_AVAILABLE, "this Kafka port serves no transactions"
            )
        try:
            return await call(self._kafka_txns)
        except Exception as error:
            refused = _refusal(error)
            if refused is None:
                raise
        if refused.code is m.ErrorCode.PRODUCER_FENCED:
            refused.code = mt.fenced_error(api, header.api_version)
        log.info(
            "kafka: %s from %s refused with %s: %s",
            api,
            header.client_id,
            refused.code.name,
            refused,
        )
        return refused

    # ------------------------------------------------------------ InitProducerId

    async def _init_producer_id(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = m.read_init_producer_id(reader, version)
        if request.transactional_id is None:
            producer_id = self._producer_ids.allocate()
            return m.write_init_producer_id(version, m.ErrorCode.NONE, producer_id, 0)
        answer = await self._coordinate(
            lambda coordinator: coordinator.init_producer_id(
                request.transactional_id,
                request.transaction_timeout_ms,
                request.producer_id,
                request.producer_epoch,
            ),
            header,
            "init_producer_id",
        )
        if isinstance(answer, TxnRefused):
            return m.write_init_producer_id(version, answer.code)
        producer_id, epoch = answer
        return m.write_init_producer_id(version, m.ErrorCode.NONE, producer_id, epoch)

    # ------------------------------------------------------------ AddPartitionsToTxn

    async def _add_partitions_to_txn(self, reader: Reader, header: m.RequestHeader) -> bytes:
        version = header.api_version
        request = mt.read_add_partitions_to_txn(reader, version)
        topics: dict[str, None] = {}
        unknown: set[tuple[str, int]] = set()
        for name, partitions in request.topics:
            for partition in partitions:
                topic = await self._txn_topic(name, partition)
                if topic is None:
                    unknown.add((name, partition))
                else:
                    topics[topic] = None
        error: m.ErrorCode | None = None
        if not unknown:
            answer = await self._coordinate(
                lambda coordinator: coordinator.add_topics(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    list(topics),
                    f"kafka:{header.client_id or ''}",
                ),
                header,
                "add_partitions_to_txn",
            )
            error = answer.code if isinstance(answer, TxnRefused) else m.ErrorCode.NONE

        def code(name: str, partition: int) -> m.ErrorCode:
            if error is not None:
                return error
            if (name, partition) in unknown:
                return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return m.ErrorCode.OPERATION_NOT_ATTEMPTED

        results = [
            (name, [(partition, code(name, partition)) for partition in partitions])
            for name, partitions in request.topics
        ]
        return mt.write_add_partitions_to_txn(version, results)

    async def _txn_topic(self, kafka_name: str, partition: int) -> str | None:
        """The stableline topic of a partition added to a transaction (None: no such
        partition): the name Produce finds its batches' topic under. Not loaded
        here: in a cluster another broker may own it (the coordinator's end
        reaches it there)."""
        name = self._topic_name(kafka_name)
        if name is None or partition != 0 or not await self._registry.taken_in_cluster(name):
            return None
        return str(name)

    # ------------------------------------------------------------ EndTxn

    async def _end_txn(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = mt.read_end_txn(reader, header.api_version)

        answer = await self._coordinate(
            lambda coordinator: coordinator.end(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            ),
            header,
            "end_txn",
        )
        error = answer.code if isinstance(answer, TxnRefused) else m.ErrorCode.NONE
        return mt.write_end_txn(header.api_version, error)
