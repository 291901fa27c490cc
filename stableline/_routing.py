"""Which partition of a partitioned topic a producer's message goes to.

Names follow Pulsar's Java client: `MessageRoutingMode.RoundRobinPartition` (the
default), `SinglePartition`, `CustomPartition` with a router.

Promises:
- A message with a partition key goes to `key_partition(key, n)`: MurmurHash3
  x86_32 (seed 0) of the key's UTF-8 bytes, its sign bit cleared, modulo n, as
  Pulsar's Murmur3_32Hash router. The same key lands on the same partition on every
  client, run and machine for as long as n stays the same, so each key's order holds.
- Without a key, RoundRobinPartition sends whole batches to one partition and the
  next batch to the next partition; SinglePartition sends every message to one
  partition picked at random when the producer is made; CustomPartition asks the
  router `router(message, num_partitions) -> index` for every message, keyed or not.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

_SIGN_CLEARED = 0x7FFFFFFF
_U32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _U32


def _scramble(block: int) -> int:
    return (_rotl((block * 0xCC9E2D51) & _U32, 15) * 0x1B873593) & _U32


def murmur3_32(data: bytes) -> int:
    """MurmurHash3 x86_32 with seed 0, unsigned. The broker computes the same hash
    for an entry's key (dispatcher.key_hash); the client may not load that engine
    package, so it is written here too and a test holds the two to one answer."""
    state = 0
    whole = len(data) & ~3
    for (block,) in struct.iter_unpack("<I", data[:whole]):
        state = (_rotl(state ^ _scramble(block), 13) * 5 + 0xE6546B64) & _U32
    if whole < len(data):
        state ^= _scramble(int.from_bytes(data[whole:], "little"))
    state ^= len(data)
    for shift, multiplier in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        state = ((state ^ (state >> shift)) * multiplier) & _U32
    return state ^ (state >> 16)


class MessageRoutingMode(enum.Enum):
    RoundRobinPartition = 0
    """Keyed messages by key hash; others a whole batch per partition, in turn."""
    SinglePartition = 1
    """Keyed messages by key hash; others all to one partition chosen at random."""
    CustomPartition = 2
    """Every message where `message_router(message, num_partitions)` says."""


@dataclass(frozen=True, slots=True)
class RoutedMessage:
    """What a custom router sees of a message being sent."""

    value: bytes
    partition_key: str | None
    properties: dict[str, str] | None

    def data(self) -> bytes:
        return self.value


def key_partition(key: str, num_partitions: int) -> int:
    """The partition of a message with partition key `key` (see the module docstring)."""
    assert num_partitions > 0, num_partitions
    return (murmur3_32(key.encode()) & _SIGN_CLEARED) % num_partitions
