"""Keys on the client: how a Key_Shared consumer takes hashes, how a producer batches.

Names follow Pulsar's Python client: `KeySharedPolicy(mode=KeySharedMode.Sticky,
sticky_ranges=[(0, 32767)])` and `BatchingType.KeyBased`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from stableline._proto import broker_pb2 as pb

# Key hashes are 0..MAX_KEY_HASH (the broker's Key_Shared hash space).
MAX_KEY_HASH = 65535


class KeySharedMode(enum.Enum):
    AutoSplit = pb.KEY_SHARED_MODE_AUTO_SPLIT
    """The broker spreads key hashes over the consumers by consistent hashing."""
    Sticky = pb.KEY_SHARED_MODE_STICKY
    """The consumer names the hash ranges it owns; overlaps are refused."""


class BatchingType(enum.Enum):
    Default = 0
    """Batches keep send order; a batch ends where the partition key changes."""
    KeyBased = 1
    """Within a batching window, messages are grouped into one batch per key: fewer,
    larger batches with many keys; order is kept per key only."""


class KeySharedPolicy:
    """How a consumer of a Key_Shared subscription takes key hashes."""

    def __init__(
        self,
        mode: KeySharedMode = KeySharedMode.AutoSplit,
        sticky_ranges: Iterable[tuple[int, int]] | None = None,
        allow_out_of_order_delivery: bool = False,
    ):
        mode = KeySharedMode(mode)
        ranges = [(int(start), int(end)) for start, end in sticky_ranges or ()]
        if allow_out_of_order_delivery:
            raise ValueError(
                "allow_out_of_order_delivery is not supported: Key_Shared always keeps "
                "each key's order"
            )
        if mode is KeySharedMode.Sticky and not ranges:
            raise ValueError("KeySharedMode.Sticky needs sticky_ranges, e.g. [(0, 32767)]")
        if mode is KeySharedMode.AutoSplit and ranges:
            raise ValueError("sticky_ranges are for KeySharedMode.Sticky; AutoSplit assigns them")
        for start, end in ranges:
            if not 0 <= start <= end <= MAX_KEY_HASH:
                raise ValueError(
                    f"sticky range ({start}, {end}) is invalid: need "
                    f"0 <= start <= end <= {MAX_KEY_HASH}"
                )
        self._mode = mode
        self._ranges = ranges

    @property
    def key_shared_mode(self) -> KeySharedMode:
        return self._mode

    @property
    def sticky_ranges(self) -> list[tuple[int, int]]:
        return list(self._ranges)

    def to_proto(self) -> pb.KeySharedMeta:
        return pb.KeySharedMeta(
            mode=self._mode.value,
            ranges=[pb.HashRange(start=start, end=end) for start, end in self._ranges],
        )

    def __repr__(self) -> str:
        return f"KeySharedPolicy(mode={self._mode.name}, sticky_ranges={self._ranges})"
