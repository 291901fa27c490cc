"""The producer's and consumer's lifecycle table: the moves it allows, the ones it
refuses, and that the objects keep to it."""

from __future__ import annotations

import pytest

from stableline import aio
from stableline.aio._state import (
    _MOVES,
    IllegalStateTransition,
    StreamState,
    check_transition,
)

CONNECTING, READY, FAILED, CLOSED = (
    StreamState.CONNECTING,
    StreamState.READY,
    StreamState.FAILED,
    StreamState.CLOSED,
)
LEGAL = {
    (CONNECTING, READY),
    (CONNECTING, FAILED),
    (CONNECTING, CLOSED),
    (READY, FAILED),
    (READY, CLOSED),
    (FAILED, CLOSED),
}


def test_every_state_has_a_row():
    assert set(_MOVES) == set(StreamState)


@pytest.mark.parametrize("old", list(StreamState), ids=lambda s: s.value)
@pytest.mark.parametrize("new", list(StreamState), ids=lambda s: s.value)
def test_the_table_allows_exactly_the_lifecycle_moves(old, new):
    if (old, new) in LEGAL:
        check_transition("p", old, new)
    else:
        with pytest.raises(IllegalStateTransition, match=f"from {old.value} to {new.value}"):
            check_transition("p", old, new)


def test_closed_is_final_and_a_failed_stream_never_comes_back():
    assert _MOVES[CLOSED] == frozenset()
    assert _MOVES[FAILED] == frozenset({CLOSED})


async def test_a_producer_and_a_consumer_go_ready_then_closed(broker):
    async with aio.Client(broker.service_url) as client:
        producer = await client.create_producer("lifecycle")
        consumer = await client.subscribe("lifecycle", "sub")
        assert producer._state is READY and consumer._state is READY
        await producer.close()
        await consumer.close()
        assert producer._state is CLOSED and consumer._state is CLOSED
        with pytest.raises(aio.StableLineError, match="closed"):
            producer.send_nowait(b"late")
        assert not consumer.is_connected()
        await producer.close()  # a second close is no move
