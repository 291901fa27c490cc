"""A producer of a partitioned topic: one Producer per partition and a router.

Made by Client.create_producer when the topic's partition count (asked of the
broker when the producer is made) is above zero, as Pulsar's PartitionedProducerImpl.
Each partition's producer batches, de-duplicates and reconnects on its own; a batch
never spans partitions. Routing (stableline._routing): a keyed message goes to the
partition of its key's hash; without a key, by message_routing_mode. A transaction
may take sends to several partitions: each partition's producer joins it, and its
commit or abort ends them all together (the coordinator records every partition).
Message ids carry their partition (MessageId.partition()). Every
partitions_update_interval_s the count is asked again and the partitions a grown
topic gained get producers of their own (Pulsar's autoUpdatePartitions): from then
on round robin includes them and keys hash over the new count, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Generator
from typing import Any, ClassVar

from stableline._errors import StableLineError
from stableline._routing import MessageRoutingMode, RoutedMessage, key_partition
from stableline._types import MessageId, PartitionedMessageId
from stableline.aio._batch import SendReceipt
from stableline.aio._producer import Producer, send_with_callback
from stableline.aio.options import ProducerOptions

log = logging.getLogger(__name__)


class PartitionedSendReceipt(SendReceipt):
    """A SendReceipt whose MessageId carries its partition. One subclass per
    partition holds the index as a class attribute (receipt_type), so a receipt is
    still a 2-tuple made in C, as every send makes one."""

    __slots__ = ()
    partition: ClassVar[int] = -1

    def __await__(self) -> Generator[Any, None, MessageId]:
        future, index = self
        ledger_id, entry_id = yield from future.__await__()
        return PartitionedMessageId(ledger_id, entry_id, index, self.partition)

    def result(self) -> MessageId:
        future, index = self
        ledger_id, entry_id = future.result()
        return PartitionedMessageId(ledger_id, entry_id, index, self.partition)


def receipt_type(partition: int) -> type[PartitionedSendReceipt]:
    """The receipt class of partition `partition`."""
    return type(
        f"PartitionedSendReceipt{partition}",
        (PartitionedSendReceipt,),
        {"__slots__": (), "partition": partition},
    )


class PartitionedProducer:
    """Sends to every partition of a partitioned topic (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        producers: list[Producer],
        options: ProducerOptions,
        count_partitions: Callable[[], Awaitable[int]] | None = None,
        open_partition: Callable[[int], Awaitable[Producer]] | None = None,
    ):
        """count_partitions() asks the broker for the topic's count; open_partition(i)
        opens partition i's producer. Without them, or with an interval of 0, the
        producer keeps the partitions it was made with."""
        assert producers, "a partitioned topic has at least one partition"
        self.options = options
        self.topic = topic
        self._producers = producers
        self._mode = options.message_routing_mode
        self._router = options.message_router
        # Pulsar starts both at a random partition, so producers spread out.
        self._single = random.randrange(len(producers))
        self._turn = random.randrange(len(producers))
        # The open batch of the partition whose turn it is; once it is sent, the
        # next keyless message goes to the next partition.
        self._turn_batch: object | None = None
        self._receipts = [receipt_type(index) for index in range(len(producers))]
        self._round_robin = self._mode is MessageRoutingMode.RoundRobinPartition
        self._closed = False
        self._follower: asyncio.Task | None = None
        if options.partitions_update_interval_s > 0 and count_partitions and open_partition:
            self._follower = asyncio.create_task(
                self._follow_partitions(count_partitions, open_partition)
            )

    async def _follow_partitions(
        self,
        count_partitions: Callable[[], Awaitable[int]],
        open_partition: Callable[[int], Awaitable[Producer]],
    ) -> None:
        """Every interval: the count again, and a producer for each partition new since."""
        while not self._closed:
            await asyncio.sleep(self.options.partitions_update_interval_s)
            try:
                count = await count_partitions()
                while len(self._producers) < count and not self._closed:
                    index = len(self._producers)
                    producer = await open_partition(index)
                    if self._closed:
                        await producer.close()
                        return
                    # The receipt class first: a send routed to index finds it there.
                    self._receipts.append(receipt_type(index))
                    self._producers.append(producer)
            except StableLineError as error:
                # The broker is away or refuses for now: the next interval asks again.
                log.warning("partitions of %s not updated: %s", self.topic, error)

    @property
    def producer_name(self) -> str:
        return self._producers[0].producer_name

    @property
    def max_message_size(self) -> int:
        return min(p.max_message_size for p in self._producers)

    def num_partitions(self) -> int:
        return len(self._producers)

    def _route(self, content: bytes, properties: dict[str, str] | None, key: str | None) -> int:
        count = len(self._producers)
        if self._mode is MessageRoutingMode.CustomPartition:
            index = self._router(RoutedMessage(content, key, properties), count)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise ValueError(
                    f"message_router returned {index!r}: it must return a partition "
                    f"index in 0..{count - 1}"
                )
            return index
        if key is not None:
            return key_partition(key, count)
        if self._mode is MessageRoutingMode.SinglePartition:
            return self._single
        current = self._producers[self._turn]._open_batch()
        if current is None or current is not self._turn_batch:
            self._turn = (self._turn + 1) % count
        return self._turn

    def _sent(self, index: int, key: str | None) -> None:
        if key is None and index == self._turn:
            self._turn_batch = self._producers[index]._open_batch()

    def send_nowait(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
        event_time_ms: int = 0,
    ) -> SendReceipt:
        if partition_key is None and self._round_robin:
            # The usual keyless send, _route and _sent written out: it runs per message.
            index = self._turn
            producer = self._producers[index]
            current = producer._open_batch()
            if current is None or current is not self._turn_batch:
                index = self._turn = (index + 1) % len(self._producers)
                producer = self._producers[index]
            receipt = producer.send_nowait(content, properties, None, txn, event_time_ms)
            self._turn_batch = producer._open_batch()
            return tuple.__new__(self._receipts[index], receipt)
        index = self._route(content, properties, partition_key)
        receipt = self._producers[index].send_nowait(
            content, properties, partition_key, txn, event_time_ms
        )
        self._sent(index, partition_key)
        return tuple.__new__(self._receipts[index], receipt)

    def _send_admitted(self, content, properties, partition_key, txn) -> SendReceipt:
        index = self._route(content, properties, partition_key)
        receipt = self._producers[index]._send_admitted(content, properties, partition_key, txn)
        self._sent(index, partition_key)
        return tuple.__new__(self._receipts[index], receipt)

    async def send(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
        event_time_ms: int = 0,
    ) -> MessageId:
        index = self._route(content, properties, partition_key)
        producer = self._producers[index]
        if producer.queue_full():  # waits for room there, or raises
            message_id = await producer.send(content, properties, partition_key, txn, event_time_ms)
            return PartitionedMessageId(*message_id, index)
        receipt = producer.send_nowait(content, properties, partition_key, txn, event_time_ms)
        self._sent(index, partition_key)
        return await tuple.__new__(self._receipts[index], receipt)

    def send_async(
        self,
        content: bytes,
        callback: Callable[[StableLineError | None, MessageId | None], None] | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        txn=None,
    ) -> None:
        send_with_callback(self.send_nowait, content, callback, properties, partition_key, txn)

    def queue_full(self) -> bool:
        """Whether some partition's producer holds max_pending_messages unacknowledged."""
        return any(p.queue_full() for p in self._producers)

    def _queue_full_error(self) -> StableLineError:
        full = next((p for p in self._producers if p.queue_full()), self._producers[0])
        return full._queue_full_error()

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._producers))

    async def close(self) -> None:
        self._closed = True
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
        await asyncio.gather(*(p.close() for p in self._producers), return_exceptions=True)
