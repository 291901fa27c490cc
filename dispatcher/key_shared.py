"""Key_Shared: which consumer owns each key hash (0..65535) of a subscription.

Two modes, as Pulsar 4's:
- AUTO_SPLIT: consistent hashing. Each consumer puts POINTS_PER_CONSUMER points on
  a ring of the hash space (hashes of its name and the point's index, so a consumer
  that reconnects under its name gets its hashes back); a hash belongs to the
  consumer of the first point at or after it, wrapping around. A consumer joining
  or leaving moves only the hashes next to its own points.
- STICKY: every consumer names its hash ranges; a consumer whose ranges overlap
  another's (or each other) is refused with ConsumerAssignError. A hash in no
  consumer's ranges has no owner, and its entries wait.

Promises: `select(h)` names one consumer or None, and changes only through `add` and
`remove`; `ranges()` lists, for every consumer, the inclusive ranges it owns,
sorted, covering together exactly the hashes `select` gives an owner.
"""

from __future__ import annotations

import enum
import itertools
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dispatcher.errors import ConsumerAssignError
from dispatcher.key_hash import HASH_RANGE_SIZE, MAX_HASH, key_hash

if TYPE_CHECKING:
    from dispatcher.consumer import Consumer

# Points each consumer puts on the AUTO_SPLIT ring (Pulsar 4's default replica points).
POINTS_PER_CONSUMER = 100


class KeySharedMode(enum.Enum):
    AUTO_SPLIT = "AUTO_SPLIT"
    """Hashes are spread over the consumers by consistent hashing."""
    STICKY = "STICKY"
    """Every consumer names the hash ranges it owns."""


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """Key hashes start..end, both included."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end <= MAX_HASH:
            raise ValueError(
                f"hash range [{self.start}, {self.end}] is invalid: need "
                f"0 <= start <= end <= {MAX_HASH}"
            )

    def overlaps(self, other: HashRange) -> bool:
        return self.start <= other.end and other.start <= self.end

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """How a consumer takes part in a Key_Shared subscription."""

    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    ranges: tuple[HashRange, ...] = ()

    def __post_init__(self) -> None:
        if self.mode is KeySharedMode.STICKY and not self.ranges:
            raise ValueError("a STICKY Key_Shared consumer must name at least one hash range")
        if self.mode is KeySharedMode.AUTO_SPLIT and self.ranges:
            raise ValueError(
                "hash ranges are for STICKY Key_Shared consumers; AUTO_SPLIT assigns them"
            )
        ordered = sorted(self.ranges)
        for before, after in itertools.pairwise(ordered):
            if before.overlaps(after):
                raise ValueError(f"the consumer's hash ranges {before} and {after} overlap")


class ConsumerSelector(Protocol):
    mode: KeySharedMode

    def add(self, consumer: Consumer) -> None:
        """Give the consumer its hashes; ConsumerAssignError changes nothing."""
        ...

    def remove(self, consumer: Consumer) -> None: ...

    def select(self, hash_: int) -> Consumer | None:
        """The consumer that owns the hash now."""
        ...

    def ranges(self) -> dict[Consumer, list[HashRange]]: ...


def selector_for(mode: KeySharedMode) -> ConsumerSelector:
    if mode is KeySharedMode.STICKY:
        return StickyRangeSelector()
    return ConsistentHashSelector()


class ConsistentHashSelector:
    """AUTO_SPLIT: a hash ring with POINTS_PER_CONSUMER points per consumer.

    Two consumers of one name would put their points in the same places, so each
    takes the lowest name index no other consumer of that name uses. Points of
    different names that collide belong to the consumer that came first; the other
    takes them over when it leaves.
    """

    mode = KeySharedMode.AUTO_SPLIT

    def __init__(self, points_per_consumer: int = POINTS_PER_CONSUMER):
        assert points_per_consumer >= 1
        self._points_per_consumer = points_per_consumer
        self._name_index: dict[Consumer, int] = {}
        # point -> consumers on it, in the order they joined (the first owns it).
        self._on_point: dict[int, list[Consumer]] = {}
        # Sorted points and their owners: select() bisects these.
        self._points: list[int] = []
        self._owners: list[Consumer] = []

    def _points_of(self, consumer: Consumer, name_index: int) -> set[int]:
        return {
            key_hash(f"{consumer.name}\x00{name_index}\x00{i}") % HASH_RANGE_SIZE
            for i in range(self._points_per_consumer)
        }

    def add(self, consumer: Consumer) -> None:
        assert consumer not in self._name_index
        used = {i for c, i in self._name_index.items() if c.name == consumer.name}
        name_index = next(i for i in range(len(used) + 1) if i not in used)
        self._name_index[consumer] = name_index
        for point in self._points_of(consumer, name_index):
            self._on_point.setdefault(point, []).append(consumer)
        self._rebuild()

    def remove(self, consumer: Consumer) -> None:
        name_index = self._name_index.pop(consumer, None)
        if name_index is None:
            return
        for point in self._points_of(consumer, name_index):
            on_point = self._on_point[point]
            on_point.remove(consumer)
            if not on_point:
                del self._on_point[point]
        self._rebuild()

    def _rebuild(self) -> None:
        self._points = sorted(self._on_point)
        self._owners = [self._on_point[point][0] for point in self._points]

    def select(self, hash_: int) -> Consumer | None:
        points = self._points
        if not points:
            return None
        index = bisect_left(points, hash_)
        return self._owners[index if index < len(points) else 0]

    def ranges(self) -> dict[Consumer, list[HashRange]]:
        owned: dict[Consumer, list[HashRange]] = {consumer: [] for consumer in self._name_index}
        points, owners = self._points, self._owners
        if not points:
            return owned
        # A point owns the hashes after the previous point up to itself; the first
        # point also owns the wrap-around from after the last point to MAX_HASH.
        if points[-1] < MAX_HASH:
            owned[owners[0]].append(HashRange(points[-1] + 1, MAX_HASH))
        start = 0
        for point, owner in zip(points, owners, strict=True):
            owned[owner].append(HashRange(start, point))
            start = point + 1
        return {consumer: _merged(found) for consumer, found in owned.items()}


class StickyRangeSelector:
    """STICKY: the ranges each consumer named, none overlapping another's."""

    mode = KeySharedMode.STICKY

    def __init__(self) -> None:
        self._by_consumer: dict[Consumer, tuple[HashRange, ...]] = {}
        # Every range sorted by start, and the owner of each: select() bisects.
        self._starts: list[int] = []
        self._ranges: list[tuple[HashRange, Consumer]] = []

    def add(self, consumer: Consumer) -> None:
        assert consumer not in self._by_consumer
        wanted = consumer.key_shared.ranges
        assert wanted, "a STICKY consumer names its ranges"
        for range_ in wanted:
            for taken, owner in self._ranges:
                if range_.overlaps(taken):
                    raise ConsumerAssignError(
                        f"hash range {range_} of consumer {consumer.name!r} overlaps range "
                        f"{taken} of consumer {owner.name!r}; STICKY consumers' ranges "
                        "must not overlap"
                    )
        self._by_consumer[consumer] = wanted
        self._rebuild()

    def remove(self, consumer: Consumer) -> None:
        if self._by_consumer.pop(consumer, None) is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        self._ranges = sorted(
            (
                (range_, consumer)
                for consumer, ranges in self._by_consumer.items()
                for range_ in ranges
            ),
            key=lambda pair: pair[0].start,
        )
        self._starts = [range_.start for range_, _consumer in self._ranges]

    def select(self, hash_: int) -> Consumer | None:
        index = bisect_right(self._starts, hash_) - 1
        if index < 0:
            return None
        range_, consumer = self._ranges[index]
        return consumer if hash_ <= range_.end else None

    def ranges(self) -> dict[Consumer, list[HashRange]]:
        return {consumer: _merged(list(ranges)) for consumer, ranges in self._by_consumer.items()}


def _merged(ranges: list[HashRange]) -> list[HashRange]:
    """Sorted, with touching ranges joined."""
    merged: list[HashRange] = []
    for range_ in sorted(ranges):
        if merged and merged[-1].end + 1 >= range_.start:
            merged[-1] = HashRange(merged[-1].start, max(merged[-1].end, range_.end))
        else:
            merged.append(range_)
    return merged
