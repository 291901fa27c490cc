"""Key hashes: the stable 32-bit hash stored with an entry, and the Key_Shared hash.

Promises:
- `key_hash(key)` is MurmurHash3 x86_32 (seed 0) of the key's UTF-8 bytes, the hash
  Pulsar uses for sticky keys: it never changes between runs, machines or versions,
  because it is stored in entry headers.
- `sticky_hash(stored)` maps a stored hash (None: the entry has no key) into the
  Key_Shared hash space 0..65535. Entries without a key all share one hash, that of
  the key "NONE_KEY", as Pulsar's messages without a key do.
"""

from __future__ import annotations

# The Key_Shared hash space: hashes 0..HASH_RANGE_SIZE-1 (Pulsar 4's default).
HASH_RANGE_SIZE = 65536
MAX_HASH = HASH_RANGE_SIZE - 1

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of data; an unsigned 32-bit integer."""
    h = seed & _MASK
    length = len(data)
    body = length - length % 4
    for start in range(0, body, 4):
        k = int.from_bytes(data[start : start + 4], "little")
        k = (k * _C1) & _MASK
        k = ((k << 15) | (k >> 17)) & _MASK
        k = (k * _C2) & _MASK
        h ^= k
        h = ((h << 13) | (h >> 19)) & _MASK
        h = (h * 5 + 0xE6546B64) & _MASK
    tail = data[body:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * _C1) & _MASK
        k = ((k << 15) | (k >> 17)) & _MASK
        k = (k * _C2) & _MASK
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def key_hash(key: str | bytes) -> int:
    """The stored hash of an entry's key."""
    return murmur3_32(key.encode() if isinstance(key, str) else key)


# The Key_Shared hash of every entry without a key.
NO_KEY_HASH = key_hash("NONE_KEY") % HASH_RANGE_SIZE


def sticky_hash(stored: int | None) -> int:
    """The Key_Shared hash (0..MAX_HASH) of an entry whose header holds `stored`."""
    if stored is None:
        return NO_KEY_HASH
    return stored % HASH_RANGE_SIZE
