"""The producer side of a perf run: batched sends at a rate, optionally in transactions.

Each producer sends chunks of up to one batch of messages with `send_nowait` and
tracks the chunk's receipt: when the broker acknowledges it (durable), the chunk's
messages count as published and their publish latency (send -> durable) is
recorded once for the chunk, weighted by its size. Every message of a chunk
carries the same header (send time, transaction key, commit or abort), so a chunk
costs one header, not one per message.

With transactions, a producer keeps `open_txns` transactions open and writes its
chunks to them in turn; a transaction ends (commit, or abort for `abort_ratio` of
them, decided when it opens) once it holds `txn_size` messages or is
`commit_interval_ms` old. Ends run in the background while the next transaction,
opened ahead, takes its place, so sending never waits for a commit.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from dataclasses import dataclass

from stableline.aio import Client, SendReceipt, Transaction
from stableline.perf.coordination import Coordination, monotonic, now_us
from stableline.perf.worker import IntervalHistograms
from stableline.perf.workload import (
    KIND_ABORT,
    KIND_COMMIT,
    KIND_PLAIN,
    PAYLOAD_HEADER_BYTES,
    ProducerSpec,
    Workload,
)

HEADER = struct.Struct("<QQB")
assert HEADER.size == PAYLOAD_HEADER_BYTES
# A transaction's key: the producer's global index above this many bits of sequence.
TXN_KEY_SEQUENCE_BITS = 40
TXN_TIMEOUT_MS = 300_000
# Transactions opened ahead of need; as many NewTransaction calls run at once.
SPARE_TXNS = 32
# Ends (commit/abort) in flight before the producer waits for the oldest.
MAX_ENDS_IN_FLIGHT = 256
# How long a rate-limited producer sleeps at least when it is ahead of its rate.
MIN_PACING_SLEEP_S = 0.0005


def payload(stamp_us: int, txn_key: int, kind: int, filler: bytes) -> bytes:
    return HEADER.pack(stamp_us, txn_key, kind) + filler


@dataclass(slots=True, eq=False)
class OpenTxn:
    txn: Transaction
    key: int
    kind: int  # KIND_COMMIT or KIND_ABORT: decided when opened
    opened: float
    count: int = 0
    last_chunk: SendReceipt | None = None


class ProducerSide:
    """All producers of one worker process, on one client connection."""

    def __init__(
        self, workload: Workload, specs: list[ProducerSpec], slot: int, coord: Coordination
    ):
        self.workload = workload
        self.specs = specs
        self.slot = slot
        self.coord = coord
        self.histograms = IntervalHistograms("publish", "commit")
        self.client: Client | None = None
        self.published = 0
        self.visible = 0
        self.committed_txns = 0
        self.aborted_txns = 0
        self.commit_started_us: dict[int, int] = {}  # txn key -> just before EndTransaction
        self.last_ack = 0.0
        self.record_from_us = 0  # latencies of sends before this are not recorded
        self.failure: BaseException | None = None
        self._loops: list[ProducerLoop] = []

    async def open(self) -> None:
        self.client = Client(self.workload.service_url, **self.workload.client_options())
        self._loops = [ProducerLoop(self, spec) for spec in self.specs]
        await asyncio.gather(*(loop.open() for loop in self._loops))

    async def run(self) -> None:
        self.record_from_us = self.workload.record_latencies_from_us(now_us())
        await asyncio.gather(*(loop.run() for loop in self._loops))

    async def close(self) -> dict:
        await self.client.close()
        return {
            "published": self.published,
            "visible": self.visible,
            "committed_txns": self.committed_txns,
            "aborted_txns": self.aborted_txns,
            "commit_started_us": self.commit_started_us,
            "last_ack": self.last_ack,
        }

    def acknowledged(self, count: int, visible: bool, sent_us: int, receipt: SendReceipt) -> None:
        """Done callback of a chunk's receipt."""
        if receipt.cancelled():
            return
        if receipt.exception() is not None:
            self.failure = self.failure or receipt.exception()
            return
        self.published += count
        self.coord.published[self.slot] = self.published
        if visible:
            self.add_visible(count)
        if sent_us >= self.record_from_us:
            self.histograms["publish"].record(now_us() - sent_us, count)
        self.last_ack = monotonic()

    def add_visible(self, count: int) -> None:
        self.visible += count
        self.coord.visible[self.slot] = self.visible


class ProducerLoop:
    """One producer on one topic."""

    def __init__(self, side: ProducerSide, spec: ProducerSpec):
        self.side = side
        self.spec = spec
        self.workload = side.workload
        self.producer = None
        self.filler = b"p" * (self.workload.message_size - PAYLOAD_HEADER_BYTES)
        self.window: collections.deque[SendReceipt] = collections.deque()
        self.slots: list[OpenTxn] = []
        self.turn = 0
        self.spares: collections.deque[asyncio.Task] = collections.deque()
        self.ends: collections.deque[asyncio.Task] = collections.deque()
        self.txns_opened = 0

    async def open(self) -> None:
        w = self.workload
        self.producer = await self.side.client.create_producer(
            self.spec.topic,
            batching_max_messages=w.batch_max_messages,
            batching_max_publish_delay_ms=w.batch_delay_ms,
        )
        if w.transactional:
            for _ in range(min(SPARE_TXNS, w.open_txns)):
                self._open_spare()
            for start in range(0, w.open_txns, SPARE_TXNS):
                count = min(SPARE_TXNS, w.open_txns - start)
                self.slots.extend(await asyncio.gather(*(self._next_txn() for _ in range(count))))

    def _open_spare(self) -> None:
        self.spares.append(
            asyncio.create_task(self.side.client.new_transaction(timeout_ms=TXN_TIMEOUT_MS))
        )

    async def _next_txn(self) -> OpenTxn:
        """A transaction opened ahead, with its fate decided; another is opened to follow."""
        task = self.spares.popleft()
        self._open_spare()
        txn = await task
        before = int(self.txns_opened * self.workload.abort_ratio)
        self.txns_opened += 1
        aborts = int(self.txns_opened * self.workload.abort_ratio) > before
        key = (self.spec.index << TXN_KEY_SEQUENCE_BITS) | self.txns_opened
        return OpenTxn(txn, key, KIND_ABORT if aborts else KIND_COMMIT, monotonic())

    async def run(self) -> None:
        w, spec, side = self.workload, self.spec, self.side
        stop = side.coord.stop_producing
        interval_s = w.commit_interval_ms / 1000
        started = monotonic()
        sent = 0
        while not stop.is_set() and (not spec.messages or sent < spec.messages):
            if side.failure is not None:
                raise side.failure
            count = w.batch_max_messages
            if spec.messages:
                count = min(count, spec.messages - sent)
            if spec.rate:
                due = int((monotonic() - started) * spec.rate) - sent
                if due <= 0:
                    await asyncio.sleep(max(MIN_PACING_SLEEP_S, -due / spec.rate))
                    continue
                count = min(count, due)
            open_txn = self.slots[self.turn] if self.slots else None
            if open_txn is not None and w.txn_size:
                count = min(count, w.txn_size - open_txn.count)
            sent_us = now_us()
            if open_txn is None:
                data, txn = payload(sent_us, 0, KIND_PLAIN, self.filler), None
            else:
                data = payload(sent_us, open_txn.key, open_txn.kind, self.filler)
                txn = open_txn.txn
            send = self.producer.send_nowait
            for _ in range(count):
                receipt = send(data, txn=txn)
            sent += count
            # The chunk's last message: its receipt is done when the whole chunk is.
            receipt.add_done_callback(
                lambda done, n=count, plain=txn is None, t=sent_us: side.acknowledged(
                    n, plain, t, done
                )
            )
            self.window.append(receipt)
            if open_txn is not None:
                open_txn.count += count
                open_txn.last_chunk = receipt
                full = w.txn_size and open_txn.count >= w.txn_size
                if full or (interval_s and monotonic() - open_txn.opened >= interval_s):
                    await self._end(open_txn)
                    self.slots[self.turn] = await self._next_txn()
                self.turn = (self.turn + 1) % len(self.slots)
            if len(self.window) > w.window_batches:
                await self.window.popleft()
            else:
                await asyncio.sleep(0)  # let the producer's writer put the batch on the wire
            while w.max_lag and side.coord.consumer_lag() > w.max_lag and not stop.is_set():
                await asyncio.sleep(0.002)
        await self.finish()

    async def _end(self, open_txn: OpenTxn) -> None:
        while self.ends and self.ends[0].done():
            self.ends.popleft().result()
        if len(self.ends) >= MAX_ENDS_IN_FLIGHT:
            await self.ends.popleft()
        self.ends.append(asyncio.create_task(self._end_txn(open_txn)))

    async def _end_txn(self, open_txn: OpenTxn) -> None:
        side = self.side
        if not open_txn.count:
            await open_txn.txn.abort()  # never written to: nothing to commit or count
            return
        await open_txn.last_chunk  # the sends are durable: what follows is the end alone
        started_us = now_us()
        if open_txn.kind == KIND_ABORT:
            await open_txn.txn.abort()
            side.aborted_txns += 1
        else:
            await open_txn.txn.commit()
            side.committed_txns += 1
            side.commit_started_us[open_txn.key] = started_us
            side.add_visible(open_txn.count)
        if started_us >= side.record_from_us:
            side.histograms["commit"].record(now_us() - started_us)

    async def finish(self) -> None:
        """End the open transactions (as decided), wait for every ack and end, drop the spares."""
        for open_txn in self.slots:
            await self._end(open_txn)  # bounded: thousands of ends at once get cancelled
        self.slots = []
        await self.producer.flush()
        for chunk in self.window:
            await chunk
        for end in self.ends:
            await end
        for task in self.spares:
            await (await task).abort()
        if self.side.failure is not None:
            raise self.side.failure


def producer_worker_main(
    workload: Workload, specs: list[ProducerSpec], slot: int, coord: Coordination
) -> None:
    """Entry point of a producer worker process."""
    from stableline.perf.coordination import PRODUCER
    from stableline.perf.worker import run_worker

    run_worker(
        PRODUCER, slot, coord, workload.interval_s, ProducerSide(workload, specs, slot, coord)
    )
