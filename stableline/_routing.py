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
from dataclasses import dataclass

from dispatcher.key_hash import key_hash

_SIGN_CLEARED = 0x7FFFFFFF


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
    return (key_hash(key) & _SIGN_CLEARED) % num_partitions
