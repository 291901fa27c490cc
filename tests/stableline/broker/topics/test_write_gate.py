"""The write gate (stableline/broker/topics/write_gate.py) and the topic writes it admits: a
closed gate refuses every write, says why and writes nothing; closing it ends every
producer and consumer stream; a write admitted before it closed is durable but not
acknowledged, and its resend is a duplicate; the broker's own transaction ends wait
until it opens again."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher import Consumer, IsolationLevel, SubscriptionType
from managed_ledger import EntryHeader, LocalStore, Position, TxnId
from stableline.broker.config import load_config
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Publisher
from stableline.broker.topics.write_gate import BrokerFencedError, WriteGate
from stableline.topic_name import TopicName

NAME = TopicName.parse("persistent://public/default/gated")
OTHER = TopicName.parse("persistent://public/default/gated-other")
FENCED = "broker 127.0.0.1:6650 is fenced: its session was lost"


class Session:
    """Stands in for a metadata store's session_holds(), at the unit test's edge."""

    def __init__(self) -> None:
        self.holding = True

    def holds(self) -> bool:
        return self.holding


@pytest.fixture
async def gated(tmp_path):
    config = load_config(None, {"data_dir": tmp_path / "data", "fsync": False})
    store = LocalStore(config.metadata_dir)
    gate = WriteGate()
    registry = TopicRegistry(config, store, write_gate=gate)
    yield registry, gate
    if not gate.is_open:
        gate.open()
    await registry.close()
    store.close()


async def _ready(registry: TopicRegistry, name: TopicName = NAME):
    topic = await registry.get(name)
    await topic.wait_recovered()
    return topic


def _payloads(topic) -> list[bytes]:
    ledger = topic.ledger
    return [entry.payload for entry in ledger.read(ledger.first_position(), 100)]


def test_a_ticket_names_its_open_period_and_a_closed_gate_refuses_saying_why():
    gate = WriteGate()
    ticket = gate.admit("orders")
    gate.confirm(ticket, "orders")
    gate.close(FENCED)
    gate.close("a second reason")  # the first one stays
    assert not gate.is_open and gate.closed_because == FENCED
    with pytest.raises(BrokerFencedError) as refused:
        gate.admit("orders")
    assert str(refused.value) == (
        f"writes to orders refused: {FENCED}; writes resume by themselves once the broker "
        "is back in its cluster: retry"
    )
    with pytest.raises(BrokerFencedError):
        gate.confirm(ticket, "orders")
    gate.open()
    # Admitted before the close: never confirmed, although the gate is open again.
    with pytest.raises(BrokerFencedError):
        gate.confirm(ticket, "orders")
    again = gate.admit("orders")
    assert again != ticket
    gate.confirm(again, "orders")


def test_an_open_gate_refuses_once_the_session_no_longer_holds_and_cannot_open_without_it():
    session = Session()
    gate = WriteGate(session.holds)
    ticket = gate.admit("orders")
    session.holding = False
    with pytest.raises(BrokerFencedError, match="past the time it can be relied on"):
        gate.admit("orders")
    with pytest.raises(BrokerFencedError):
        gate.confirm(ticket, "orders")
    gate.close(FENCED)
    assert not gate.open() and gate.closed_because == FENCED
    session.holding = True
    assert gate.open()
    gate.admit("orders")


async def test_a_gate_that_starts_closed_is_waited_for_until_it_opens():
    gate = WriteGate(closed_because="broker fenced: not registered in cluster c yet")
    with pytest.raises(BrokerFencedError, match="not registered in cluster c yet"):
        gate.admit("orders")
    waiting = asyncio.ensure_future(gate.wait_open())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(waiting), 0.05)
    gate.open()
    await asyncio.wait_for(waiting, 1)


async def test_closing_ends_every_stream_and_a_closed_gate_refuses_every_write_of_every_topic(
    gated,
):
    registry, gate = gated
    topic = await _ready(registry)
    await topic.publish(EntryHeader(num_messages=1), b"before")
    last = topic.ledger.last_confirmed
    ended: list[Exception] = []
    topic.add_publisher(Publisher("p", 10, end_stream=ended.append))
    consumer = Consumer("c")
    subscription = topic.subscribe(
        "s", consumer, SubscriptionType.SHARED, IsolationLevel.READ_COMMITTED, True
    )

    gate.close(FENCED)
    assert [type(error) for error in ended] == [BrokerFencedError]
    outbox = [consumer.outbox.get_nowait() for _ in range(consumer.outbox.qsize())]
    assert any(isinstance(item, BrokerFencedError) for item in outbox)

    header = EntryHeader(num_messages=1, producer_name="q", sequence_id=0)
    with pytest.raises(BrokerFencedError, match=f"writes to {NAME} refused: {FENCED}"):
        await topic.publish(header, b"refused")
    with pytest.raises(BrokerFencedError):
        topic.add_publisher(Publisher("q", 10))
    with pytest.raises(BrokerFencedError):
        topic.subscribe(
            "t", Consumer("d"), SubscriptionType.SHARED, IsolationLevel.READ_COMMITTED, True
        )
    with pytest.raises(BrokerFencedError):
        topic.create_subscription("u", SubscriptionType.SHARED, IsolationLevel.READ_COMMITTED, True)
    with pytest.raises(BrokerFencedError):
        await topic.unsubscribe(subscription)
    with pytest.raises(BrokerFencedError):
        await topic.end_transaction(TxnId(0, 1), True, 0)
    with pytest.raises(BrokerFencedError):
        await registry.delete(NAME)
    # A topic loaded while the gate is closed shares it.
    other = await _ready(registry, OTHER)
    with pytest.raises(BrokerFencedError):
        await other.publish(EntryHeader(num_messages=1), b"refused")

    assert topic.ledger.last_confirmed == last and _payloads(topic) == [b"before"]
    assert _payloads(other) == []
    assert set(topic.subscriptions) == {"s"} and registry.exists(NAME)
    assert topic.buffer.producers.last("q") == -1  # its sequence was not taken

    gate.open()
    await topic.publish(header, b"after")
    assert _payloads(topic) == [b"before", b"after"]


async def test_a_publish_admitted_before_the_gate_closed_is_durable_unanswered_and_a_resend_finds_it(
    gated,
):
    registry, gate = gated
    topic = await _ready(registry)
    # Closed as the entry becomes durable, before the publish returns.
    topic.ledger.add_listener(lambda: gate.close(FENCED))
    header = EntryHeader(num_messages=1, producer_name="p", sequence_id=0)
    with pytest.raises(BrokerFencedError):
        await topic.publish(header, b"once")
    assert _payloads(topic) == [b"once"]
    durable = topic.ledger.last_confirmed

    gate.open()
    assert await topic.publish(header, b"once") == (durable, True)
    assert _payloads(topic) == [b"once"]


async def test_the_brokers_own_transaction_ends_wait_for_the_gate_and_a_clients_fails(gated):
    registry, gate = gated
    topic = await _ready(registry)
    txn = TxnId(0, 1)
    await topic.publish(EntryHeader(num_messages=1, txn_id=txn), b"in txn")
    gate.close(FENCED)
    with pytest.raises(BrokerFencedError):
        await topic.end_transaction(txn, True, 0)
    ending = asyncio.ensure_future(topic.end_transaction_when_writable(txn, True, 0))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(ending), 0.1)
    assert txn in topic.buffer.ongoing

    gate.open()
    await asyncio.wait_for(ending, 5)
    assert txn not in topic.buffer.ongoing
    assert topic.buffer.stable_position == topic.ledger.last_confirmed
    assert topic.ledger.last_confirmed > Position(0, 0)


async def test_a_view_pinned_before_a_close_refuses_for_good_even_once_the_gate_reopens():
    """A replicated topic sees the gate pinned at its load: once the gate closes it
    writes no more, even after the gate reopens (another broker may have taken it at
    a newer epoch meanwhile), and its own waits for the gate end at once."""
    gate = WriteGate()
    view = gate.pinned(gate.generation, NAME)
    ticket = view.admit(NAME)
    view.confirm(ticket, NAME)
    await view.wait_open()
    gate.close(FENCED)
    assert view.retired and not view.is_open
    gate.open()
    assert gate.is_open and gate.admit(NAME) >= 0
    with pytest.raises(BrokerFencedError, match="taken again, at a new epoch"):
        view.admit(NAME)
    with pytest.raises(BrokerFencedError, match="taken again"):
        view.confirm(ticket, NAME)
    with pytest.raises(BrokerFencedError, match="taken again"):
        await asyncio.wait_for(view.wait_open(), 5)
    assert "taken again" in view.closed_because


async def test_a_view_waiting_on_a_closed_gate_is_refused_when_the_gate_reopens():
    """A topic whose load began while the gate was closed is never written: its wait
    for the gate ends with the refusal when the gate opens, not with a write."""
    gate = WriteGate(closed_because=FENCED)
    view = gate.pinned(gate.generation, NAME)
    assert not view.retired
    with pytest.raises(BrokerFencedError, match="is fenced"):
        view.admit(NAME)
    waiting = asyncio.ensure_future(view.wait_open())
    await asyncio.sleep(0)
    assert not waiting.done()
    gate.open()
    with pytest.raises(BrokerFencedError, match="taken again"):
        await asyncio.wait_for(waiting, 5)
