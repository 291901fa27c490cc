"""The consumer side of a perf run: batch_receive + grouped acks, with what each list says.

Per received list: the count, the end-to-end latency (receive time minus the send
time in the payload header) of every STRIDE-th message weighted by the messages
it stands for, and, when the run uses transactions, each message's transaction
key and fate: a READ_COMMITTED subscription that receives a message of an aborted
transaction is counted as a violation, and the first time it sees each committed
transaction is kept so the parent can compare it with the commit (commit ->
visible latency, and "visible before the commit", another violation).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable

from stableline import Messages
from stableline.aio import Client, ConsumerType, InitialPosition, IsolationLevel
from stableline.perf.coordination import Coordination, monotonic, now_us
from stableline.perf.worker import IntervalHistograms
from stableline.perf.workload import KIND_ABORT, ConsumerSpec, Workload

# One latency sample per this many messages of a received list (weighted by the
# messages it stands for): messages of one chunk share their send time anyway.
STRIDE = 16
RECEIVE_TIMEOUT_MS = 100
# Acknowledgements in flight per consumer before it waits for the oldest: an ack
# answers once the cursor is durable, and waiting for each would put that round
# trip between every two receives (Pulsar's perf acknowledges asynchronously too).
ACKS_IN_FLIGHT = 16
# Lists received are acknowledged together, once they hold this many messages or
# the oldest is this old: one ack request per five lists instead of per list cuts
# the consumer's and the broker's CPU per message (the CPU us/msg this tool
# reports, and scripts/bench/bench_all.py's E2E row, measure it). Pulsar's client
# groups acks the same way (up to 1,000 ids or 100 ms by default).
ACK_GROUP_MESSAGES = 5000
ACK_GROUP_S = 0.01


class AckWindow:
    """Acknowledgements in flight, at most `limit`: adding one past the limit waits
    for the oldest, so the consumer keeps receiving while acks travel."""

    def __init__(self, limit: int = ACKS_IN_FLIGHT) -> None:
        self._limit = limit
        self._acks: collections.deque[asyncio.Future] = collections.deque()

    async def add(self, ack: Awaitable) -> None:
        acks = self._acks
        acks.append(asyncio.ensure_future(ack))
        while acks and (acks[0].done() or len(acks) > self._limit):
            await acks.popleft()

    async def drain(self) -> None:
        """Wait for every acknowledgement still in flight."""
        while self._acks:
            await self._acks.popleft()


def transaction_headers(messages: Messages) -> collections.Counter[bytes]:
    """How many messages carry each (transaction key, kind) header.

    An entry holds one transaction's messages, all with one header: when the
    first and last message of a run agree the run is counted from one, and only a
    run whose ends differ is read message by message (per-message reads would
    double the consumer's CPU per message and measure the tool, not the broker).
    """
    counts: collections.Counter[bytes] = collections.Counter()
    for entry, indexes in messages.runs():
        first = entry.value(indexes[0])[8:17]
        if first == entry.value(indexes[-1])[8:17]:
            counts[first] += len(indexes)
        else:
            counts.update(value[8:17] for value in entry.values(indexes))
    return counts


class ConsumerSide:
    """All consumers of one worker process, on one client connection."""

    def __init__(
        self, workload: Workload, specs: list[ConsumerSpec], slot: int, coord: Coordination
    ):
        self.workload = workload
        self.specs = specs
        self.slot = slot
        self.coord = coord
        self.histograms = IntervalHistograms("e2e")
        self.client: Client | None = None
        self.consumers: list = []
        self.received = 0
        self.by_level = {level.name: 0 for level in IsolationLevel}
        self.aborted_by_level = {level.name: 0 for level in IsolationLevel}
        self.wrong_size = 0
        # (topic, subscription) -> txn key -> first receive (us), READ_COMMITTED only.
        self.first_seen: dict[tuple[str, str], dict[int, int]] = {}
        self.first_receive = 0.0
        self.last_receive = 0.0
        self.record_from_us = 0  # latencies of messages sent before this are not recorded

    async def open(self) -> None:
        w = self.workload
        self.client = Client(w.service_url, **w.client_options())
        for spec in self.specs:
            self.consumers.append(
                await self.client.subscribe(
                    spec.topic,
                    spec.subscription,
                    consumer_type=ConsumerType[w.subscription_type],
                    initial_position=InitialPosition[w.initial_position],
                    isolation_level=spec.isolation,
                    receiver_queue_size=w.receiver_queue_size,
                )
            )

    async def run(self) -> None:
        self.record_from_us = self.workload.record_latencies_from_us(now_us())
        await asyncio.gather(
            *(
                self._drain(consumer, spec)
                for consumer, spec in zip(self.consumers, self.specs, strict=True)
            )
        )

    async def _drain(self, consumer, spec: ConsumerSpec) -> None:
        acks = AckWindow()
        try:
            await self._receive_loop(consumer, spec, acks)
        finally:
            await acks.drain()

    async def _receive_loop(self, consumer, spec: ConsumerSpec, acks: AckWindow) -> None:
        w = self.workload
        stop = self.coord.stop_consuming
        e2e = self.histograms
        level = spec.isolation.name
        committed_only = spec.isolation is IsolationLevel.READ_COMMITTED
        first_seen = self.first_seen.setdefault((spec.topic, spec.subscription), {})
        size = w.message_size
        group: list = []  # runs received and not yet acknowledged
        grouped, group_started = 0, monotonic()
        while not stop.is_set():
            messages = await consumer.batch_receive(w.receive_max, RECEIVE_TIMEOUT_MS)
            if not messages:
                continue
            received_us = now_us()
            count = len(messages)
            self.last_receive = monotonic()
            if not self.first_receive:
                self.first_receive = self.last_receive
            self.received += count
            self.by_level[level] += count
            self.coord.received[self.slot] = self.received
            histogram = e2e["e2e"]
            record_from_us = self.record_from_us
            for entry, indexes in messages.runs():
                run = len(indexes)
                for index in range(0, run, STRIDE):
                    data = entry.value(indexes[index])
                    if len(data) != size:
                        self.wrong_size += 1
                    sent_us = int.from_bytes(data[:8], "little")
                    if sent_us >= record_from_us:
                        histogram.record(received_us - sent_us, min(STRIDE, run - index))
            if w.transactional:
                keys = transaction_headers(messages)
                for header, seen in keys.items():
                    if header[8] == KIND_ABORT:
                        self.aborted_by_level[level] += seen
                    elif committed_only:
                        key = int.from_bytes(header[:8], "little")
                        if key and key not in first_seen:
                            first_seen[key] = received_us
            group += messages.runs()
            grouped += count
            if grouped >= ACK_GROUP_MESSAGES or monotonic() - group_started >= ACK_GROUP_S:
                await acks.add(consumer.acknowledge(Messages(group)))
                group, grouped, group_started = [], 0, monotonic()
        if group:
            await acks.add(consumer.acknowledge(Messages(group)))

    async def close(self) -> dict:
        await self.client.close()
        return {
            "received": self.received,
            "by_level": self.by_level,
            "aborted_by_level": self.aborted_by_level,
            "wrong_size": self.wrong_size,
            "first_seen": self.first_seen,
            "first_receive": self.first_receive,
            "last_receive": self.last_receive,
        }


def consumer_worker_main(
    workload: Workload, specs: list[ConsumerSpec], slot: int, coord: Coordination
) -> None:
    """Entry point of a consumer worker process."""
    from stableline.perf.coordination import CONSUMER
    from stableline.perf.worker import run_worker

    run_worker(
        CONSUMER, slot, coord, workload.interval_s, ConsumerSide(workload, specs, slot, coord)
    )
