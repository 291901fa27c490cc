"""AddressSlots: a total and a per-address cap, each refusal named."""

from __future__ import annotations

from stableline.broker.connections.address_slots import AddressSlots, Refusal
from stableline.broker.connections.caps import PortCaps
from stableline.broker.grpc.connection_limit import ConnectionTable, peer_address


def test_the_cap_of_an_address_leaves_the_rest_to_the_others():
    slots = AddressSlots(PortCaps(total=4, per_address=2))
    assert [slots.take("a"), slots.take("a"), slots.take("a")] == [None, None, Refusal.ADDRESS]
    assert [slots.take("b"), slots.take("b")] == [None, None]
    assert slots.take("c") is Refusal.TOTAL
    slots.release("a")
    assert slots.take("c") is None
    assert slots.refusal("c") is Refusal.TOTAL  # asked, not counted
    assert slots.stats()["refusedConnections"] == 2
    assert slots.stats()["refusedPerAddress"] == 1


def test_grpc_peers_are_counted_by_their_address():
    assert peer_address("ipv4:127.0.0.1:53122") == "127.0.0.1"
    assert peer_address("ipv6:[::1]:53122") == "::1"
    table = ConnectionTable(8, 1)
    assert table.enter("ipv4:127.0.0.1:1")
    assert table.enter("ipv4:127.0.0.1:1")  # the same connection's second call
    assert not table.enter("ipv4:127.0.0.1:2")
    assert table.enter("ipv4:127.0.0.2:3")
    table.leave("ipv4:127.0.0.1:1")
    table.leave("ipv4:127.0.0.1:1")
    assert table.enter("ipv4:127.0.0.1:2")
