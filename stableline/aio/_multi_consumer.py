"""A consumer of one subscription on several topics: a list, the topics of a
namespace whose names match a pattern, or the partitions of a partitioned topic.

It holds one Consumer per topic. A pump task per topic takes that consumer's
messages a batch at a time into one queue (at most PUMPED_BATCHES_PER_TOPIC batches
of each topic wait there), which receive and batch_receive read, so every topic is
read as its messages come. An ack goes to the consumer of the message's topic; a
bare MessageId names no topic, so it is accepted only with one topic. With a
pattern, the namespace is listed at subscribe time and again every
pattern_discovery_period_s, and topics new since are subscribed as well. Of a
partitioned topic, the partition count is asked again every
partitions_update_interval_s and a grown topic's new partitions are subscribed from
their earliest message, so nothing sent to them before is missed (Pulsar's
autoUpdatePartitions).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable

from stableline._errors import StableLineError, Timeout
from stableline._proto import admin_pb2 as admin_pb
from stableline._types import Message, MessageId, Messages
from stableline.aio._ack_grouping import AckGrouping
from stableline.aio._consumer import Consumer
from stableline.aio.options import (
    BATCH_RECEIVE_MAX_MESSAGES,
    BATCH_RECEIVE_TIMEOUT_MS,
    ConsumerOptions,
)
from stableline.topic_name import TopicName

PUMPED_BATCHES_PER_TOPIC = 2
PUMP_BATCH_MAX = 1000
# How often a pattern's namespace is listed again for new topics (Pulsar: 1 minute).
PATTERN_DISCOVERY_PERIOD_S = 60.0
_PUMP_WAIT_MS = 1000


def pattern_namespace(pattern: re.Pattern) -> str:
    """The "tenant/namespace" a topics pattern names; its topic part may be a regex."""
    text = pattern.pattern
    if not text.startswith("persistent://"):
        return "public/default"
    parts = text[len("persistent://") :].split("/")
    if len(parts) != 3 or any(re.escape(part) != part for part in parts[:2]):
        raise ValueError(
            f"topics pattern {text!r}: expected persistent://tenant/namespace/REGEX, "
            "the tenant and namespace written out"
        )
    return f"{parts[0]}/{parts[1]}"


def full_pattern(pattern: re.Pattern) -> re.Pattern:
    """The pattern against full topic names (a bare one is of public/default)."""
    if pattern.pattern.startswith("persistent://"):
        return pattern
    return re.compile("persistent://public/default/" + pattern.pattern, pattern.flags)


class MultiTopicConsumer:
    """One subscription on several topics; made by Client.subscribe with a list of
    topics or a compiled pattern."""

    def __init__(
        self,
        open_one: Callable[[str], Awaitable[Consumer]],
        subscription_name: str,
        options: ConsumerOptions,
        list_topics: Callable[[], Awaitable[list[str]]] | None = None,
        pattern: re.Pattern | None = None,
        partitioned_topic: str | None = None,
        partitions_of: Callable[[], Awaitable[list[str]]] | None = None,
        open_new_partition: Callable[[str], Awaitable[Consumer]] | None = None,
    ):
        self.options = options
        # Of one partitioned topic: its name, and its partitions' consumers by index
        # (a MessageId names its partition, so a bare id finds its consumer).
        self._partitioned_topic = partitioned_topic
        self._by_partition: dict[int, Consumer] = {}
        self._open_one = open_one
        self._subscription = subscription_name
        self._list_topics = list_topics
        self._pattern = pattern
        self._consumers: dict[str, Consumer] = {}
        self._pumps: list[asyncio.Task] = []
        self._pumped: asyncio.Queue[Messages] = asyncio.Queue()
        self._room: dict[str, asyncio.Semaphore] = {}
        self._current: list[Message] = []
        self._discovery: asyncio.Task | None = None
        # A partitioned topic's partition names now (partitions_of) and the opener of
        # a partition it gained since (from its earliest message).
        self._partitions_of = partitions_of
        self._open_new_partition = open_new_partition
        self._closed = False
        self._reopen_listeners: list[Callable[[str], None]] = []
        self._ack_grouping = AckGrouping(
            self, options.ack_grouping_time_ms, options.ack_grouping_max_size, several=True
        )
        # acknowledge_nowait is the grouping's add itself: one call per ack, no frame
        # in between (the blocking client's acknowledge is this, per message).
        self.acknowledge_nowait = self._ack_grouping.add

    async def _open(self, topics: list[str]) -> None:
        for topic in topics:
            await self._add(topic)
        if self._pattern is not None:
            self._discovery = asyncio.create_task(self._discover())
        elif (
            self._partitions_of is not None
            and self._open_new_partition is not None
            and self.options.partitions_update_interval_s > 0
        ):
            self._discovery = asyncio.create_task(self._follow_partitions())

    async def _follow_partitions(self) -> None:
        """Subscribe to the partitions the topic gained since."""
        assert self._partitions_of is not None and self._open_new_partition is not None
        while not self._closed:
            await asyncio.sleep(self.options.partitions_update_interval_s)
            with contextlib.suppress(StableLineError):
                for index, name in enumerate(await self._partitions_of()):
                    if index not in self._by_partition and not self._closed:
                        await self._add(name, self._open_new_partition)

    async def _add(
        self, topic: str, open_one: Callable[[str], Awaitable[Consumer]] | None = None
    ) -> None:
        consumer = await (open_one or self._open_one)(topic)
        if self._closed:  # closed while it was opening
            with contextlib.suppress(Exception):
                await consumer.close()
            return
        consumer.add_reopen_listener(self._reopened)
        self._consumers[consumer.topic()] = consumer
        if self._partitioned_topic is not None:
            self._by_partition[consumer._partition] = consumer
        room = self._room[consumer.topic()] = asyncio.Semaphore(PUMPED_BATCHES_PER_TOPIC)
        self._pumps.append(asyncio.create_task(self._pump(consumer, room)))

    async def _pump(self, consumer: Consumer, room: asyncio.Semaphore) -> None:
        batch_size = min(consumer.options.receiver_queue_size, PUMP_BATCH_MAX)
        while not self._closed:
            await room.acquire()
            try:
                batch = await consumer.batch_receive(batch_size, _PUMP_WAIT_MS)
            except StableLineError:
                room.release()
                return  # closed, or given up: its receive fails alone
            if batch:
                self._pumped.put_nowait(batch)
            else:
                room.release()

    async def _discover(self) -> None:
        """Subscribe to topics matching the pattern that appeared since."""
        while not self._closed:
            await asyncio.sleep(PATTERN_DISCOVERY_PERIOD_S)
            with contextlib.suppress(StableLineError):
                for topic in await self._matching():
                    if topic not in self._consumers:
                        await self._add(topic)

    async def _matching(self) -> list[str]:
        assert self._list_topics is not None and self._pattern is not None
        return [t for t in await self._list_topics() if self._pattern.fullmatch(t)]

    def topic(self) -> str:
        """The topics, comma-separated, as Pulsar's multi-topic consumer names itself;
        a partitioned topic's consumer: that topic's name."""
        if self._partitioned_topic is not None:
            return self._partitioned_topic
        return ",".join(self._consumers)

    def topics(self) -> list[str]:
        return list(self._consumers)

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return next(iter(self._consumers.values())).consumer_name() if self._consumers else ""

    def is_connected(self) -> bool:
        return not self._closed and all(c.is_connected() for c in self._consumers.values())

    @property
    def is_active(self) -> bool:
        return any(c.is_active for c in self._consumers.values())

    async def get_last_message_id(self) -> MessageId:
        raise StableLineError(
            "a consumer of several topics has no one last message id: ask "
            "client.get_last_message_id(topic) for each"
        )

    def _taken(self, batch: Messages) -> Messages:
        self._room[batch.runs()[0][0].topic].release()
        return batch

    async def batch_receive(
        self,
        max_num_messages: int = BATCH_RECEIVE_MAX_MESSAGES,
        timeout_millis: int = BATCH_RECEIVE_TIMEOUT_MS,
    ) -> Messages:
        """The next batch of one topic (at most max_num_messages)."""
        if self._current:
            messages, self._current = (
                self._current[:max_num_messages],
                self._current[max_num_messages:],
            )
            return Messages([(m._entry, (m._index,)) for m in messages])
        try:
            async with asyncio.timeout(timeout_millis / 1000):
                batch = self._taken(await self._pumped.get())
        except TimeoutError:
            return Messages()
        if len(batch) > max_num_messages:
            messages = list(batch)
            self._current = messages[max_num_messages:]
            return Messages([(m._entry, (m._index,)) for m in messages[:max_num_messages]])
        return batch

    async def receive(self, timeout_millis: int | None = None) -> Message:
        if not self._current:
            try:
                async with asyncio.timeout(
                    None if timeout_millis is None else timeout_millis / 1000
                ):
                    self._current = list(self._taken(await self._pumped.get()))
            except TimeoutError:
                raise Timeout(f"no message on {self.topic()} within {timeout_millis} ms") from None
        return self._current.pop(0)

    def _drop_taken(self) -> None:
        """Forget what was taken and not given out: it is unacknowledged, so it comes
        again (after a redelivery or a seek)."""
        self._current = []
        while not self._pumped.empty():
            self._taken(self._pumped.get_nowait())

    def add_reopen_listener(self, listener: Callable[[str], None]) -> None:
        """Call `listener(topic)` when one topic's stream is replaced (see
        Consumer.add_reopen_listener), after what was pumped of it is dropped."""
        self._reopen_listeners.append(listener)

    def _reopened(self, topic: str) -> None:
        """A topic's stream was replaced and its receiver queue cleared: what was
        pumped of it and not given out is dropped too, as the broker delivers it
        again (any other topic's messages stay)."""
        self._current = [m for m in self._current if m._entry.topic != topic]
        kept = []
        while not self._pumped.empty():
            batch = self._pumped.get_nowait()
            if batch.runs()[0][0].topic == topic:
                self._taken(batch)
            else:
                kept.append(batch)
        for batch in kept:
            self._pumped.put_nowait(batch)
        for listener in list(self._reopen_listeners):
            listener(topic)

    def _consumer_of(self, item: Message | MessageId) -> Consumer:
        if isinstance(item, Message):
            return self._consumers[item.topic_name()]
        if len(self._consumers) == 1:
            return next(iter(self._consumers.values()))
        consumer = self._by_partition.get(item.partition())
        if consumer is not None:
            return consumer
        raise TypeError(
            "a consumer of several topics acknowledges a Message, or the MessageId it "
            "received (a partition's id names its partition): this MessageId does not "
            "name its topic"
        )

    async def acknowledge(self, message, txn=None) -> None:
        items = message if isinstance(message, list | Messages) else [message]
        by_topic: dict[Consumer, list] = {}
        for item in items:
            by_topic.setdefault(self._consumer_of(item), []).append(item)
        for consumer, group in by_topic.items():
            await consumer.acknowledge(group, txn)

    def acknowledge_nowait(self, message) -> None:
        """Consumer.acknowledge_nowait: grouped, from any thread; a bare MessageId
        that names no topic raises TypeError here."""
        self._ack_grouping.add(message)

    async def flush_acknowledgments(self) -> None:
        """Send the grouped acks and wait for the broker's answers."""
        await self._ack_grouping.confirm()

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        await self._consumer_of(message).acknowledge_cumulative(message)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        await self._consumer_of(message).negative_acknowledge(message)

    async def redeliver_unacknowledged_messages(self) -> None:
        self._drop_taken()
        for consumer in self._consumers.values():
            await consumer.redeliver_unacknowledged_messages()

    async def seek(self, target: MessageId | int) -> None:
        if isinstance(target, MessageId):
            raise TypeError("a consumer of several topics seeks to a publish time in ms only")
        self._drop_taken()
        for consumer in self._consumers.values():
            await consumer.seek(target)

    async def unsubscribe(self) -> None:
        for consumer in self._consumers.values():
            await consumer.unsubscribe()
        await self.close()

    async def close(self) -> None:
        """Close after the grouped acks are confirmed."""
        if self._closed:
            return
        with contextlib.suppress(StableLineError):
            await self._ack_grouping.confirm()
        self._closed = True
        for task in [*self._pumps, *([self._discovery] if self._discovery else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for consumer in self._consumers.values():
            with contextlib.suppress(Exception):
                await consumer.close()


async def list_namespace(connection, namespace: str) -> list[str]:
    """The namespace's topics (Admin ListTopics: a superuser's, with authorization on)."""
    response = await connection.unary(
        connection.admin.ListTopics, admin_pb.ListTopicsRequest(namespace=namespace)
    )
    return [str(TopicName.parse(topic)) for topic in response.topics]
