"""An entry: a fixed binary header the engines understand, and an opaque payload.

The header is all the broker ever decodes of an entry (type, message count, the
transaction it belongs to); the payload is a client-encoded batch of messages that
is stored and dispatched byte for byte.
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
# low watermark, producer name length
_HEADER = struct.Struct("<BBIqqQQQH")
_FLAG_TXN = 1


@dataclass(frozen=True, slots=True)
class EntryHeader:
    type: EntryType = EntryType.DATA
    num_messages: int = 1
    publish_time_ms: int = 0
    producer_name: str = ""
    sequence_id: int = -1
    txn_id: TxnId | None = None
    low_watermark: int = 0

    @property
    def is_marker(self) -> bool:
        return self.type is not EntryType.DATA

    def encode(self) -> bytes:
        name = self.producer_name.encode()
        txn = self.txn_id
        return (
            _HEADER.pack(
                self.type,
                _FLAG_TXN if txn is not None else 0,
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

    @classmethod
    def decode(cls, data: bytes | memoryview) -> EntryHeader:
        (type_, flags, num, publish, seq, most, least, lwm, name_len) = _HEADER.unpack_from(data)
        end = _HEADER.size + name_len
        if len(data) != end:
            raise ValueError(f"entry header is {len(data)} bytes, expected {end}")
        return cls(
            type=EntryType(type_),
            num_messages=num,
            publish_time_ms=publish,
            producer_name=bytes(data[_HEADER.size : end]).decode(),
            sequence_id=seq,
            txn_id=TxnId(most, least) if flags & _FLAG_TXN else None,
            low_watermark=lwm,
        )


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    header: EntryHeader
    payload: bytes

    @property
    def size(self) -> int:
        return len(self.payload)
