"""A client transaction: sends and acks joined to it become visible together, or never."""

from __future__ import annotations

import asyncio

from stableline._errors import StableLineError, TransactionEnded
from stableline._proto import broker_pb2 as pb
from stableline._types import TransactionState, txn_id_text
from stableline.aio._connection import Connection

_ENDED_BY = {
    pb.TXN_ACTION_COMMIT: TransactionState.COMMITTED,
    pb.TXN_ACTION_ABORT: TransactionState.ABORTED,
}


class Transaction:
    """One transaction on the coordinator its connection reaches; made by
    Client.new_transaction."""

    def __init__(self, connection: Connection, most_bits: int, least_bits: int, timeout_ms: int):
        self._connection = connection
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
        the end has completed since, the coordinator's record says how it ended."""
        attempts = 0
        connection = self._connection

        async def attempt() -> pb.EndTransactionResponse:
            nonlocal attempts
            attempts += 1
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

        response = await connection.with_retries(attempt, f"ending transaction {self}")
        self._state = TransactionState(response.state)

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
