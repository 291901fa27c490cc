"""Transaction-buffer snapshots in LMDB: incremental, checksummed, one transaction each.

A snapshot is the buffer's state after applying every entry up to a position
(the last entry it had applied when the snapshot was taken): recovery loads it
and replays only the log after that position, which gives the state a full
replay would. Layout in the `snapshots` database, per topic:
- `{topic}\\x00meta`: version, the position, maxReadPosition, the ongoing
  transactions with their first positions, low watermarks, the transactions
  committed above their watermark, late entries, named producers' last
  sequence ids, the time, and a CRC of it all;
- `{topic}\\x00a\\x00{marker position}`: one key per aborted transaction (with
  its own CRC), keyed by marker position so retention drops a ledger's aborts
  with a range delete.
A snapshot writes the aborts added and the ledgers dropped since the previous
one, plus the meta key, in one LMDB transaction: its cost follows the changes
and the open transactions, not the size of the aborted set. Of a replicated log,
each write is also handed over as a SnapshotCopy naming the state it follows
(managed_ledger/snapshot_copy.py), for the ledger to send to its other copies.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from managed_ledger import SNAPSHOTS_DB, LocalStore, Position, SnapshotCopy, TxnId
from managed_ledger.snapshot_copy import META_KEY, held_digest, topic_prefix
from txnbuffer.abort_index import AbortedTxn

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 2
# txn most, txn least, first (ledger, entry), marker (ledger, entry), mrp after (ledger, entry)
_ABORT = struct.Struct("<QQqqqqqq")
_CRC = struct.Struct("<I")
_TXN_ID = struct.Struct("<QQ")


class SnapshotCorruptError(ValueError):
    """A snapshot failed its checksum or version check."""


@dataclass(slots=True)
class Snapshot:
    """The buffer's state after applying every entry up to `position`."""

    position: Position
    max_read_position: Position
    ongoing: list[tuple[TxnId, Position]]  # in first-position order
    low_watermarks: dict[int, int]
    committed: list[tuple[TxnId, Position]]  # with their marker positions
    late_positions: list[Position]
    # producer name -> (last sequence id, ledger of that entry)
    producers: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Ledger of the marker -> its aborted transactions' records (checksums checked),
    # in marker order; decode_abort() makes them AbortedTxns when they are needed.
    aborted_records: dict[int, list[bytes]] = field(default_factory=dict)
    taken_at_ms: int = 0


def _with_crc(body: bytes) -> bytes:
    return body + _CRC.pack(zlib.crc32(body))


def _checked(raw: bytes, what: str) -> bytes:
    if len(raw) < _CRC.size:
        raise SnapshotCorruptError(f"{what}: {len(raw)} bytes is too short")
    body, (crc,) = raw[: -_CRC.size], _CRC.unpack(raw[-_CRC.size :])
    if zlib.crc32(body) != crc:
        raise SnapshotCorruptError(f"{what}: checksum mismatch")
    return body


def encode_abort(aborted: AbortedTxn) -> bytes:
    return _with_crc(
        _ABORT.pack(
            aborted.txn_id.most_bits,
            aborted.txn_id.least_bits,
            aborted.first_position.ledger_id,
            aborted.first_position.entry_id,
            aborted.marker_position.ledger_id,
            aborted.marker_position.entry_id,
            aborted.max_read_position_after.ledger_id,
            aborted.max_read_position_after.entry_id,
        )
    )


def check_abort(raw: bytes) -> bytes:
    """The body of a stored aborted-transaction record, or SnapshotCorruptError."""
    body = _checked(raw, "aborted transaction record")
    if len(body) != _ABORT.size:
        raise SnapshotCorruptError(
            f"aborted transaction record is {len(body)} bytes, expected {_ABORT.size}"
        )
    return body


def txn_id_of(body: bytes) -> TxnId:
    return TxnId(*_TXN_ID.unpack_from(body))


def decode_abort(body: bytes) -> AbortedTxn:
    """An AbortedTxn from a record body that check_abort() passed."""
    most, least, first_l, first_e, marker_l, marker_e, mrp_l, mrp_e = _ABORT.unpack(body)
    return AbortedTxn(
        TxnId(most, least),
        Position(first_l, first_e),
        Position(marker_l, marker_e),
        Position(mrp_l, mrp_e),
    )


class SnapshotStore:
    def __init__(self, store: LocalStore, topic: str):
        self.store = store
        self.topic = topic
        self._prefix = topic_prefix(topic)
        self._meta_key = self._prefix + META_KEY
        self._abort_prefix = f"{self._prefix}a\x00"

    def _abort_key(self, marker: Position) -> str:
        return f"{self._abort_prefix}{marker.ledger_id:016x}{marker.entry_id:016x}"

    def write(
        self,
        snapshot: Snapshot,
        new_aborts: list[AbortedTxn],
        dropped_ledgers: list[int],
        on_written: Callable[[SnapshotCopy], None] | None = None,
    ) -> int:
        """Write one snapshot in one LMDB transaction: `snapshot` without its aborted
        list, plus the aborts added and the ledgers dropped since the previous one.
        Returns the bytes written. `on_written` (a replicated log's) is then given the
        write as a copy for the other members, naming the state it follows."""
        meta = json.dumps(
            {
                "version": SNAPSHOT_VERSION,
                # Ids and positions are (int, int) tuples: JSON writes them as arrays.
                "position": snapshot.position,
                "max_read_position": snapshot.max_read_position,
                "ongoing": [t + p for t, p in snapshot.ongoing],
                "low_watermarks": {str(k): v for k, v in snapshot.low_watermarks.items()},
                "committed": [t + p for t, p in snapshot.committed],
                "late_positions": snapshot.late_positions,
                "producers": {n: list(v) for n, v in snapshot.producers.items()},
                "taken_at_ms": snapshot.taken_at_ms,
            },
            separators=(",", ":"),
        ).encode()
        puts = {self._abort_key(a.marker_position): encode_abort(a) for a in new_aborts}
        puts[self._meta_key] = _with_crc(meta)
        deletes = []
        dropped_prefixes = [
            f"{self._abort_prefix}{ledger_id:016x}" for ledger_id in dropped_ledgers
        ]
        for prefix in dropped_prefixes:
            deletes.extend(key for key, _ in self.store.scan_prefix(SNAPSHOTS_DB, prefix))
        follows = held_digest(self.store, self.topic) if on_written is not None else b""
        self.store.write_many(SNAPSHOTS_DB, puts, deletes)
        if on_written is not None:
            relative = len(self._prefix)
            on_written(
                SnapshotCopy(
                    follows,
                    False,
                    {key[relative:]: value for key, value in puts.items()},
                    tuple(prefix[relative:] for prefix in dropped_prefixes),
                )
            )
        return sum(len(k) + len(v) for k, v in puts.items()) + sum(map(len, deletes))

    def read(self) -> Snapshot | None:
        """The last snapshot, None when there is none; SnapshotCorruptError when it is damaged."""
        raw = self.store.get(SNAPSHOTS_DB, self._meta_key)
        if raw is None:
            return None
        try:
            meta = json.loads(_checked(raw, "snapshot meta"))
            if meta.get("version") != SNAPSHOT_VERSION:
                raise SnapshotCorruptError(
                    f"snapshot of {self.topic} has version {meta.get('version')}, "
                    f"expected {SNAPSHOT_VERSION}"
                )
            return Snapshot(
                position=Position(*meta["position"]),
                max_read_position=Position(*meta["max_read_position"]),
                ongoing=[(TxnId(a, b), Position(c, d)) for a, b, c, d in meta["ongoing"]],
                low_watermarks={int(k): v for k, v in meta["low_watermarks"].items()},
                committed=[(TxnId(a, b), Position(c, d)) for a, b, c, d in meta["committed"]],
                late_positions=[Position(*p) for p in meta["late_positions"]],
                producers={str(k): (int(v[0]), int(v[1])) for k, v in meta["producers"].items()},
                aborted_records=self._read_aborts(),
                taken_at_ms=meta["taken_at_ms"],
            )
        except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
            if isinstance(error, SnapshotCorruptError):
                raise
            raise SnapshotCorruptError(f"snapshot meta of {self.topic}: {error!r}") from None

    def _read_aborts(self) -> dict[int, list[bytes]]:
        by_ledger: dict[int, list[bytes]] = {}
        ledger_digits = slice(len(self._abort_prefix), len(self._abort_prefix) + 16)
        records: list[bytes] = []
        current = None
        for key, value in self.store.scan_prefix(SNAPSHOTS_DB, self._abort_prefix):
            digits = key[ledger_digits]
            if digits != current:
                current = digits
                records = by_ledger[int(digits, 16)] = []
            records.append(check_abort(value))
        return by_ledger

    def delete(self) -> None:
        self.store.delete_prefix(SNAPSHOTS_DB, self._prefix)
