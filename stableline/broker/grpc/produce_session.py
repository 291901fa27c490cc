"""One Produce stream after its open: sends read in order, appended, answered.

BrokerService.Produce opens the stream (the topic, the producer's name, its
Publisher on the topic) and hands the rest to a ProduceSession.

Promises:
- Sends are read in the stream's order, and a send's transaction is joined before
  the next send is read (a join asked of another broker must not let a later send
  append first: its sequence id would make this one a duplicate).
- At most `max_pending_publishes_per_producer` sends append at once; past it, or
  while the broker's pending writes are full, the session reads no more and gRPC
  flow control holds the producer.
- Every send is answered: a receipt, or a SendError (an unexpected error as an
  internal error id). A ProducerSends frame is answered with one SendReceipts once
  all its entries are settled; its errors go alone.
- A send the write gate refuses is not answered: the stream ends with the refusal
  (BrokerFenced), and the client sends it again after reconnecting.
- What a send must be (size, message count) is checked by topics/sends.py, the
  rules the Kafka face shares.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from stableline._proto import broker_pb2 as pb
from stableline.broker.failpoints import PUBLISH
from stableline.broker.grpc import convert
from stableline.broker.grpc.errors import classify, invalid
from stableline.broker.topics.sends import check_entry, check_size
from stableline.broker.topics.topic import Publisher, Topic
from stableline.broker.topics.write_gate import BrokerFencedError
from stableline.wire import count_messages, count_plain

if TYPE_CHECKING:
    from stableline.broker.topics.registry import TopicRegistry
    from stableline.broker.txn.coordinators import Coordinators

# A batch up to this size, not of plain messages of one length, is counted on the
# event loop (at most some thousands of records: about a millisecond); a larger one
# in a thread.
INLINE_COUNT_BYTES = 32 * 1024
# Ends the queue of answers: the stream's reader is done.
_END = object()


async def count_batch(payload: bytes) -> int | None:
    """The batch's message count (None: not a batch). Counted in the stream's
    reader, so sends keep their order; a large batch that needs a walk record by
    record is walked in a thread, so the event loop never waits on it."""
    counted = count_plain(payload)
    if counted is not None:
        return counted
    if len(payload) <= INLINE_COUNT_BYTES:
        return count_messages(payload)
    return await asyncio.to_thread(count_messages, payload)


class ProduceSession:
    """The sends of one opened Produce stream (see the module docstring)."""

    def __init__(
        self,
        topic: Topic,
        publisher: Publisher,
        new_producer: bool,
        registry: TopicRegistry,
        coordinators: Coordinators,
        max_message_size: int,
        max_pending: int,
        txn_caller: str | None,
        answers: asyncio.Queue,
    ):
        """`answers`: where the session puts what the stream sends back; an
        exception put there ends the stream with it (the Publisher's end_stream
        puts there too). `txn_caller`: the role the send's transactions must
        belong to (None: any)."""
        self._topic = topic
        self._publisher = publisher
        self._new_producer = new_producer
        self._registry = registry
        self._coordinators = coordinators
        self._max_message_size = max_message_size
        self._txn_caller = txn_caller
        self._out = answers
        self._in_flight = asyncio.Semaphore(max_pending)
        self._tasks: set[asyncio.Task] = set()
        self._reader: asyncio.Task | None = None

    def start(self, requests: AsyncIterator) -> None:
        """Read the stream's requests after its open, from now on."""
        assert self._reader is None
        self._reader = asyncio.create_task(self._read_sends(requests))

    async def answer(self) -> object | None:
        """What to send back next: a response, or an exception that ends the stream;
        None once every request is answered."""
        item = await self._out.get()
        return None if item is _END else item

    def close(self) -> None:
        """Stop reading (the stream ended)."""
        if self._reader is not None:
            self._reader.cancel()

    # ------------------------------------------------------------ reading

    async def _read_sends(self, requests: AsyncIterator) -> None:
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "send":
                    self._start(self._answer_one(*await self._admit(request.send)))
                elif kind == "sends":
                    # Each entry appends as a lone send would, in the frame's order
                    # (sequence ids ascend within it).
                    appends = [
                        asyncio.create_task(self._append(*await self._admit(send)))
                        for send in request.sends.sends
                    ]
                    self._start(self._answer_frame(appends))
                else:
                    self._out.put_nowait(
                        invalid("only 'send' or 'sends' may follow 'open' on a Produce stream")
                    )
                    return
                # The broker's pending writes are full: read no more (gRPC flow
                # control holds the producer meanwhile).
                await self._registry.write_budget.wait_for_room()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._out.put_nowait(_END)

    async def _admit(
        self, send: pb.ProducerSend
    ) -> tuple[pb.ProducerSend, int | None, Exception | None]:
        """Count the send's messages and join its transaction, in the stream's order,
        then wait for room among the sends in flight."""
        counted = await count_batch(send.payload)
        refused = await self._join(send)
        await self._in_flight.acquire()
        self._publisher.pending_publishes += 1
        return send, counted, refused

    async def _join(self, send: pb.ProducerSend) -> Exception | None:
        """Record the send's transaction as writing to this topic, before its entry
        is appended (so an end or a timeout reaches the topic); the refusal that
        answers the send, if any."""
        txn_id = convert.optional_txn_id(send.metadata)
        if txn_id is None:
            return None
        try:
            await self._coordinators.add_topic(txn_id, str(self._topic.name), self._txn_caller)
        except Exception as error:
            return error
        return None

    def _start(self, work) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ appending

    async def _append(
        self, send: pb.ProducerSend, counted: int | None, refused: Exception | None
    ) -> pb.SendReceipt | pb.SendError | None:
        """Write one entry; its receipt, or the error that answers it (None: fenced,
        the stream ends unanswered and the client sends it again). `refused`: its
        transaction's join failed (_join)."""
        topic = self._topic
        try:
            if self._registry.failpoint is not None:  # tests hold appends here
                await self._registry.failpoint(PUBLISH, str(topic.name))
            header = convert.header_from_send(send, self._publisher.name)
            check_size(len(send.payload), self._max_message_size)
            check_entry(header, counted)  # InvalidSendError: InvalidArgument
            if refused is not None:
                raise refused
            position, duplicate = await topic.publish(header, send.payload, self._new_producer)
            # A duplicate carries its first copy's position (-1:-1 when no longer held).
            receipt = pb.SendReceipt(sequence_id=send.sequence_id, duplicate=duplicate)
            if position is None:
                receipt.ledger_id, receipt.entry_id = -1, -1
            else:
                receipt.ledger_id, receipt.entry_id = position.ledger_id, position.entry_id
            return receipt
        except BrokerFencedError as error:
            self._out.put_nowait(error)
            return None
        except Exception as error:
            # Whatever it is, this send is answered: an unexpected error as an
            # internal error id (its traceback logged under that id).
            failure = classify(error)
            return pb.SendError(
                sequence_id=send.sequence_id, code=failure.code, message=str(failure)
            )
        finally:
            self._publisher.pending_publishes -= 1
            self._in_flight.release()

    async def _answer_one(
        self, send: pb.ProducerSend, counted: int | None, refused: Exception | None
    ) -> None:
        answer = await self._append(send, counted, refused)
        if isinstance(answer, pb.SendReceipt):
            self._out.put_nowait(pb.ProduceResponse(receipt=answer))
        elif answer is not None:
            self._out.put_nowait(pb.ProduceResponse(error=answer))

    async def _answer_frame(self, appends: list[asyncio.Task]) -> None:
        """One SendReceipts for a ProducerSends frame once all its entries are
        settled, so the producer frees their room at once; errors go alone."""
        answers = await asyncio.gather(*appends)
        receipts = []
        for answer in answers:
            if isinstance(answer, pb.SendReceipt):
                receipts.append(answer)
            elif answer is not None:
                self._out.put_nowait(pb.ProduceResponse(error=answer))
        if receipts:
            self._out.put_nowait(pb.ProduceResponse(receipts=pb.SendReceipts(receipts=receipts)))
