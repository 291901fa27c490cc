"""Which consumer holds each key hash's delivered, unacknowledged entries (PIP-379).

Key_Shared keeps per-key order across consumers joining and leaving with one rule:
an entry of hash h goes only to h's current owner, and only while no other consumer
holds entries of h. So a hash that moved to a new owner is *draining* while the
old owner still holds entries of it: the new owner gets nothing of it until those
are acknowledged or come back (nack, close, redelivery).

Promises: at most one consumer holds entries of a hash at any time (asserted); a
hash is tracked exactly while its holder has entries of it, with their count and
messages; memory is O(hashes held), never O(messages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatcher.consumer import Consumer


@dataclass(slots=True)
class HashHold:
    """What one consumer holds of one hash."""

    consumer: Consumer
    entries: int = 0
    messages: int = 0


@dataclass(frozen=True, slots=True)
class DrainingHash:
    """A hash held by a consumer that no longer owns it."""

    hash: int
    consumer: Consumer
    entries: int
    messages: int


class HashHolds:
    def __init__(self) -> None:
        self._holds: dict[int, HashHold] = {}

    def __len__(self) -> int:
        return len(self._holds)

    def holder(self, hash_: int) -> Consumer | None:
        hold = self._holds.get(hash_)
        return hold.consumer if hold is not None else None

    def hold(self, hash_: int, consumer: Consumer, messages: int) -> None:
        hold = self._holds.get(hash_)
        if hold is None:
            hold = self._holds[hash_] = HashHold(consumer)
        assert hold.consumer is consumer, (
            f"hash {hash_} delivered to {consumer.name} while {hold.consumer.name} holds it"
        )
        hold.entries += 1
        hold.messages += messages

    def release(self, hash_: int, consumer: Consumer, messages: int) -> bool:
        """One entry of the hash is no longer held; True when the hash is free now."""
        hold = self._holds.get(hash_)
        assert hold is not None and hold.consumer is consumer, (hash_, consumer.name)
        hold.entries -= 1
        hold.messages -= messages
        assert hold.entries >= 0 and hold.messages >= 0
        if hold.entries == 0:
            del self._holds[hash_]
            return True
        return False

    def clear(self) -> None:
        self._holds.clear()

    def draining(self, owner_of: Callable[[int], Consumer | None]) -> Iterator[DrainingHash]:
        """The hashes whose holder is not their owner now, in hash order."""
        for hash_ in sorted(self._holds):
            hold = self._holds[hash_]
            if owner_of(hash_) is not hold.consumer:
                yield DrainingHash(hash_, hold.consumer, hold.entries, hold.messages)
