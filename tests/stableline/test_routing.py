"""Which partition a producer's message goes to (stableline._routing), and the
routing options' checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stableline import MessageRoutingMode, ProducerOptions
from stableline._routing import key_partition, murmur3_32


def test_a_key_goes_to_its_murmur3_hash_modulo_the_partition_count():
    # MurmurHash3 x86_32, seed 0, published vectors: "hello" 0x248bfa47, the fox 0x2e4ff723.
    assert key_partition("hello", 7) == 0x248BFA47 % 7
    fox = "The quick brown fox jumps over the lazy dog"
    assert key_partition(fox, 6) == 0x2E4FF723 % 6
    assert key_partition("", 5) == 0


@given(st.binary(max_size=64))
def test_the_client_hash_is_the_broker_key_hash(data):
    from dispatcher.key_hash import murmur3_32 as broker_murmur3_32

    assert murmur3_32(data) == broker_murmur3_32(data)


def test_the_hash_sign_bit_is_cleared_as_pulsar_does():
    key = next(k for k in (f"k{i}" for i in range(1000)) if _hash(k) >= 2**31)
    assert key_partition(key, 3) == (_hash(key) & 0x7FFFFFFF) % 3


def test_keys_spread_over_every_partition():
    assert {key_partition(f"customer-{i}", 6) for i in range(200)} == set(range(6))


def test_custom_routing_needs_a_router_and_a_router_needs_custom_routing():
    with pytest.raises(ValueError, match="message_router"):
        ProducerOptions(message_routing_mode=MessageRoutingMode.CustomPartition)
    with pytest.raises(ValueError, match="message_router"):
        ProducerOptions(message_router=lambda message, count: 0)
    options = ProducerOptions(message_routing_mode=1)  # as its number, like other enums
    assert options.message_routing_mode is MessageRoutingMode.SinglePartition


def _hash(key: str) -> int:
    return murmur3_32(key.encode())
