"""The data plane over gRPC: Produce, Subscribe, Fetch, GetLastMessageId, transactions,
and Lookup (which broker serves a topic: lookup.py).

Wire handling only: requests are turned into engine values by convert.py and
answered from them; what a call does lives with the engines (transactional acks in
txn/transactional_acks.py, ends in the coordinator).

Ownership: a transaction belongs to the role that opened it (anonymous with
authentication off), and only that role or a superuser may end it, send or ack in it,
or read it; the check is one dict look-up per transactional request (a send batch,
an ack, an end), never per message. Transaction names are per role, and the
per-client limit on open transactions counts per role (per connection when
authentication is off, where every caller is the same anonymous role). A producer
name is held by its connected producer (Topic.add_publisher).

Creation on first use: Produce or Subscribe naming an unknown topic creates it when
its namespace's auto topic creation policy (topics/namespace_policies.py) allows it and the
caller may create it (Guard.may_create_topic: produce on it, with authorization on);
a namespace without the policy creates it for such a caller, or for any caller
allowed the call when `allow_auto_topic_creation` is set. Otherwise the call fails
TopicNotFound.

Fenced writes (topics/write_gate.py): a send, an ack or a seek the write gate refuses is
not answered on its own; its stream ends with BrokerFenced (UNAVAILABLE), so the
client reconnects and sends it again, as after a broken connection, and the
application sees nothing unless the broker stays fenced past its operation timeout."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Iterator

from dispatcher import (
    Consumer,
    ControlEvent,
    DispatcherError,
    IsolationLevel,
    Subscription,
    SubscriptionType,
)
from managed_ledger import LedgerClosedError, ManagedLedgerError, Position
from stableline._proto import broker_pb2 as pb
from stableline._proto import broker_pb2_grpc
from stableline.broker.cluster.lookup import TopicLookup
from stableline.broker.config import BrokerConfig
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import abort, classify, invalid
from stableline.broker.grpc.produce_session import ProduceSession
from stableline.broker.security.caller import (
    CURRENT_CALLER,
    may_create_on_first_use,
    not_created_on_first_use,
)
from stableline.broker.topics.registry import TopicNotFoundError, TopicRegistry
from stableline.broker.topics.topic import ProducerBusyError, Publisher, Topic
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.broker.txn.coordinators import Coordinators
from stableline.broker.txn.transactional_acks import ack_in_any_transaction
from stableline.names import InvalidNameError, check_name
from stableline.topic_name import TopicName
from txnbuffer import TransactionError
from txnbuffer.producer_state import ANONYMOUS_PREFIX

log = logging.getLogger(__name__)

MAX_FETCH_ENTRIES = 10_000
MAX_FETCH_WAIT_MS = 30_000


class BrokerService(broker_pb2_grpc.BrokerServicer):
    def __init__(
        self,
        registry: TopicRegistry,
        config: BrokerConfig,
        coordinators: Coordinators,
        lookup: TopicLookup,
    ):
        self.registry = registry
        self.config = config
        self.coordinators = coordinators
        self.lookup = lookup
        self._run_tag = secrets.token_hex(4)
        self._generated_names = itertools.count(1)

    @staticmethod
    def _checked_as() -> str | None:
        """The role a transaction must belong to for this call; None: any (a superuser,
        or authentication off)."""
        caller = CURRENT_CALLER.get()
        return None if caller is None else caller.checked_as

    @staticmethod
    def _txn_owner(context) -> tuple[str, str]:
        """(owner, client) of a transaction this call opens: the role, counted per role;
        anonymous and counted per connection when authentication is off."""
        caller = CURRENT_CALLER.get()
        if caller is None:
            return "", context.peer()
        return caller.role, caller.role

    async def _topic_in_use(self, name: TopicName) -> Topic:
        """The topic a Produce or Subscribe names, created on its first use when the
        caller may create it (see the module docstring)."""
        caller = CURRENT_CALLER.get()
        policy = self.registry.namespace_policies.auto_topic_creation(name.namespace_path)
        may_create = may_create_on_first_use(
            caller, name, self.config.allow_auto_topic_creation, policy
        )
        if not may_create and not self.registry.exists(name):
            raise TopicNotFoundError(not_created_on_first_use(caller, name, policy))
        return await self.registry.get(name, create=may_create)

    # ------------------------------------------------------------ Produce

    async def Produce(self, request_iterator, context) -> AsyncIterator[pb.ProduceResponse]:
        try:
            first = await anext(request_iterator)
        except StopAsyncIteration:
            return
        if first.WhichOneof("request") != "open":
            await abort(context, invalid("the first message of a Produce stream must be 'open'"))
        try:
            if first.open.producer_name:
                check_name("producer", first.open.producer_name)
            topic = await self._topic_in_use(TopicName.parse(first.open.topic))
        except InvalidNameError as error:
            await abort(context, invalid(str(error)))
        except Exception as error:
            await abort(context, error)
        # A generated name is unique across runs: the client reopens with it after a
        # reconnect, and its batches are de-duplicated like any named producer's.
        new_producer = not first.open.producer_name
        producer_name = (
            first.open.producer_name
            or f"{ANONYMOUS_PREFIX}{self._run_tag}-{next(self._generated_names)}"
        )
        caller = CURRENT_CALLER.get()
        txn_caller = self._checked_as()
        out: asyncio.Queue = asyncio.Queue()
        publisher = Publisher(
            producer_name,
            self.config.max_pending_publishes_per_producer,
            role="" if caller is None else caller.role,
            end_stream=out.put_nowait,  # the error ends this stream
        )
        try:
            topic.add_publisher(publisher)
        except (ProducerBusyError, BrokerFencedError) as error:
            await abort(context, error)
        session = ProduceSession(
            topic,
            publisher,
            new_producer,
            self.registry,
            self.coordinators,
            self.config.max_message_size,
            self.config.max_pending_publishes_per_producer,
            txn_caller,
            out,
        )
        try:
            yield pb.ProduceResponse(
                opened=pb.ProducerOpened(
                    topic=str(topic.name),
                    producer_name=producer_name,
                    max_message_size=self.config.max_message_size,
                    last_sequence_id=await topic.last_sequence_id(producer_name, new_producer),
                )
            )
            session.start(request_iterator)
            while (item := await session.answer()) is not None:
                if isinstance(item, BaseException):
                    await abort(context, item)
                yield item
        finally:
            session.close()
            topic.remove_publisher(publisher)

    # ------------------------------------------------------------ Subscribe

    async def Subscribe(self, request_iterator, context) -> AsyncIterator[pb.SubscribeResponse]:
        try:
            first = await anext(request_iterator)
        except StopAsyncIteration:
            return
        if first.WhichOneof("request") != "subscribe":
            await abort(
                context,
                invalid(
                    "the first message of a Subscribe stream must be 'subscribe' "
                    "(topic, subscription, type, isolation level)"
                ),
            )
        request = first.subscribe
        try:
            try:
                check_name("subscription", request.subscription)
            except InvalidNameError as error:
                raise invalid(str(error)) from None
            topic = await self._topic_in_use(TopicName.parse(request.topic))
            type_ = convert.subscription_type(request.type)
            consumer = Consumer(
                name=request.consumer_name or f"consumer-{id(context):x}",
                priority_level=request.priority_level,
            )
            if type_ is SubscriptionType.KEY_SHARED:
                consumer.key_shared = convert.key_shared_policy(request.key_shared)
            subscription = topic.subscribe(
                request.subscription,
                consumer,
                type_,
                convert.isolation_level(request.isolation_level),
                request.initial_position == pb.INITIAL_POSITION_EARLIEST,
            )
        except Exception as error:
            await abort(context, error)
        yield pb.SubscribeResponse(
            subscribed=pb.Subscribed(
                topic=str(topic.name),
                subscription=subscription.name,
                isolation_level=convert.ISOLATION_TO_PROTO[subscription.isolation_level],
            )
        )
        reader = asyncio.create_task(
            self._read_subscribe_requests(request_iterator, topic, subscription, consumer)
        )
        try:
            while True:
                item = await consumer.outbox.get()
                if isinstance(item, list):
                    for frame in _frames(
                        item, self.config.max_entries_per_frame, self.config.max_fetch_bytes
                    ):
                        yield pb.SubscribeResponse(
                            deliveries=pb.Deliveries(
                                entries=[convert.delivery_to_proto(d) for d in frame]
                            )
                        )
                elif isinstance(item, ControlEvent):
                    if item.kind == "active":
                        yield pb.SubscribeResponse(
                            active_change=pb.ActiveConsumerChange(is_active=bool(item.value))
                        )
                    elif item.kind in ("closed", "end"):
                        break
                elif isinstance(item, BaseException):
                    await abort(context, item)
                else:
                    yield item
        finally:
            reader.cancel()
            subscription.remove_consumer(consumer)

    async def _read_subscribe_requests(
        self, request_iterator, topic, subscription: Subscription, consumer: Consumer
    ) -> None:
        outbox = consumer.outbox
        confirmations: set[asyncio.Task] = set()
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                if kind == "flow":
                    if request.flow.permits < 0:
                        outbox.put_nowait(
                            invalid(f"flow permits must be >= 0, got {request.flow.permits}")
                        )
                        return
                    subscription.flow(consumer, request.flow.permits)
                elif kind == "ack":
                    ack = request.ack
                    ticket = topic.write_gate.admit(topic.name)
                    if ack.HasField("txn_id"):
                        # Awaited in turn: the transaction's coordinator may be a peer.
                        outbox.put_nowait(await self._txn_ack(subscription, ack))
                        continue
                    done = self._done(ack.request_id, self._ack, subscription, ack)
                    if done.done.error_code:
                        outbox.put_nowait(done)
                    else:
                        confirming = asyncio.create_task(
                            self._confirm_durable(topic, ticket, subscription, outbox, done)
                        )
                        confirmations.add(confirming)
                        confirming.add_done_callback(confirmations.discard)
                elif kind == "redeliver":
                    redeliver = request.redeliver
                    positions = [p for p, _ in convert.message_positions(redeliver.message_ids)]
                    counts = [c if c >= 0 else None for c in redeliver.redelivery_counts]
                    try:
                        subscription.redeliver(consumer, positions or None, counts or None)
                    except ValueError as error:
                        outbox.put_nowait(invalid(str(error)))
                        return
                elif kind == "seek":
                    seek = request.seek
                    topic.write_gate.admit(topic.name)
                    outbox.put_nowait(self._done(seek.request_id, self._seek, subscription, seek))
                elif kind == "unsubscribe":
                    done = await self._unsubscribe(
                        topic, subscription, consumer, request.unsubscribe.request_id
                    )
                    outbox.put_nowait(done)
                    if not done.done.error_code:
                        outbox.put_nowait(ControlEvent("end"))
                        return
                else:
                    outbox.put_nowait(
                        invalid(f"unexpected {kind!r} on a Subscribe stream after subscribe")
                    )
                    return
        except asyncio.CancelledError:
            raise
        except BrokerFencedError as error:
            outbox.put_nowait(error)  # unanswered: the client sends it again
            return
        except Exception as error:
            log.debug("subscribe stream of %s ended: %s", consumer.name, error)
        outbox.put_nowait(ControlEvent("end"))

    @staticmethod
    async def _confirm_durable(
        topic: Topic,
        ticket: int,
        subscription: Subscription,
        outbox: asyncio.Queue,
        done: pb.SubscribeResponse,
    ) -> None:
        """Answer an ack once the cursor holding it is durable: a message whose ack was
        confirmed never comes back after a crash (a transactional ack is confirmed by
        its commit instead). Fenced meanwhile: the stream ends unanswered."""
        try:
            await subscription.cursor.persist()
            topic.write_gate.confirm(ticket, topic.name)
        except BrokerFencedError as error:
            outbox.put_nowait(error)
            return
        except Exception as error:
            failure = classify(error)
            done.done.error_code, done.done.error_message = failure.code, str(failure)
        outbox.put_nowait(done)

    @staticmethod
    def _done(request_id: int, action, *args) -> pb.SubscribeResponse:
        try:
            action(*args)
        except (DispatcherError, TransactionError, ValueError) as error:
            failure = classify(error)
            return pb.SubscribeResponse(
                done=pb.RequestDone(
                    request_id=request_id, error_code=failure.code, error_message=str(failure)
                )
            )
        return pb.SubscribeResponse(done=pb.RequestDone(request_id=request_id))

    async def _txn_ack(self, subscription: Subscription, ack: pb.Ack) -> pb.SubscribeResponse:
        try:
            await ack_in_any_transaction(
                self.coordinators,
                subscription,
                convert.txn_id(ack.txn_id),
                convert.message_positions(ack.message_ids),
                ack.cumulative,
                self._checked_as(),
            )
        except Exception as error:
            failure = classify(error)
            return pb.SubscribeResponse(
                done=pb.RequestDone(
                    request_id=ack.request_id, error_code=failure.code, error_message=str(failure)
                )
            )
        return pb.SubscribeResponse(done=pb.RequestDone(request_id=ack.request_id))

    def _ack(self, subscription: Subscription, ack: pb.Ack) -> None:
        ids = convert.message_positions(ack.message_ids)
        if not ids:
            raise ValueError("an ack must name at least one message id")
        if ack.cumulative:
            if len(ids) != 1:
                raise ValueError("a cumulative ack names exactly one message id")
            subscription.ack_cumulative(*ids[0])
        else:
            subscription.ack(ids)

    @staticmethod
    def _seek(subscription: Subscription, seek: pb.Seek) -> None:
        ledger = subscription.cursor.ledger
        if seek.WhichOneof("target") == "timestamp_ms":
            target = ledger.find_position_by_time(seek.timestamp_ms)
        elif seek.WhichOneof("target") == "message_id":
            message_id = seek.message_id
            if message_id.ledger_id < 0:
                target = ledger.first_position()
            elif message_id.ledger_id >= 2**62:
                target = ledger.last_confirmed
            else:
                target = Position(message_id.ledger_id, message_id.entry_id - 1)
        else:
            raise ValueError("seek needs a message id or a timestamp")
        subscription.seek(target)

    async def _unsubscribe(
        self, topic, subscription: Subscription, consumer: Consumer, request_id: int
    ) -> pb.SubscribeResponse:
        topic.write_gate.admit(topic.name)  # before the consumer is detached
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            return pb.SubscribeResponse(
                done=pb.RequestDone(
                    request_id=request_id,
                    error_code="SubscriptionBusy",
                    error_message=f"subscription {subscription.name!r} has {len(others)} other "
                    "consumer(s); close them before unsubscribing",
                )
            )
        subscription.remove_consumer(consumer)
        await topic.unsubscribe(subscription)
        return pb.SubscribeResponse(done=pb.RequestDone(request_id=request_id))

    # ------------------------------------------------------------ Fetch

    async def Fetch(self, request: pb.FetchRequest, context) -> pb.FetchResponse:
        try:
            level = convert.isolation_level(request.isolation_level)
            if request.max_entries < 0 or request.max_wait_ms < 0 or request.max_bytes < 0:
                raise invalid("max_entries, max_wait_ms and max_bytes must be >= 0")
            name = TopicName.parse(request.topic)
            if level is IsolationLevel.READ_COMMITTED:
                topic = await self.registry.get_stable(name)
            else:
                topic = await self.registry.get(name, create=False)
        except Exception as error:
            await abort(context, error)
        view = topic.read_view(level)
        start = convert.position(request.start)
        max_entries = min(request.max_entries or 1000, MAX_FETCH_ENTRIES)
        max_bytes = min(
            request.max_bytes or self.config.max_fetch_bytes, self.config.max_fetch_bytes
        )
        if request.max_wait_ms and view.bound() < start:
            await self._wait_for(
                topic, lambda: view.bound() >= start, min(request.max_wait_ms, MAX_FETCH_WAIT_MS)
            )
        bound = view.bound()
        try:
            entries = topic.ledger.read(start, max_entries, bound, max_bytes)
        except (ManagedLedgerError, LedgerClosedError) as error:
            await abort(context, error)
        next_position = entries[-1].position.next_in_ledger() if entries else start
        if not request.include_markers:
            entries = [e for e in entries if not e.header.is_marker]
        aborted = []
        if level is IsolationLevel.READ_COMMITTED and entries:
            # Kafka's way: aborted entries go out with the list of aborted
            # transactions overlapping the range, and the reader filters them.
            aborted = [
                pb.AbortedTxn(
                    txn_id=convert.txn_id_to_proto(a.txn_id),
                    first_position=convert.position_to_proto(a.first_position),
                )
                for a in topic.buffer.aborted_overlapping(entries[0].position, entries[-1].position)
            ]
        response = pb.FetchResponse(
            next_position=convert.position_to_proto(next_position),
            bound=convert.position_to_proto(bound),
            aborted=aborted,
        )
        add = response.entries.add  # built in place: a copied list would copy every payload
        for entry in entries:
            add(
                ledger_id=entry.position.ledger_id,
                entry_id=entry.position.entry_id,
                metadata=convert.header_to_proto(entry.header),
                payload=entry.payload,
            )
        return response

    @staticmethod
    async def _wait_for(topic, ready, timeout_ms: int) -> None:
        event = asyncio.Event()
        topic.ledger.add_listener(event.set)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_ms / 1000):
                    while not ready():
                        event.clear()
                        await event.wait()
        finally:
            topic.ledger.remove_listener(event.set)

    # ------------------------------------------------------------ GetLastMessageId

    async def GetLastMessageId(self, request, context) -> pb.GetLastMessageIdResponse:
        """The LAC and the stable position (and, asked, the ledgers), read together:
        nothing awaits between them, so they describe one instant of the topic. The
        stable position is the recovered one (TopicRegistry.get_stable)."""
        try:
            topic = await self.registry.get_stable(TopicName.parse(request.topic))
        except Exception as error:
            await abort(context, error)
        ledgers = topic.ledger.ledger_infos() if request.include_ledgers else ()
        return pb.GetLastMessageIdResponse(
            last_confirmed_entry=convert.position_to_proto(topic.ledger.last_confirmed),
            max_read_position=convert.position_to_proto(
                topic.read_view(IsolationLevel.READ_COMMITTED).bound()
            ),
            ledgers=[convert.ledger_to_proto(info) for info in ledgers],
        )

    # ------------------------------------------------------------ Lookup

    async def Lookup(self, request: pb.LookupRequest, context) -> pb.LookupResponse:
        """The broker serving the topic (lookup.py): this one, for any topic that
        exists or that the caller's first use would create."""
        try:
            owner = await self.lookup.owner(TopicName.parse(request.topic), CURRENT_CALLER.get())
        except Exception as error:
            await abort(context, error)
        return convert.owner_to_proto(owner)

    # ------------------------------------------------------------ transactions

    async def NewTransaction(self, request, context) -> pb.NewTransactionResponse:
        owner, client = self._txn_owner(context)
        try:
            opened = await self.coordinators.open(request.timeout_ms, request.name, owner, client)
        except Exception as error:
            await abort(context, error)
        return pb.NewTransactionResponse(
            txn_id=convert.txn_id_to_proto(opened.txn_id),
            state=opened.state.value,
            coordinator_address=opened.coordinator_address,
        )

    async def EndTransaction(self, request, context) -> pb.EndTransactionResponse:
        try:
            if request.action not in (pb.TXN_ACTION_COMMIT, pb.TXN_ACTION_ABORT):
                raise invalid(f"unknown transaction action {request.action}: use COMMIT or ABORT")
            txn_id = convert.txn_id(request.txn_id)
            coordinator = await self.coordinators.deciding(txn_id)
            state = await coordinator.end(
                txn_id, commit=request.action == pb.TXN_ACTION_COMMIT, caller=self._checked_as()
            )
        except Exception as error:
            await abort(context, error)
        return pb.EndTransactionResponse(txn_id=request.txn_id, state=state.value)

    async def GetTransaction(self, request, context) -> pb.GetTransactionResponse:
        """The coordinator's record of a transaction: how a client whose end was lost
        with a connection learns how it ended, without admin rights."""
        try:
            txn_id = convert.txn_id(request.txn_id)
            coordinator = await self.coordinators.leading(txn_id)
            meta = coordinator.owned(txn_id, self._checked_as())
        except Exception as error:
            await abort(context, error)
        return convert.transaction_to_proto(meta)


def _frames(deliveries: list, max_entries: int, max_bytes: int) -> Iterator[list]:
    """The deliveries cut into frames of at most max_entries entries and max_bytes
    bytes of payload (a frame holds at least one entry, whatever its size)."""
    if (
        len(deliveries) <= max_entries
        and sum(len(d.entry.payload) for d in deliveries) <= max_bytes
    ):
        yield deliveries  # the usual case: one frame
        return
    frame: list = []
    size = 0
    for delivery in deliveries:
        length = len(delivery.entry.payload)
        if frame and (len(frame) >= max_entries or size + length > max_bytes):
            yield frame
            frame, size = [], 0
        frame.append(delivery)
        size += length
    if frame:
        yield frame
