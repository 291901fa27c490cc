"""Produce and InitProducerId.

Produce appends through Topic.publish, so Kafka records meet the same
de-duplication, transaction buffer and subscriptions as SDK messages. An
idempotent producer (producer id and sequence set) is the named stableline
producer "kafka-<id>": a retried batch is found as a duplicate and answered with
its first copy's offset. A Produce the broker's write gate refuses (a cluster
broker fenced: write_gate.py) answers NOT_LEADER_OR_FOLLOWER, which Kafka
producers retry.

Transactional producers (transactional.id) are refused for now: InitProducerId
with a transactional id answers UNSUPPORTED_VERSION, and a transactional batch
INVALID_RECORD.
"""

from __future__ import annotations

import logging

from managed_ledger import Position
from managed_ledger.errors import EntryTooLargeError, ManagedLedgerError
from stableline.broker.security.permissions import Action
from stableline.broker.topic import Topic
from stableline.broker.write_gate import BrokerFencedError
from stableline.kafka import messages as m
from stableline.kafka.api_base import KafkaApiBase
from stableline.kafka.codec import MalformedRequest, Reader
from stableline.kafka.convert import InvalidRecord, batch_to_entries
from stableline.kafka.producer_ids import producer_name
from stableline.kafka.records import CorruptBatch, UnsupportedCompression, decode_batches

log = logging.getLogger(__name__)


class ProduceApis(KafkaApiBase):
    HANDLES = {m.ApiKey.PRODUCE: "_produce", m.ApiKey.INIT_PRODUCER_ID: "_init_producer_id"}

    # ------------------------------------------------------------ InitProducerId

    async def _init_producer_id(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_init_producer_id(reader, header.api_version)
        if request.transactional_id is not None:
            return m.write_init_producer_id(header.api_version, m.ErrorCode.UNSUPPORTED_VERSION)
        producer_id = self._producer_ids.allocate()
        return m.write_init_producer_id(header.api_version, m.ErrorCode.NONE, producer_id, 0)

    # ------------------------------------------------------------ Produce

    async def _produce(self, reader: Reader, header: m.RequestHeader) -> bytes | None:
        request = m.read_produce(reader, header.api_version)
        results: dict[str, list[m.ProducePartitionResult]] = {}
        for topic_data in request.topics:
            out = results.setdefault(topic_data.name, [])
            for partition in topic_data.partitions:
                if request.acks not in (0, 1, -1):
                    out.append(
                        m.ProducePartitionResult(partition.index, m.ErrorCode.INVALID_REQUIRED_ACKS)
                    )
                    continue
                out.append(await self._produce_partition(topic_data.name, partition))
        if request.acks == 0:
            return None  # Kafka sends nothing back to acks=0
        return m.write_produce(header.api_version, results)

    async def _produce_partition(
        self, kafka_name: str, partition: m.ProducePartition
    ) -> m.ProducePartitionResult:
        index = partition.index
        topic = await self._topic(kafka_name, index, action=Action.PRODUCE)
        if isinstance(topic, m.ErrorCode):
            return m.ProducePartitionResult(index, topic)
        if len(partition.records or b"") > self._settings.max_message_bytes:
            return m.ProducePartitionResult(index, m.ErrorCode.MESSAGE_TOO_LARGE)
        try:
            batches = decode_batches(partition.records or b"")
        except UnsupportedCompression as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, error_message=str(error)
            )
        except (CorruptBatch, MalformedRequest) as error:
            return m.ProducePartitionResult(
                index, m.ErrorCode.CORRUPT_MESSAGE, error_message=str(error)
            )
        first_offset = -1
        for batch in batches:
            if batch.transactional or batch.control:
                return m.ProducePartitionResult(
                    index,
                    m.ErrorCode.INVALID_RECORD,
                    error_message="transactional produce is not served yet",
                )
            if not batch.records:
                continue
            idempotent = batch.producer_id >= 0 and batch.base_sequence >= 0
            name = producer_name(batch.producer_id) if idempotent else ""
            if idempotent:
                await topic.buffer.wait_ready()
                last = topic.buffer.producers.last(name)
                if last >= 0 and batch.base_sequence > last + 1:
                    return m.ProducePartitionResult(
                        index,
                        m.ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        error_message=f"expected sequence {last + 1}, got {batch.base_sequence}",
                    )
            try:
                entries = batch_to_entries(batch, name)
            except InvalidRecord as error:
                return m.ProducePartitionResult(
                    index, m.ErrorCode.INVALID_RECORD, error_message=str(error)
                )
            try:
                base = await self._append(topic, entries)
            except EntryTooLargeError as error:
                return m.ProducePartitionResult(
                    index, m.ErrorCode.MESSAGE_TOO_LARGE, error_message=str(error)
                )
            except BrokerFencedError as error:
                return m.ProducePartitionResult(
                    index, m.ErrorCode.NOT_LEADER_OR_FOLLOWER, error_message=str(error)
                )
            except ManagedLedgerError as error:
                log.warning("kafka: produce to %s failed: %s", topic.name, error)
                return m.ProducePartitionResult(
                    index, m.ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(error)
                )
            if first_offset < 0:
                first_offset = base
        return m.ProducePartitionResult(
            index, m.ErrorCode.NONE, first_offset, topic.ledger.offsets.start_offset()
        )

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
