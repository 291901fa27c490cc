"""Kafka requests answered from the broker's topics: one handler per broker.

A Kafka topic T is the stableline topic persistent://NAMESPACE/T (namespace from
config, public/default by default); a topic is partition 0 of itself (partitioned
topics are not mapped yet). This broker is node 0 and leads every partition.

Produce appends through Topic.publish, so Kafka records meet the same
de-duplication, transaction buffer and subscriptions as SDK messages. An
idempotent producer (producer id and sequence set) is the named stableline
producer "kafka-<id>": a retried batch is found as a duplicate and answered with
its first copy's offset. Fetch reads entries from the offset's position and
serves each as one batch: READ_UNCOMMITTED up to the log end (high watermark),
READ_COMMITTED up to the stable position (the last stable offset), with the
aborted transactions that overlap what was read, from the abort index, so the
client drops aborted records itself. The high watermark is the log's durable end
(LogOffsets.end_offset), never an offset of a write still in flight. A
READ_COMMITTED read waits for the topic's log replay after a restart
(TopicRegistry.get_stable), and past topic_recovery_wait_s answers
NOT_LEADER_OR_FOLLOWER: what Kafka answers for a partition it cannot serve yet,
and what librdkafka and kafka-python retry in both Fetch and ListOffsets
(LEADER_NOT_AVAILABLE is not retried by kafka-python's Fetch). A Produce the
broker's write gate refuses (a cluster broker fenced: write_gate.py) answers
NOT_LEADER_OR_FOLLOWER too, which Kafka producers retry.

Transactional producers (transactional.id) are refused for now: InitProducerId
with a transactional id answers UNSUPPORTED_VERSION, and a transactional batch
INVALID_RECORD. Requests of one connection are answered in order, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from managed_ledger import Position
from managed_ledger.errors import EntryTooLargeError, ManagedLedgerError
from stableline.broker.registry import TooManyTopicsError, TopicNotFoundError, TopicRegistry
from stableline.broker.topic import Topic
from stableline.broker.write_gate import BrokerFencedError
from stableline.kafka import messages as m
from stableline.kafka.codec import MalformedRequest, Reader, Writer
from stableline.kafka.convert import InvalidRecord, batch_to_entries, entry_to_batch
from stableline.kafka.producer_ids import ProducerIdAllocator, producer_name, sdk_txn_producer_id
from stableline.kafka.records import CorruptBatch, UnsupportedCompression, decode_batches
from stableline.topic_name import TopicName
from txnbuffer import TransactionBufferNotReadyError

log = logging.getLogger(__name__)

# Kafka's legal topic names.
_KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Entries read per Fetch partition at most (bytes bound it first, as a rule).
_MAX_ENTRIES_PER_FETCH = 10_000
# A Fetch waits at most this long for data, whatever the client asks.
_MAX_WAIT_S = 30.0


@dataclass(slots=True)
class KafkaSettings:
    namespace: str
    advertised_host: str
    advertised_port: int
    allow_auto_topic_creation: bool
    max_message_bytes: int


class KafkaRequestHandler:
    """Decodes one request frame, runs it, encodes its response (None: no response)."""

    def __init__(self, registry: TopicRegistry, settings: KafkaSettings) -> None:
        self._registry = registry
        self._settings = settings
        self._producer_ids = ProducerIdAllocator()
        self._handlers: dict[int, Callable[[Reader, m.RequestHeader], Awaitable[bytes | None]]] = {
            m.ApiKey.API_VERSIONS: self._api_versions,
            m.ApiKey.METADATA: self._metadata,
            m.ApiKey.PRODUCE: self._produce,
            m.ApiKey.FETCH: self._fetch,
            m.ApiKey.LIST_OFFSETS: self._list_offsets,
            m.ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
        }

    def advertise_port(self, port: int) -> None:
        """The bound port (when the address asked for port 0), told in Metadata."""
        self._settings.advertised_port = port

    async def handle(self, frame: bytes) -> bytes | None:
        """The response frame's body (header included); MalformedRequest when the
        request does not parse."""
        reader = Reader(frame)
        header = m.read_request_header(reader)
        supported = m.SUPPORTED.get(header.api_key)  # type: ignore[call-overload]
        if supported is None or not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == m.ApiKey.API_VERSIONS:
                # Clients expect a v0 body listing what is served, then ask again.
                body = m.write_api_versions(0, m.ErrorCode.UNSUPPORTED_VERSION)
                return Writer().int32(header.correlation_id).raw(body).getvalue()
            log.info(
                "kafka: unsupported api key %d version %d from %s",
                header.api_key,
                header.api_version,
                header.client_id,
            )
            return m.response_header(header) + m.write_unsupported(header)
        body = await self._handlers[header.api_key](reader, header)
        if body is None:
            return None
        return m.response_header(header) + body

    # ------------------------------------------------------------ topics

    def _topic_name(self, kafka_name: str) -> TopicName | None:
        if not _KAFKA_TOPIC.fullmatch(kafka_name):
            return None
        return TopicName.parse(f"persistent://{self._settings.namespace}/{kafka_name}")

    async def _topic(
        self, kafka_name: str, partition: int, stable: bool = False
    ) -> Topic | m.ErrorCode:
        """The partition's topic, or the error code to answer. With `stable` (a
        READ_COMMITTED read), once the topic has replayed its log after a restart
        (TopicRegistry.get_stable): its stable position, and so the last stable
        offset, is then never earlier than one told before the restart."""
        name = self._topic_name(kafka_name)
        if name is None or partition != 0:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            if stable:
                return await self._registry.get_stable(name)
            return await self._registry.get(name, create=False)
        except TopicNotFoundError:
            return m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except TransactionBufferNotReadyError as error:
            # What Kafka answers for a partition this broker cannot serve yet (its log
            # still loading): clients refresh metadata, back off and retry.
            log.info("kafka: %s", error)
            return m.ErrorCode.NOT_LEADER_OR_FOLLOWER

    # ------------------------------------------------------------ ApiVersions

    async def _api_versions(self, reader: Reader, header: m.RequestHeader) -> bytes:
        m.read_api_versions(reader, header.api_version)
        return m.write_api_versions(header.api_version)

    # ------------------------------------------------------------ Metadata

    async def _metadata(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_metadata(reader, header.api_version)
        prefix = f"persistent://{self._settings.namespace}/"
        topics: list[m.TopicMetadata] = []
        if request.topics is None:
            for full in self._registry.names(self._settings.namespace):
                short = full[len(prefix) :]
                if _KAFKA_TOPIC.fullmatch(short):
                    topics.append(m.TopicMetadata(short, m.ErrorCode.NONE, [0], 0))
        else:
            for short in request.topics:
                topics.append(await self._topic_metadata(short, request.allow_auto_topic_creation))
        settings = self._settings
        broker = m.BrokerInfo(0, settings.advertised_host, settings.advertised_port)
        return m.write_metadata(header.api_version, [broker], 0, topics)

    async def _topic_metadata(self, short: str, auto_create: bool) -> m.TopicMetadata:
        name = self._topic_name(short)
        if name is None:
            return m.TopicMetadata(short, m.ErrorCode.INVALID_TOPIC_EXCEPTION, [], 0)
        if not self._registry.exists(name):
            if not (auto_create and self._settings.allow_auto_topic_creation):
                return m.TopicMetadata(short, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [], 0)
            try:
                await self._registry.create(name)
            except TooManyTopicsError as error:
                log.warning("kafka: cannot create %s: %s", name, error)
                return m.TopicMetadata(short, m.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [], 0)
        return m.TopicMetadata(short, m.ErrorCode.NONE, [0], 0)

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
        topic = await self._topic(kafka_name, index)
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

    # ------------------------------------------------------------ Fetch

    async def _fetch(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_fetch(reader, header.api_version)
        deadline = time.monotonic() + min(request.max_wait_ms / 1000, _MAX_WAIT_S)
        while True:
            results, total = await self._fetch_once(request)
            remaining = deadline - time.monotonic()
            if total >= max(request.min_bytes, 1) or remaining <= 0:
                break
            if not await self._wait_for_data(request, remaining):
                results, _ = await self._fetch_once(request)
                break
        return m.write_fetch(header.api_version, results)

    async def _wait_for_data(self, request: m.FetchRequest, timeout_s: float) -> bool:
        """Until an appended entry or the timeout (False); wakes on any fetched topic."""
        woken = asyncio.Event()
        ledgers = []
        for topic_request in request.topics:
            for partition in topic_request.partitions:
                topic = await self._topic(topic_request.name, partition.partition)
                if not isinstance(topic, m.ErrorCode):
                    topic.ledger.add_listener(woken.set)
                    ledgers.append(topic.ledger)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout_s)
        finally:
            for ledger in ledgers:
                ledger.remove_listener(woken.set)
        return woken.is_set()

    async def _fetch_once(
        self, request: m.FetchRequest
    ) -> tuple[list[tuple[str, list[m.FetchPartitionResult]]], int]:
        results = []
        total = 0
        budget = request.max_bytes if request.max_bytes > 0 else 50 * 1024 * 1024
        for topic_request in request.topics:
            out = []
            for partition in topic_request.partitions:
                result = await self._fetch_partition(
                    topic_request.name, partition, request.isolation_level, budget - total
                )
                total += len(result.records)
                out.append(result)
            results.append((topic_request.name, out))
        return results, total

    async def _fetch_partition(
        self,
        kafka_name: str,
        partition: m.FetchPartition,
        level: m.IsolationLevel,
        budget: int,
    ) -> m.FetchPartitionResult:
        index = partition.partition
        committed = level is m.IsolationLevel.READ_COMMITTED
        topic = await self._topic(kafka_name, index, stable=committed)
        if isinstance(topic, m.ErrorCode):
            return m.FetchPartitionResult(index, topic)
        ledger = topic.ledger
        offsets = ledger.offsets
        high_watermark = offsets.end_offset
        log_start = offsets.start_offset()
        stable = topic.buffer.stable_position
        last_stable = offsets.offset_after(stable)
        fetch_offset = partition.fetch_offset
        if not log_start <= fetch_offset <= high_watermark:
            return m.FetchPartitionResult(
                index, m.ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark, last_stable, log_start
            )
        limit = last_stable if committed else high_watermark
        records: list[bytes] = []
        aborted: list[m.AbortedTransaction] | None = [] if committed else None
        start = offsets.position_of(fetch_offset) if fetch_offset < limit else None
        if start is not None:
            bound = stable if committed else ledger.last_confirmed
            max_bytes = max(1, min(partition.max_bytes, budget))
            entries = ledger.read(start, _MAX_ENTRIES_PER_FETCH, bound, max_bytes)
            size = 0
            for entry in entries:
                base = offsets.base_of(entry)
                if base >= limit:
                    break
                batch = entry_to_batch(entry, base)
                if records and size + len(batch) > max_bytes:
                    break
                records.append(batch)
                size += len(batch)
                last, last_base = entry, base
            if records:
                following = ledger.first_position_after(last.position)
                if following is not None:
                    offsets.remember(last_base + last.header.offset_count, following)
                if committed:
                    aborted = self._aborted(topic, start, last.position)
        return m.FetchPartitionResult(
            index,
            m.ErrorCode.NONE,
            high_watermark,
            last_stable,
            log_start,
            aborted,
            b"".join(records),
        )

    def _aborted(self, topic: Topic, start: Position, end: Position) -> list[m.AbortedTransaction]:
        ledger = topic.ledger
        found = []
        for aborted in topic.buffer.aborted_overlapping(start, end):
            first = ledger.read(aborted.first_position, 1)
            if not first:
                continue
            found.append(
                m.AbortedTransaction(
                    sdk_txn_producer_id(aborted.txn_id), ledger.offsets.base_of(first[0])
                )
            )
        return found

    # ------------------------------------------------------------ ListOffsets

    async def _list_offsets(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_list_offsets(reader, header.api_version)
        committed = request.isolation_level is m.IsolationLevel.READ_COMMITTED
        results = []
        for name, partitions in request.topics:
            out = []
            for index, timestamp in partitions:
                topic = await self._topic(name, index, stable=committed)
                if isinstance(topic, m.ErrorCode):
                    out.append(m.ListOffsetsResult(index, topic))
                    continue
                offsets = topic.ledger.offsets
                if timestamp == m.EARLIEST_TIMESTAMP:
                    offset = offsets.start_offset()
                elif timestamp == m.LATEST_TIMESTAMP:
                    if committed:
                        offset = offsets.offset_after(topic.buffer.stable_position)
                    else:
                        offset = offsets.end_offset
                else:
                    before = topic.ledger.find_position_by_time(timestamp)
                    offset = offsets.offset_after(before)
                out.append(m.ListOffsetsResult(index, m.ErrorCode.NONE, -1, offset))
            results.append((name, out))
        return m.write_list_offsets(header.api_version, results)
