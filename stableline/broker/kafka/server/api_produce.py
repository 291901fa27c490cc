"""Produce.

Produce appends through Topic.publish, so Kafka records meet the same
de-duplication, transaction buffer and subscriptions as SDK messages. An
idempotent producer (producer id and sequence set) is the named stableline
producer "kafka-<id>" ("kafka-<id>.<epoch>" past epoch 0, whose sequences start
again; "/<role>" after it with authentication on: producer_ids.producer_name),
and its batches follow Kafka's rule (idempotence.py): an exact retry of one of its
last five batches is answered with its first copy's offset, a gap or an older
batch is OUT_OF_ORDER_SEQUENCE_NUMBER, nothing written; a producer's first batch
on a partition must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (an id
this broker gave the sender) or UNKNOWN_PRODUCER_ID (any other). An id this
broker handed to another role is refused UNKNOWN_PRODUCER_ID.

A transactional batch is appended into its producer's current stableline
transaction (txn_coordinator.py names it: the transactional id's
producer id and epoch, for a topic added to the transaction), so its records are
visible to READ_COMMITTED readers only once that transaction commits; a fenced
epoch is refused with INVALID_PRODUCER_EPOCH, a topic not added with
INVALID_TXN_STATE, and a batch claiming to be a control batch with INVALID_RECORD
(markers are written by transaction ends alone). A Produce the broker's write
gate refuses (a cluster broker fenced: topics/write_gate.py) answers
NOT_LEADER_OR_FOLLOWER, which Kafka producers retry.

What a batch must be (its size as sent, a data entry counting its messages) is
checked by topics/sends.py, as for the gRPC face.

A Produce is decoded whole before any of it is written, under one
InflationBudget (compression.py): what its records may cost decoded, all
partitions together. Past it the request is refused whole, nothing written: each
partition not refused for a reason of its own answers MESSAGE_TOO_LARGE, and the
batches after the one that spent the budget are never inflated. Inflating and
decoding run on a small pool of threads of their own, so the event loop (other
connections, health checks) keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from managed_ledger import Position, TxnId
from managed_ledger.errors import EntryTooLargeError, ManagedLedgerError
from stableline.broker.kafka.coordinator.idempotence import (
    Decision,
    RecentBatches,
    SentBatch,
    Verdict,
    decide,
)
from stableline.broker.kafka.coordinator.producer_ids import producer_name
from stableline.broker.kafka.coordinator.txn_coordinator import TxnRefused, callers_transactional_id
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import MalformedRequest, Reader
from stableline.broker.kafka.protocol.compression import (
    InflationBudget,
    RecordsTooLarge,
    UnsupportedCompression,
)
from stableline.broker.kafka.protocol.records import CorruptBatch, RecordBatch, decode_batches
from stableline.broker.kafka.server.api_base import KafkaApiBase
from stableline.broker.kafka.server.convert import InvalidRecord, batch_to_entries
from stableline.broker.kafka.server.errors import kafka_error
from stableline.broker.security.permissions import Action
from stableline.broker.topics.sends import InvalidSendError, check_entry, check_size
from stableline.broker.topics.topic import Topic
from stableline.broker.topics.write_gate import BrokerFencedError
from txnbuffer import TransactionEndedError

log = logging.getLogger(__name__)

# A partition of a Produce once decoded: its topic and batches, or its answer.
_Decoded = m.ProducePartitionResult | tuple[Topic, list[RecordBatch]]

# Threads inflating and decoding Produce records: few, so that many connections
# decoding at once wait their turn rather than each holding a request's budget
# of decoded records (and zlib, zstd and lz4 let the event loop run meanwhile).
_DECODE_THREADS = 2
_decoding = ThreadPoolExecutor(_DECODE_THREADS, thread_name_prefix="kafka-decode")


class ProduceApis(KafkaApiBase):
    HANDLES = {m.ApiKey.PRODUCE: "_produce"}
    # The last batches of each idempotent producer (idempotence.py).
    _recent_batches: RecentBatches

    # ------------------------------------------------------------ Produce

    async def _produce(self, reader: Reader, header: m.RequestHeader) -> bytes | None:
        request = m.read_produce(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        budget = InflationBudget(self._settings.produce_inflation_budget)
        # Every partition decoded (or refused) first: nothing is written unless the
        # whole request fits its budget.
        decoded: list[tuple[str, int, _Decoded]] = []
        for topic_data in request.topics:
            for partition in topic_data.partitions:
                if request.acks not in (0, 1, -1):
                    outcome = m.ProducePartitionResult(
                        partition.index, m.ErrorCode.INVALID_REQUIRED_ACKS
                    )
                else:
                    outcome = await self._decode_partition(topic_data.name, partition, budget)
                decoded.append((topic_data.name, partition.index, outcome))
        results: dict[str, list[m.ProducePartitionResult]] = {}
        for name, index, done in decoded:
            out = results.setdefault(name, [])
            if isinstance(done, m.ProducePartitionResult):
                out.append(done)
            elif budget.exhausted:
                why = str(budget.refusal())
                out.append(
                    m.ProducePartitionResult(index, m.ErrorCode.MESSAGE_TOO_LARGE, -1, -1, why)
                )
            else:
                topic, batches = done
                out.append(
                    await self._produce_partition(index, topic, batches, request.transactional_id)
                )
        if request.acks == 0:
            return None  # Kafka sends nothing back to acks=0
        return m.write_produce(header.api_version, results)

    async def _decode_partition(
        self, kafka_name: str, partition: m.ProducePartition, budget: InflationBudget
    ) -> _Decoded:
        """The partition's topic and batches, decoded under the request's budget
        (off the event loop), or the answer refusing them. Once the budget is spent,
        nothing more is decoded."""
        index = partition.index
        topic = await self._topic(kafka_name, index, action=Action.PRODUCE)
        if isinstance(topic, m.ErrorCode):
            return m.ProducePartitionResult(index, topic)
        try:
            check_size(len(partition.records or b""), self._settings.max_message_bytes)
        except EntryTooLargeError as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.MESSAGE_TOO_LARGE, error_message=str(error)
            )
        if budget.exhausted:
            return topic, []  # answered with the request's refusal
        try:
            batches = await asyncio.get_running_loop().run_in_executor(
                _decoding,
                decode_batches,
                partition.records or b"",
                self._settings.max_records_bytes,
                budget,
            )
        except RecordsTooLarge as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.MESSAGE_TOO_LARGE, error_message=str(error)
            )
        except UnsupportedCompression as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, error_message=str(error)
            )
        except (CorruptBatch, MalformedRequest) as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.CORRUPT_MESSAGE, error_message=str(error)
            )
        return topic, batches

    async def _produce_partition(
        self,
        index: int,
        topic: Topic,
        batches: list[RecordBatch],
        transactional_id: str | None,
    ) -> m.ProducePartitionResult:
        first_offset = -1
        for batch in batches:
            if batch.control:
                return m.ProducePartitionResult(
                    index,
                    m.ErrorCode.INVALID_RECORD,
                    error_message="control batches are written by transaction ends, not producers",
                )
            if not batch.records:
                continue
            txn_id = None
            if batch.transactional:
                try:
                    txn_id = await self._transaction_of(transactional_id, batch, topic)
                except TxnRefused as refused:
                    return m.ProducePartitionResult(index, refused.code, error_message=str(refused))
            idempotent = batch.producer_id >= 0 and batch.base_sequence >= 0
            role = self._producer_role()
            name = (
                producer_name(batch.producer_id, batch.producer_epoch, role) if idempotent else ""
            )
            last_sequence = batch.base_sequence + batch.last_offset_delta
            if idempotent:
                issued_to = self._producer_ids.issued_to(batch.producer_id)
                if issued_to is not None and issued_to != role:
                    log.info(
                        "kafka: role %r sent a batch under producer id %d, handed to another role",
                        role,
                        batch.producer_id,
                    )
                    return m.ProducePartitionResult(
                        index,
                        m.ErrorCode.UNKNOWN_PRODUCER_ID,
                        error_message=f"producer id {batch.producer_id} is not this role's: "
                        "InitProducerId gives one",
                    )
                decision = await decide(
                    self._recent_batches,
                    topic,
                    name,
                    batch.base_sequence,
                    last_sequence,
                    issued=issued_to == role,
                )
                if decision.verdict is Verdict.DUPLICATE:
                    if first_offset < 0:
                        first_offset = decision.base_offset
                    continue
                if decision.verdict is Verdict.UNKNOWN_PRODUCER:
                    return m.ProducePartitionResult(
                        index,
                        m.ErrorCode.UNKNOWN_PRODUCER_ID,
                        error_message=f"no batch of producer id {batch.producer_id} here: its "
                        f"first batch has sequence 0, not {batch.base_sequence}",
                    )
                if decision.verdict is Verdict.OUT_OF_ORDER:
                    return self._out_of_order(index, decision, batch.base_sequence)
            try:
                entries = batch_to_entries(batch, name, txn_id)
                for entry in entries:
                    check_entry(entry.header, entry.header.num_messages)
            except (InvalidRecord, InvalidSendError) as error:
                return m.ProducePartitionResult(
                    index, m.ErrorCode.INVALID_RECORD, error_message=str(error)
                )
            try:
                try:
                    base = await self._append(topic, entries)
                except TransactionEndedError:
                    if txn_id is None:
                        raise
                    # Named from a record this broker had cached: read it again.
                    entries = await self._entries_in_current(
                        transactional_id, batch, topic, txn_id, name
                    )
                    base = await self._append(topic, entries)
            except TxnRefused as refused:
                return m.ProducePartitionResult(index, refused.code, error_message=str(refused))
            except (TransactionEndedError, EntryTooLargeError, BrokerFencedError) as error:
                # INVALID_PRODUCER_EPOCH, MESSAGE_TOO_LARGE, NOT_LEADER_OR_FOLLOWER
                return m.ProducePartitionResult(index, kafka_error(error), error_message=str(error))
            except ManagedLedgerError as error:  # any other failure of the write: storage
                log.warning("kafka: produce to %s failed: %s", topic.name, error)
                return m.ProducePartitionResult(
                    index, m.ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(error)
                )
            if idempotent:
                self._recent_batches.add(
                    str(topic.name), name, SentBatch(batch.base_sequence, last_sequence, base)
                )
            if first_offset < 0:
                first_offset = base
        return m.ProducePartitionResult(
            index, m.ErrorCode.NONE, first_offset, topic.ledger.offsets.start_offset()
        )

    @staticmethod
    def _out_of_order(
        index: int, decision: Decision, base_sequence: int
    ) -> m.ProducePartitionResult:
        return m.ProducePartitionResult(
            index,
            m.ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            error_message=f"expected sequence {decision.expected}, got {base_sequence} (only "
            "an exact resend of one of the producer's last 5 batches is a duplicate)",
        )

    async def _transaction_of(
        self, transactional_id: str | None, batch: RecordBatch, topic: Topic
    ) -> TxnId:
        """The stableline transaction of a transactional batch (TxnRefused: why not)."""
        if transactional_id is None or self._kafka_txns is None:
            raise TxnRefused(
                m.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "a transactional batch needs the Produce request's transactional id"
                if transactional_id is None
                else "this Kafka port serves no transactions",
            )
        return await self._kafka_txns.transaction_for(
            callers_transactional_id(transactional_id),
            batch.producer_id,
            batch.producer_epoch,
            str(topic.name),
        )

    async def _entries_in_current(
        self,
        transactional_id: str,
        batch: RecordBatch,
        topic: Topic,
        refused_txn: TxnId,
        name: str,
    ) -> list:
        """A batch's entries again, after the topic refused its transaction as ended:
        in the id's current transaction if it has moved on to another, else
        TxnRefused (the transaction ended without an EndTxn: the producer is fenced)."""
        assert self._kafka_txns is not None
        tid = callers_transactional_id(transactional_id)
        current = await self._kafka_txns.transaction_for(
            tid, batch.producer_id, batch.producer_epoch, str(topic.name), fresh=True
        )
        if current == refused_txn:
            raise self._kafka_txns.ended_refusal(tid, refused_txn)
        return batch_to_entries(batch, name, current)

    async def _append(self, topic: Topic, entries: list) -> int:
        """Append a batch's entries in order: the base offset of the first (for a
        retried batch, that of its first copy)."""
        first_base = -1
        for entry in entries:
            position, _duplicate = await topic.publish(entry.header, entry.payload)
            if first_base < 0:
                first_base = self._base_offset_at(topic, position)
        return first_base

    def _base_offset_at(self, topic: Topic, position: Position | None) -> int:
        if position is None:
            return -1  # a duplicate whose first copy retention deleted
        found = topic.ledger.read(position, 1, position)
        return topic.ledger.offsets.base_of(found[0]) if found else -1
