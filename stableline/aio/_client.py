"""The async client: its connections, and factories for producers, consumers, readers
and transactions, each handed the connection it runs on.

Every factory takes its options as keyword arguments with the defaults of
stableline.aio.options, builds the options value and opens with it; the blocking
client builds the same value and calls the same `open_*` method.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from stableline._auth import AuthenticationToken
from stableline._errors import (
    AuthorizationError,
    OperationNotSupported,
    StableLineError,
    TopicUnavailable,
)
from stableline._keys import BatchingType, KeySharedPolicy
from stableline._owners import MAX_REDIRECTS, RedirectPolicy, first_answer_async, on_owner_async
from stableline._proto import admin_pb2 as admin_pb
from stableline._proto import broker_pb2 as pb
from stableline._routing import MessageRoutingMode, RoutedMessage
from stableline._types import (
    ConsumerType,
    InitialPosition,
    IsolationLevel,
    LookupResult,
    MessageId,
)
from stableline.aio._connection import Connection, ConnectionPool
from stableline.aio._consumer import Consumer
from stableline.aio._multi_consumer import (
    MultiTopicConsumer,
    full_pattern,
    list_namespace,
    pattern_namespace,
)
from stableline.aio._partitioned_producer import PartitionedProducer
from stableline.aio._producer import Producer
from stableline.aio._reader import Reader
from stableline.aio._reconnect import Backoff, FindOwner, is_transient
from stableline.aio._transaction import Transaction
from stableline.aio._transport import ChannelFactory, grpc_channel
from stableline.aio.options import (
    CLIENT_DEFAULTS,
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    READER_DEFAULTS,
    TRANSACTION_TIMEOUT_MS,
    ClientOptions,
    ConsumerOptions,
    ProducerOptions,
    ReaderOptions,
)
from stableline.partitions import partition_topic, partition_topics, split_partition
from stableline.topic_name import TopicName

T = TypeVar("T")


def _owner_moving(error: BaseException) -> bool:
    """A call on a topic's owner worth another round: the broker is away or not ready,
    or the owner named is down (a lookup may name it until its session lapses)."""
    return is_transient(error) or type(error) is TopicUnavailable


# How a topic's open follows NotOwner answers (stableline._owners).
REDIRECTS = RedirectPolicy(max_redirects=MAX_REDIRECTS)


class Client:
    """`async with Client("127.0.0.1:6650") as client: ...`"""

    def __init__(
        self,
        service_url: str,
        operation_timeout_seconds: float = CLIENT_DEFAULTS.operation_timeout_seconds,
        *,
        authentication: AuthenticationToken | None = CLIENT_DEFAULTS.authentication,
        tls_trust_certs_file_path: str | Path | None = CLIENT_DEFAULTS.tls_trust_certs_file_path,
        tls_certificate_file_path: str | Path | None = CLIENT_DEFAULTS.tls_certificate_file_path,
        tls_private_key_file_path: str | Path | None = CLIENT_DEFAULTS.tls_private_key_file_path,
        connection_backoff: Backoff | None = CLIENT_DEFAULTS.connection_backoff,
    ):
        """Producers and consumers reconnect on their own when the broker goes away,
        waiting `connection_backoff` between attempts; after operation_timeout_seconds
        without a broker their pending sends and receives fail with BrokerUnavailable.
        A broker never reached fails the first call at once."""
        self._start(
            service_url,
            ClientOptions(
                operation_timeout_seconds,
                authentication=authentication,
                tls_trust_certs_file_path=tls_trust_certs_file_path,
                tls_certificate_file_path=tls_certificate_file_path,
                tls_private_key_file_path=tls_private_key_file_path,
                connection_backoff=connection_backoff,
            ),
        )

    @classmethod
    def with_options(
        cls,
        service_url: str,
        options: ClientOptions,
        channel_factory: ChannelFactory = grpc_channel,
    ) -> Client:
        """A client made from an options value (what the keyword arguments build).
        `channel_factory(address, tls, options)` makes every channel it opens: a real
        gRPC channel unless a test hands it one that answers in process."""
        client = cls.__new__(cls)
        client._start(service_url, options, channel_factory)
        return client

    def _start(
        self,
        service_url: str,
        options: ClientOptions,
        channel_factory: ChannelFactory = grpc_channel,
    ) -> None:
        self.options = options
        self._connections = ConnectionPool(service_url, options, channel_factory)
        # Topic -> the connection of the broker a lookup named as its owner. A topic
        # not here is opened on the service connection: standalone, that is the
        # owner of every topic and no lookup is ever made.
        self._owners: dict[str, Connection] = {}
        self._closeables: list[
            Producer | PartitionedProducer | Consumer | MultiTopicConsumer | Reader
        ] = []

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_exc) -> None:
        await self.close()

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = PRODUCER_DEFAULTS.producer_name,
        batching_max_messages: int = PRODUCER_DEFAULTS.batching_max_messages,
        batching_max_publish_delay_ms: float = PRODUCER_DEFAULTS.batching_max_publish_delay_ms,
        max_pending_messages: int = PRODUCER_DEFAULTS.max_pending_messages,
        block_if_queue_full: bool = PRODUCER_DEFAULTS.block_if_queue_full,
        batching_type: BatchingType = PRODUCER_DEFAULTS.batching_type,
        message_routing_mode: MessageRoutingMode = PRODUCER_DEFAULTS.message_routing_mode,
        message_router: Callable[[RoutedMessage, int], int] | None = (
            PRODUCER_DEFAULTS.message_router
        ),
        partitions_update_interval_s: float = PRODUCER_DEFAULTS.partitions_update_interval_s,
    ) -> Producer | PartitionedProducer:
        """A producer; past max_pending_messages unacknowledged, send() waits when
        block_if_queue_full, else raises ProducerQueueIsFull (Pulsar's semantics).
        A batch holds messages of one partition key at most: BatchingType.Default
        ends a batch where the key changes (send order kept), KeyBased groups a
        batching window's messages by key (order kept per key). On a partitioned
        topic, a keyed message goes to its key's partition and the others by
        message_routing_mode (stableline._routing)."""
        return await self.open_producer(
            topic,
            ProducerOptions(
                producer_name,
                batching_max_messages,
                batching_max_publish_delay_ms,
                max_pending_messages,
                block_if_queue_full,
                batching_type,
                message_routing_mode,
                message_router,
                partitions_update_interval_s,
            ),
        )

    async def open_producer(
        self, topic: str, options: ProducerOptions
    ) -> Producer | PartitionedProducer:
        """create_producer with its options as one value."""
        partitions = await self.partitions_of(topic)
        if partitions:
            opened: list[Producer] = []
            try:
                for name in partitions:
                    opened.append(await self._open_producer_on_owner(name, options))
            except BaseException:
                for producer in opened:
                    await producer.close()
                raise
            base = TopicName.parse(topic)

            async def open_partition(index: int) -> Producer:
                return await self._open_producer_on_owner(
                    str(partition_topic(base, index)), options
                )

            partitioned = PartitionedProducer(
                str(base),
                opened,
                options,
                lambda: self.get_partitioned_topic_metadata(topic),
                open_partition,
            )
            self._closeables.append(partitioned)
            return partitioned
        producer = await self._open_producer_on_owner(topic, options)
        self._closeables.append(producer)
        return producer

    async def _open_producer_on_owner(self, topic: str, options: ProducerOptions) -> Producer:
        async def open_on(connection: Connection) -> Producer:
            producer = Producer(connection, topic, options, self._owner_finder(topic))
            await producer._open()
            return producer

        return await self._on_owner(topic, open_on)

    async def get_partitioned_topic_metadata(self, topic: str) -> int:
        """How many partitions `topic` has; 0 when it is not partitioned."""

        async def attempt(connection: Connection) -> admin_pb.PartitionedTopicMetadata:
            return await connection.unary(
                connection.admin.GetPartitionedTopicMetadata, admin_pb.TopicRequest(topic=topic)
            )

        try:
            response = await self._connections.on_seeds(attempt, "partitioned topic metadata")
        except AuthorizationError:
            # A role that may not look the topic up may neither produce nor consume
            # there: the call that follows is refused with its own, precise reason.
            return 0
        return response.partitions

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions' topic names of a partitioned topic, else [topic] (Pulsar's
        Client.get_topic_partitions)."""
        return await self.partitions_of(topic) or [str(TopicName.parse(topic))]

    async def partitions_of(self, topic: str) -> list[str]:
        """The partitions' topic names of a partitioned topic; [] when not partitioned."""
        count = await self.get_partitioned_topic_metadata(topic)
        return [str(name) for name in partition_topics(TopicName.parse(topic), count)]

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern,
        subscription_name: str,
        consumer_type: ConsumerType = CONSUMER_DEFAULTS.consumer_type,
        initial_position: InitialPosition = CONSUMER_DEFAULTS.initial_position,
        isolation_level: IsolationLevel = CONSUMER_DEFAULTS.isolation_level,
        receiver_queue_size: int = CONSUMER_DEFAULTS.receiver_queue_size,
        consumer_name: str | None = CONSUMER_DEFAULTS.consumer_name,
        ack_timeout_ms: int = CONSUMER_DEFAULTS.ack_timeout_ms,
        negative_ack_redelivery_delay_ms: int = CONSUMER_DEFAULTS.negative_ack_redelivery_delay_ms,
        priority_level: int = CONSUMER_DEFAULTS.priority_level,
        key_shared_policy: KeySharedPolicy | None = CONSUMER_DEFAULTS.key_shared_policy,
        ack_grouping_time_ms: int = CONSUMER_DEFAULTS.ack_grouping_time_ms,
        ack_grouping_max_size: int = CONSUMER_DEFAULTS.ack_grouping_max_size,
        partitions_update_interval_s: float = CONSUMER_DEFAULTS.partitions_update_interval_s,
    ) -> Consumer | MultiTopicConsumer:
        """A consumer of `topic`; a list of topics or a compiled pattern makes one
        consumer of them all (see open_consumer)."""
        return await self.open_consumer(
            topic,
            subscription_name,
            ConsumerOptions(
                consumer_type,
                initial_position,
                isolation_level,
                receiver_queue_size,
                consumer_name,
                ack_timeout_ms,
                negative_ack_redelivery_delay_ms,
                priority_level,
                key_shared_policy,
                ack_grouping_time_ms,
                ack_grouping_max_size,
                partitions_update_interval_s,
            ),
        )

    async def open_consumer(
        self, topic: str | list[str] | re.Pattern, subscription_name: str, options: ConsumerOptions
    ) -> Consumer | MultiTopicConsumer:
        """subscribe with its options as one value. `topic`: a topic's name, a list of
        them, or a compiled pattern (re.compile("persistent://public/default/orders-.*"))
        matched against the namespace's topics now and every minute after (listing a
        namespace needs a superuser where authorization is on)."""
        connection = self._connections.service

        async def open_one(name: str, options: ConsumerOptions = options) -> Consumer:
            split = split_partition(TopicName.parse(name))
            # A partition's messages carry its index, wherever it was named.
            partition = -1 if split is None else split[1]

            async def open_on(on: Connection) -> Consumer:
                consumer = Consumer(
                    on, name, subscription_name, options, partition, self._owner_finder(name)
                )
                await consumer._open()
                return consumer

            return await self._on_owner(name, open_on)

        async def open_new_partition(name: str) -> Consumer:
            # A partition the topic gained after subscribing: from its first message,
            # which a producer may have sent before this consumer saw the new count.
            return await open_one(
                name, dataclasses.replace(options, initial_position=InitialPosition.Earliest)
            )

        partitioned_topic = None
        if isinstance(topic, str):
            partitions = await self.partitions_of(topic)
            if not partitions:
                consumer = await open_one(topic)
                self._closeables.append(consumer)
                return consumer
            # Every partition, with the subscription's isolation level on each.
            partitioned_topic = str(TopicName.parse(topic))
            multi = MultiTopicConsumer(
                open_one,
                subscription_name,
                options,
                partitioned_topic=partitioned_topic,
                partitions_of=lambda: self.partitions_of(topic),
                open_new_partition=open_new_partition,
            )
            topics = partitions
        elif isinstance(topic, re.Pattern):
            namespace = pattern_namespace(topic)
            multi = MultiTopicConsumer(
                open_one,
                subscription_name,
                options,
                list_topics=lambda: list_namespace(connection, namespace),
                pattern=full_pattern(topic),
            )
            topics = await multi._matching()
        elif isinstance(topic, list | tuple) and topic and all(isinstance(t, str) for t in topic):
            multi = MultiTopicConsumer(open_one, subscription_name, options)
            topics = []
            for name in dict.fromkeys(topic):  # a partitioned topic: its partitions
                topics += await self.partitions_of(name) or [name]
        else:
            raise TypeError(
                "topic must be a topic name, a non-empty list of them, or a compiled "
                f"re.Pattern, not {topic!r}"
            )
        try:
            await multi._open(topics)
        except BaseException:
            await multi.close()
            raise
        self._closeables.append(multi)
        return multi

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId = READER_DEFAULTS.start_message_id,
        isolation_level: IsolationLevel = READER_DEFAULTS.isolation_level,
    ) -> Reader:
        return await self.open_reader(topic, ReaderOptions(start_message_id, isolation_level))

    async def open_reader(self, topic: str, options: ReaderOptions) -> Reader:
        """create_reader with its options as one value."""
        count = await self.get_partitioned_topic_metadata(topic)
        if count:
            raise OperationNotSupported(
                f"{topic} is a partitioned topic ({count} partitions): a reader reads one "
                f"topic; create a reader on each partition ({topic}-partition-0 .. "
                f"{topic}-partition-{count - 1}) or subscribe to {topic}"
            )

        key = str(TopicName.parse(topic))

        async def open_on(connection: Connection) -> Reader:
            reader = Reader(connection, topic, options, self._owner_finder(key))
            await reader._open()
            return reader

        reader = await self._on_owner(topic, open_on)
        self._closeables.append(reader)
        return reader

    async def new_transaction(self, timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> Transaction:
        """Open a transaction; it aborts by itself if not ended within timeout_ms."""

        async def attempt(connection: Connection) -> pb.NewTransactionResponse:
            return await connection.unary(
                connection.broker.NewTransaction, pb.NewTransactionRequest(timeout_ms=timeout_ms)
            )

        # A retry after a lost answer leaves the first transaction open; it times out.
        response = await self._connections.on_seeds(attempt, "new transaction")
        connection = self._connections.service
        if response.coordinator_address:
            # In a cluster: the broker leading the transaction's shard ends it.
            connection = self._connections.get(response.coordinator_address)
        return Transaction(
            connection,
            response.txn_id.most_bits,
            response.txn_id.least_bits,
            timeout_ms,
            self._connections,
        )

    async def get_last_message_id(self, topic: str) -> MessageId:
        """The id of the topic's last confirmed entry, asked of its owner; an owner
        that went away is looked up again each round of the backoff (another broker
        may have taken the topic over), within operation_timeout_seconds."""
        last = await self._connections.retried(
            lambda: self._on_owner(topic, lambda c: c.last_confirmed_now(topic)),
            f"last message id of {topic}",
            retried=_owner_moving,
        )
        return MessageId(last.ledger_id, last.entry_id, -1)

    async def lookup_topic(self, topic: str) -> LookupResult:
        """Which broker serves `topic` (Pulsar's lookup; a single broker names itself).
        TopicNotFound when it does not exist and a producer of this client's role
        would not create it; needs produce or consume on it where authorization is on."""

        async def attempt(connection: Connection) -> pb.LookupResponse:
            return await connection.unary(connection.broker.Lookup, pb.LookupRequest(topic=topic))

        response = await self._connections.on_seeds(attempt, f"lookup of {topic}")
        try:
            return LookupResult.from_proto(response)
        except ValueError as error:
            raise StableLineError(str(error)) from None

    async def _on_owner(self, topic: str, open_on: Callable[[Connection], Awaitable[T]]) -> T:
        """`open_on(connection)` on the broker owning `topic`: the one a lookup named
        before, else the service connection; answered NotOwner, looks the topic up
        and tries the owner named (at most MAX_REDIRECTS times)."""
        key = str(TopicName.parse(topic))
        return await on_owner_async(
            REDIRECTS.redirects(several_seeds=len(self._connections.seeds) > 1),
            self._owners.get(key, self._connections.service),
            open_on,
            lambda: self._owner_connection(key),
            owner_known=key in self._owners,
            forget=lambda: self._owners.pop(key, None),
        )

    def _owner_finder(self, topic: str) -> FindOwner:
        """Where a stream on `topic` goes after its broker failed it (FindOwner)."""
        key = str(TopicName.parse(topic))

        async def owner_after(failed_on: Connection, failure: StableLineError) -> Connection:
            # The same broker again when no other could be named: the service URL
            # names only it, no lookup ever sent the topic elsewhere, and it is merely
            # away or not ready (a standalone broker restarting). Else the owner a
            # fresh lookup names, the cached one forgotten first: it may be dead.
            if (
                is_transient(failure)
                and key not in self._owners
                and self._connections.seeds == [failed_on.address]
            ):
                return failed_on
            self._owners.pop(key, None)
            return await self._owner_connection(key)

        return owner_after

    async def _owner_connection(self, topic: str) -> Connection:
        """The connection to `topic`'s owner, by a lookup on the first seed broker
        that answers; cached for the topic."""

        async def ask(seed: str) -> pb.LookupResponse:
            connection = self._connections.get(seed)
            return await connection.unary(connection.broker.Lookup, pb.LookupRequest(topic=topic))

        response = await first_answer_async(self._connections.seeds, ask)
        owner = self._connections.get(LookupResult.from_proto(response).grpc_address)
        self._owners[topic] = owner
        return owner

    async def shutdown(self) -> None:
        """Close at once, waiting for nothing: the connections go first, so sends
        without a receipt fail and unanswered acks are left (their messages come
        again), where close() would flush and wait."""
        await self._connections.close()
        await self.close()

    async def close(self) -> None:
        for closeable in reversed(self._closeables):
            with contextlib.suppress(Exception):
                await closeable.close()
        self._closeables.clear()
        await self._connections.close()
