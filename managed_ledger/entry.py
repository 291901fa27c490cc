"""An entry: a fixed binary header the engines understand, and an opaque payload.

The header is all the broker ever decodes of an entry (type, message count, the
transaction it belongs to, the hash of its key, the log offset of its first
message); the payload is a client-encoded
batch of messages that is stored and dispatched byte for byte. Every entry holds
messages of at most one key (producers cut a batch where the key changes), so one
key hash per entry is what Key_Shared dispatch routes by.

Log offsets (Kafka's): every message and every marker takes one consecutive
number per topic. The ledger stamps each entry with the offset of its first
message as it writes it (`base_offset`), so an offset is found from headers alone.
Entries written before offsets existed have no base offset; the ledger derives
theirs by counting (managed_ledger/offsets.py).
"""

from __future__ import annotations

import enum
import re
import struct
from dataclasses import dataclass
from typing import NamedTuple

from managed_ledger.position import Position


class EntryType(enum.IntEnum):
    DATA = 0
    TXN_COMMIT = 1
    TXN_ABORT = 2


class TxnId(NamedTuple):
    """A tuple, as Position is: the transaction buffer hashes and orders ids on every
    transactional entry and marker (its sorted sets bisect over them), and a frozen
    dataclass's generated methods made that the largest part of its own cost."""

    most_bits: int
    least_bits: int

    def __str__(self) -> str:
        """The one text form, "most:least" (admin JSON, errors, Spark, the CLI)."""
        return f"{self.most_bits}:{self.least_bits}"

    @classmethod
    def parse(cls, text: str) -> TxnId:
        """ "most:least" (two unsigned 64-bit decimals) -> TxnId; ValueError otherwise."""
        match = _TXN_ID_TEXT.fullmatch(text)
        if match is not None:
            most, least = int(match[1]), int(match[2])
            if most < 2**64 and least < 2**64:
                return cls(most, least)
        raise ValueError(
            f"not a transaction id {text!r}: expected 'most:least', two whole numbers "
            "from 0 to 2**64-1 (e.g. '0:17')"
        )


# ASCII digits only: int() alone would also take '+1', ' 1', '1_0' and other scripts' digits.
_TXN_ID_TEXT = re.compile(r"([0-9]+):([0-9]+)")


# type, flags, num_messages, publish_time_ms, sequence_id, txn most, txn least,
# low watermark, producer name length; then the name, then (flag KEY_HASH) the hash,
# then (flag BASE_OFFSET) the base offset.
_HEADER = struct.Struct("<BBIqqQQQH")
_KEY_HASH = struct.Struct("<I")
_BASE_OFFSET = struct.Struct("<q")
_FLAG_TXN = 1
# Written by brokers that store the key hash; entries written before decode as keyless.
_FLAG_KEY_HASH = 2
# Written by brokers that number messages; entries written before have no base offset.
_FLAG_BASE_OFFSET = 4
_KNOWN_FLAGS = _FLAG_TXN | _FLAG_KEY_HASH | _FLAG_BASE_OFFSET


@dataclass(frozen=True, slots=True)
class EntryHeader:
    type: EntryType = EntryType.DATA
    num_messages: int = 1
    publish_time_ms: int = 0
    producer_name: str = ""
    sequence_id: int = -1
    txn_id: TxnId | None = None
    low_watermark: int = 0
    # A stable 32-bit hash of the entry's key (None: the entry's messages have no key).
    # No __post_init__ check: headers are made per entry read; struct.pack refuses
    # a value outside 32 bits when the header is written.
    key_hash: int | None = None
    # The log offset of the entry's first message (a marker's own offset), stamped
    # by the ledger when it writes the entry; None before that, and in entries
    # written before offsets existed.
    base_offset: int | None = None

    @property
    def is_marker(self) -> bool:
        return self.type is not EntryType.DATA

    def stamped(self, base_offset: int) -> EntryHeader:
        """This header with its base offset. Positional, not dataclasses.replace:
        the writer stamps every entry, and replace cost twice as much as this."""
        return EntryHeader(
            self.type,
            self.num_messages,
            self.publish_time_ms,
            self.producer_name,
            self.sequence_id,
            self.txn_id,
            self.low_watermark,
            self.key_hash,
            base_offset,
        )

    @property
    def offset_count(self) -> int:
        """How many log offsets the entry takes: one per message, one for a marker."""
        return 1 if self.type is not EntryType.DATA else self.num_messages

    def encode(self) -> bytes:
        name = self.producer_name.encode()
        txn = self.txn_id
        key_hash = self.key_hash
        base_offset = self.base_offset
        flags = (
            (_FLAG_TXN if txn is not None else 0)
            | (_FLAG_KEY_HASH if key_hash is not None else 0)
            | (_FLAG_BASE_OFFSET if base_offset is not None else 0)
        )
        encoded = (
            _HEADER.pack(
                self.type,
                flags,
                self.num_messages,
                self.publish_time_ms,
                self.sequence_id,
                txn.most_bits if txn else 0,
                txn.least_bits if txn else 0,
                self.low_watermark,
                len(name),
            )
            + name
        )
        if key_hash is not None:
            encoded += _KEY_HASH.pack(key_hash)
        if base_offset is not None:
            encoded += _BASE_OFFSET.pack(base_offset)
        return encoded

    @classmethod
    def decode(cls, data: bytes | memoryview) -> EntryHeader:
        (type_, flags, num, publish, seq, most, least, lwm, name_len) = _HEADER.unpack_from(data)
        if flags & ~_KNOWN_FLAGS:
            raise ValueError(f"entry header has unknown flags {flags:#x}")
        end = _HEADER.size + name_len
        expected = (
            end
            + (_KEY_HASH.size if flags & _FLAG_KEY_HASH else 0)
            + (_BASE_OFFSET.size if flags & _FLAG_BASE_OFFSET else 0)
        )
        if len(data) != expected:
            raise ValueError(f"entry header is {len(data)} bytes, expected {expected}")
        key_hash = base_offset = None
        if flags & _FLAG_KEY_HASH:
            (key_hash,) = _KEY_HASH.unpack_from(data, end)
        if flags & _FLAG_BASE_OFFSET:
            (base_offset,) = _BASE_OFFSET.unpack_from(data, expected - _BASE_OFFSET.size)
        return cls(
            type=EntryType(type_),
            num_messages=num,
            publish_time_ms=publish,
            producer_name=bytes(data[_HEADER.size : end]).decode(),
            sequence_id=seq,
            txn_id=TxnId(most, least) if flags & _FLAG_TXN else None,
            low_watermark=lwm,
            key_hash=key_hash,
            base_offset=base_offset,
        )


def with_base_offset_slot(encoded: bytes) -> bytes:
    """An encoded header made ready for stamp_base_offset: flagged, eight bytes longer."""
    if encoded[1] & _FLAG_BASE_OFFSET:
        return encoded
    return encoded[:1] + bytes((encoded[1] | _FLAG_BASE_OFFSET,)) + encoded[2:] + _NO_OFFSET


_NO_OFFSET = bytes(_BASE_OFFSET.size)


def stamp_base_offset(encoded: bytes, base_offset: int) -> bytes:
    """An encoded header that has a base offset, with `base_offset` in its place."""
    assert encoded[1] & _FLAG_BASE_OFFSET, "the header was encoded without a base offset"
    return encoded[: -_BASE_OFFSET.size] + _BASE_OFFSET.pack(base_offset)


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    header: EntryHeader
    payload: bytes

    @property
    def size(self) -> int:
        return len(self.payload)
