"""Fetch and ListOffsets.

A Fetch answers at most its max_bytes (capped by max_fetch_bytes: Kafka's
fetch.max.bytes) over the whole answer, and each partition at most its own
max_bytes: only the first batch of the first partition with data may be larger,
so a reader always makes progress. Once the budget is spent, the partitions left
are answered with their offsets and no records. A partition named twice is
answered once (its first naming), and a request may name at most
max_partitions_per_request topics and partitions (more: the request is refused
unread, codec.TooManyItems).

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
from stableline.broker.kafka.coordinator.producer_ids import sdk_txn_producer_id
from stableline.broker.kafka.protocol import messages as m
from stableline.broker.kafka.protocol.codec import Reader
from stableline.broker.kafka.server.api_base import KafkaApiBase
from stableline.broker.kafka.server.convert import entry_to_batch
from stableline.broker.kafka.server.request_scope import partitions_once
from stableline.broker.topics.topic import Topic

# Entries read per Fetch partition at most (bytes bound it first, as a rule).
_MAX_ENTRIES_PER_FETCH = 10_000
# A Fetch waits at most this long for data, whatever the client asks.
_MAX_WAIT_S = 30.0


class FetchApis(KafkaApiBase):
    HANDLES = {m.ApiKey.FETCH: "_fetch", m.ApiKey.LIST_OFFSETS: "_list_offsets"}

    # ------------------------------------------------------------ Fetch

    async def _fetch(self, reader: Reader, header: m.RequestHeader) -> bytes:
        request = m.read_fetch(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        self._fetch_levels.record(header.client_id, request.isolation_level)
        wanted = partitions_once(
            ((t.name, t.partitions) for t in request.topics), lambda p: p.partition
        )
        deadline = time.monotonic() + min(request.max_wait_ms / 1000, _MAX_WAIT_S)
        while True:
            results, total = await self._fetch_once(request, wanted)
            remaining = deadline - time.monotonic()
            if total >= max(request.min_bytes, 1) or remaining <= 0:
                break
            if not await self._wait_for_data(wanted, remaining):
                results, _ = await self._fetch_once(request, wanted)
                break
        return m.write_fetch(header.api_version, results)

    async def _wait_for_data(
        self, wanted: list[tuple[str, list[m.FetchPartition]]], timeout_s: float
    ) -> bool:
        """Until an appended entry or the timeout (False); wakes on any fetched topic."""
        woken = asyncio.Event()
        ledgers = []
        for name, partitions in wanted:
            for partition in partitions:
                topic = await self._topic(name, partition.partition)
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
        self, request: m.FetchRequest, wanted: list[tuple[str, list[m.FetchPartition]]]
    ) -> tuple[list[tuple[str, list[m.FetchPartitionResult]]], int]:
        """The answer to `wanted` (each partition once) and its bytes of records."""
        results = []
        total = 0
        # A client's max_bytes up to the broker's max_fetch_bytes (Kafka's fetch.max.bytes
        # bounds it the same way): an answer is built in memory whole.
        cap = self._settings.max_fetch_bytes
        budget = min(request.max_bytes, cap) if request.max_bytes > 0 else cap
        for name, partitions in wanted:
            out = []
            for partition in partitions:
                result = await self._fetch_partition(
                    name, partition, request.isolation_level, budget - total, first=total == 0
                )
                total += len(result.records)
                out.append(result)
            results.append((name, out))
        assert total <= budget or sum(1 for _, out in results for r in out if r.records) <= 1
        return results, total

    async def _fetch_partition(
        self,
        kafka_name: str,
        partition: m.FetchPartition,
        level: m.IsolationLevel,
        budget: int,
        first: bool,
    ) -> m.FetchPartitionResult:
        """`budget`: the bytes the answer has left; `first`: no partition before
        this one had records, so its first batch goes out whatever its size."""
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
        max_bytes = min(partition.max_bytes, budget)
        # Nothing is read for a partition with no room left, unless it comes first.
        wanted = fetch_offset < limit and (first or max_bytes > 0)
        start = offsets.position_of(fetch_offset) if wanted else None
        if start is not None:
            bound = stable if committed else ledger.last_confirmed
            entries = ledger.read(start, _MAX_ENTRIES_PER_FETCH, bound, max(1, max_bytes))
            size = 0
            for entry in entries:
                base = offsets.base_of(entry)
                if base >= limit:
                    break
                batch = entry_to_batch(entry, base)
                # Only the answer's very first batch may be larger than the room left.
                if size + len(batch) > max_bytes and (records or not first):
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
        request = m.read_list_offsets(
            reader, header.api_version, self._settings.max_partitions_per_request
        )
        committed = request.isolation_level is m.IsolationLevel.READ_COMMITTED
        results = []
        for name, partitions in partitions_once(request.topics, lambda p: p[0]):
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
