"""Fetch and ListOffsets.

Fetch reads entries from the offset's position and serves each as one batch:
READ_UNCOMMITTED up to the log end (high watermark), READ_COMMITTED up to the
stable position (the last stable offset), with the aborted transactions that
overlap what was read, from the abort index, so the client drops aborted records
itself. The high watermark is the log's durable end (LogOffsets.end_offset), never
an offset of a write still in flight. A READ_COMMITTED read waits for the topic's
log replay after a restart (TopicRegistry.get_stable), and past
topic_recovery_wait_s answers NOT_LEADER_OR_FOLLOWER: what Kafka answers for a
partition it cannot serve yet, and what librdkafka and kafka-python retry in both
Fetch and ListOffsets (LEADER_NOT_AVAILABLE is not retried by kafka-python's Fetch).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from managed_ledger import Position
from stableline.broker.topic import Topic
from stableline.kafka import messages as m
from stableline.kafka.api_base import KafkaApiBase
from stableline.kafka.codec import Reader
from stableline.kafka.convert import entry_to_batch
from stableline.kafka.producer_ids import sdk_txn_producer_id

# Entries read per Fetch partition at most (bytes bound it first, as a rule).
_MAX_ENTRIES_PER_FETCH = 10_000
# A Fetch waits at most this long for data, whatever the client asks.
_MAX_WAIT_S = 30.0


class FetchApis(KafkaApiBase):
    HANDLES = {m.ApiKey.FETCH: "_fetch", m.ApiKey.LIST_OFFSETS: "_list_offsets"}

    # ------------------------------------------------------------ Fetch

    async def _fetch(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_fetch(reader, header.api_version)
        self._fetch_levels.record(header.client_id, request.isolation_level)
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
        # A client's max_bytes up to the broker's max_fetch_bytes (Kafka's fetch.max.bytes
        # bounds it the same way): an answer is built in memory whole.
        cap = self._settings.max_fetch_bytes
        budget = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
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
