"""A client transaction: sends and acks joined to it become visible together, or never."""

from __future__ import annotations

import asyncio

from stableline._errors import (
    BrokerUnavailable,
    NotOwner,
    StableLineError,
    TopicUnavailable,
    TransactionEnded,
)
from stableline._proto import broker_pb2 as pb
from stableline._types import TransactionState, txn_id_text
from stableline.aio._connection import Connection, ConnectionPool
from stableline.aio._reconnect import is_transient

# Brokers in a row that may name another leader of a shard within one attempt (a
# shard moved twice meanwhile); past that, the attempt waits out the backoff.
MAX_LEADER_REDIRECTS = 3
_ENDED_BY = {
    pb.TXN_ACTION_COMMIT: TransactionState.COMMITTED,
    pb.TXN_ACTION_ABORT: TransactionState.ABORTED,
}


def _shard_may_have_moved(error: BaseException) -> bool:
    """A failure another attempt may answer: a broker away or starting, a shard led
    elsewhere, or a leader down until another takes its shard over."""
    return is_transient(error) or type(error) in (NotOwner, TopicUnavailable)


class Transaction:
    """One transaction on the coordinator its connection reaches; made by
    Client.new_transaction."""

    def __init__(
        self,
        connection: Connection,
        most_bits: int,
        least_bits: int,
        timeout_ms: int,
        pool: ConnectionPool | None = None,
    ):
        """`connection`: to the leader of the transaction's coordinator shard; `pool`:
        the client's brokers, to find the shard's next leader should it move."""
        self._connection = connection
        self._pool = pool
        self.id = (most_bits, least_bits)
        self.timeout_ms = timeout_ms
        self._sends: list[asyncio.Future] = []
        self._producers: set = set()
        self._state = TransactionState.OPEN

    @property
    def state(self) -> TransactionState:
        """OPEN, COMMITTED or ABORTED; a str, so `txn.state == "COMMITTED"` holds."""
        return self._state

    def __repr__(self) -> str:
        return f"Transaction({txn_id_text(self.id)}, {self._state})"

    def _proto_id(self) -> pb.TxnId:
        return pb.TxnId(most_bits=self.id[0], least_bits=self.id[1])

    def _join(self, producer, future: asyncio.Future) -> None:
        """Called by a producer for each batch it opens in this transaction."""
        self._check_open()
        self._producers.add(producer)
        self._sends.append(future)

    def _check_open(self) -> None:
        if self._state is not TransactionState.OPEN:
            raise TransactionEnded(f"transaction {txn_id_text(self.id)} is {self._state}")

    async def _end(self, action: int) -> None:
        """End on the coordinator, retried across a reconnect. Asking again for the same
        end joins one still under way; when the first ask was lost with the broker and
        the end has completed since, the coordinator's record says how it ended. In a
        cluster the shard follows its leader: a broker that went away is passed over
        for another, which ends it or names the shard's new leader (NotOwner)."""
        attempts = 0
        what = f"ending transaction {self}"

        async def attempt() -> pb.EndTransactionResponse:
            nonlocal attempts
            # A broker that names the shard's leader is followed at once, without the
            # backoff between attempts: the answer is there, not later.
            for _redirect in range(MAX_LEADER_REDIRECTS):
                attempts += 1
                connection = self._connection
                try:
                    return await connection.unary(
                        connection.broker.EndTransaction,
                        pb.EndTransactionRequest(txn_id=self._proto_id(), action=action),
                    )
                except TransactionEnded:
                    if attempts > 1:
                        state = await self._recorded_state()
                        if state == _ENDED_BY[action]:
                            return pb.EndTransactionResponse(txn_id=self._proto_id(), state=state)
                    raise
                except (NotOwner, BrokerUnavailable, TopicUnavailable) as error:
                    self._follow(connection, error)
                    if self._connection is connection or not isinstance(error, NotOwner):
                        raise
            raise NotOwner(
                f"{what}: {MAX_LEADER_REDIRECTS} brokers in a row named another leader of "
                f"the transaction's shard; retrying"
            )

        if self._pool is None:
            response = await self._connection.with_retries(attempt, what)
        else:
            response = await self._pool.retried(attempt, what, retried=_shard_may_have_moved)
        self._state = TransactionState(response.state)

    def _follow(self, failed_on: Connection, error: StableLineError) -> None:
        """Where the next attempt goes after `failed_on` failed with `error`."""
        if self._pool is None:
            return
        if isinstance(error, NotOwner) and error.leader_address:
            self._connection = self._pool.get(error.leader_address)
        elif isinstance(error, BrokerUnavailable):
            self._connection = self._pool.other_than(failed_on.address)

    async def _recorded_state(self) -> str | None:
        """The coordinator's state of this transaction ("COMMITTED", ...), or None if it
        cannot be read. A data-plane call: the transaction's owner needs no admin rights."""
        connection = self._connection
        try:
            response = await connection.unary(
                connection.broker.GetTransaction,
                pb.GetTransactionRequest(txn_id=self._proto_id()),
            )
        except StableLineError:
            return None
        return pb.TxnState.Name(response.state).removeprefix("TXN_STATE_")

    async def commit(self) -> None:
        """Wait for this transaction's sends, then commit; if a send failed, abort and raise."""
        self._check_open()
        for producer in self._producers:
            producer._flush_batch()
        results = await asyncio.gather(*self._sends, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self._end(pb.TXN_ACTION_ABORT)
            error = failures[0]
            if isinstance(error, StableLineError):
                raise TransactionEnded(
                    f"a send in the transaction failed, so it was aborted: {error}"
                ) from error
            raise error
        await self._end(pb.TXN_ACTION_COMMIT)

    async def abort(self) -> None:
        self._check_open()
        for producer in self._producers:
            producer._flush_batch()
        await asyncio.gather(*self._sends, return_exceptions=True)
        await self._end(pb.TXN_ACTION_ABORT)
