"""Transaction-buffer snapshots as they travel to the other copies of a topic's log.

A topic's transaction buffer keeps its snapshot in the broker's store, database
SNAPSHOTS_DB, under keys `{name}\\x00...` (txnbuffer/snapshot.py owns the layout):
one key `{name}\\x00meta` says which state the keys hold, and every value ends with
the CRC32 of the bytes before it. A replicated topic's writer sends each snapshot
it writes to the other members (ReplicaLogs.write_snapshot), so a member that takes
the topic loads it where its own buffer reads it and replays only the log after it.

A snapshot is written incrementally (the keys it adds, the key prefixes it drops),
so a copy names the state it follows: the digest of the meta value the writer held
before the write (FIRST: none). A member holding another state refuses it
(ReplicaSnapshotMismatchError) and is sent the whole snapshot instead, which
replaces every key it held of the topic: a member never applies a change on top of
a state it does not hold, whatever copies it missed or in what order they came.
Keys travel relative to the topic (`meta`, `a\\x00...`), so a copy can only ever
write the keys of the topic it is sent for.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass

from managed_ledger.local_store import LocalStore

SNAPSHOTS_DB = b"snapshots"
META_KEY = "meta"
# The state before a topic's first snapshot: no meta key at all.
FIRST = b""
_CRC = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class SnapshotCopy:
    """One snapshot write, as the other copies apply it."""

    # The digest of the meta value this write follows (meta_digest); ignored when whole.
    follows: bytes
    # True: the whole snapshot, replacing every key the copy holds of the topic.
    whole: bool
    # Keys relative to `{name}\x00` -> values; the meta key is always among them.
    puts: dict[str, bytes]
    # Relative prefixes whose keys the write deletes (a ledger's aborts, say).
    delete_prefixes: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return sum(len(k) + len(v) for k, v in self.puts.items()) + sum(
            map(len, self.delete_prefixes)
        )


def topic_prefix(name: str) -> str:
    return f"{name}\x00"


def meta_digest(meta: bytes | None) -> bytes:
    """What names a snapshot state: a digest of its meta value (FIRST for none)."""
    if meta is None:
        return FIRST
    return hashlib.blake2b(meta, digest_size=16).digest()


def held_digest(store: LocalStore, name: str) -> bytes:
    """The digest of the snapshot state the store holds of `name`."""
    return meta_digest(store.get(SNAPSHOTS_DB, topic_prefix(name) + META_KEY))


def whole_copy(store: LocalStore, name: str) -> SnapshotCopy | None:
    """Every snapshot key the store holds of `name`, as one whole copy (None when it
    holds no snapshot)."""
    prefix = topic_prefix(name)
    puts = {key[len(prefix) :]: value for key, value in store.scan_prefix(SNAPSHOTS_DB, prefix)}
    if META_KEY not in puts:
        return None
    return SnapshotCopy(FIRST, True, puts)


def check_copy(name: str, copy: SnapshotCopy) -> str | None:
    """Why the copy cannot be applied (None: it can): the meta key is missing, a key is
    empty, or a value fails its CRC."""
    if META_KEY not in copy.puts:
        return f"a snapshot of {name} without its meta key"
    for key, value in copy.puts.items():
        if not key:
            return f"a snapshot of {name} with an empty key"
        if len(value) < _CRC.size:
            return f"snapshot key {key!r} of {name}: {len(value)} bytes is too short"
        (crc,) = _CRC.unpack(value[-_CRC.size :])
        if zlib.crc32(value[: -_CRC.size]) != crc:
            return f"snapshot key {key!r} of {name}: checksum mismatch"
    if any(not prefix for prefix in copy.delete_prefixes):
        return f"a snapshot of {name} deleting an empty prefix"
    return None


def apply_copy(store: LocalStore, name: str, copy: SnapshotCopy) -> None:
    """Write the copy in one LMDB transaction (deletes first, then puts). The caller
    has checked it follows what the store holds (or is whole) and fsyncs after."""
    prefix = topic_prefix(name)
    doomed = [prefix] if copy.whole else [prefix + p for p in copy.delete_prefixes]
    deletes = [key for each in doomed for key, _ in store.scan_prefix(SNAPSHOTS_DB, each)]
    store.write_many(SNAPSHOTS_DB, {prefix + k: v for k, v in copy.puts.items()}, deletes)


def delete_all(store: LocalStore, name: str) -> None:
    store.delete_prefix(SNAPSHOTS_DB, topic_prefix(name))
