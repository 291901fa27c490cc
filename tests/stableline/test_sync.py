"""The blocking client is a shell over the asyncio one: the same methods with the
same parameters and defaults, the same options values, the same transaction states."""

from __future__ import annotations

import inspect

import pytest

import stableline
from stableline import aio

FACES = [
    (stableline.Client, aio.Client),
    (stableline.Producer, aio.Producer),
    (stableline.Consumer, aio.Consumer),
    (stableline.Reader, aio.Reader),
    (stableline.Transaction, aio.Transaction),
]


def _public_methods(cls) -> dict:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") or name == "__init__"
    }


@pytest.mark.parametrize("blocking, asyncio_face", FACES, ids=[f[0].__name__ for f in FACES])
def test_every_blocking_method_takes_what_its_asyncio_twin_takes(blocking, asyncio_face):
    twins = _public_methods(asyncio_face)
    for name, method in _public_methods(blocking).items():
        if name == "__init__" and blocking is not stableline.Client:
            continue  # a wrapper is made around its asyncio object, not by users
        if name not in twins:
            continue  # an attribute or property there (producer.topic): no parameters
        ours = list(inspect.signature(method).parameters.values())
        theirs = list(inspect.signature(twins[name]).parameters.values())
        shape = [(p.name, p.kind, p.default) for p in ours]
        assert shape == [(p.name, p.kind, p.default) for p in theirs[: len(ours)]], name
        # What only the asyncio face takes (event_time_ms, ...) has a default.
        assert all(p.default is not inspect.Parameter.empty for p in theirs[len(ours) :]), name


def test_a_transaction_state_compares_and_prints_as_its_name(client):
    txn = client.new_transaction()
    assert txn.state == "OPEN" and txn.state is stableline.TransactionState.OPEN
    client.create_producer("states").send(b"x", txn=txn)
    txn.commit()
    assert txn.state == "COMMITTED" and str(txn.state) == "COMMITTED"
    assert f"{txn.state}" == "COMMITTED" and repr(txn).endswith(", COMMITTED)")
    with pytest.raises(stableline.TransactionEnded, match=r"transaction \d+:\d+ is COMMITTED"):
        txn.abort()
    aborted = client.new_transaction()
    aborted.abort()
    assert aborted.state == "ABORTED" and aborted.state is stableline.TransactionState.ABORTED


def test_the_blocking_face_opens_with_an_options_value(broker):
    options = stableline.ClientOptions(operation_timeout_seconds=5.0)
    with stableline.Client.with_options(broker.service_url, options) as client:
        producer = client.open_producer(
            "options", stableline.ProducerOptions(producer_name="named", batching_max_messages=1)
        )
        consumer = client.open_consumer(
            "options",
            "sub",
            stableline.ConsumerOptions(initial_position=stableline.InitialPosition.Earliest),
        )
        sent = producer.send(b"one")
        assert producer.producer_name() == "named"
        received = consumer.receive(5000)
        assert (received.value(), received.message_id()) == (b"one", sent)
        reader = client.open_reader("options", stableline.ReaderOptions())
        assert reader.read_next(5000).value() == b"one"
