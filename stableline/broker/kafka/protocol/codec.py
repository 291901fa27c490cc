"""Kafka's primitive types: the reader and writer every message schema is made of.

Fixed-width integers are big-endian. Classic (non-flexible) versions prefix
strings with an int16 length and bytes and arrays with an int32 one, -1 meaning
null; flexible versions use "compact" forms (unsigned varint length + 1, 0
meaning null) and end each structure with tagged fields. Records use zig-zag
varints. A read past the end, a negative length where null is not allowed or a
length past the end raises MalformedRequest, never anything else.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from stableline.wire import uvarint

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


class MalformedRequest(ValueError):
    """The bytes do not parse as the schema says: the connection is closed."""


class TooManyItems(MalformedRequest):
    """A request whose arrays name more items together than its bound (a Fetch of
    more partitions than the broker serves in one request): refused, as a request
    that does not parse is, before the items are read."""


class ItemBudget:
    """How many items the arrays of one request may still hold together: each array
    given it takes its length before any item is read, so a request past the bound
    costs the broker one length, not a decoded list."""

    __slots__ = ("_left", "_limit", "_what")

    def __init__(self, limit: int, what: str) -> None:
        assert limit >= 0
        self._left = self._limit = limit
        self._what = what

    @classmethod
    def of(cls, limit: int | None, what: str) -> ItemBudget | None:
        """A budget of `limit` `what`s; None (no bound) when `limit` is None."""
        return None if limit is None else cls(limit, what)

    def take(self, count: int) -> None:
        if count > self._left:
            raise TooManyItems(
                f"the request names more than {self._limit:,} {self._what}, "
                f"this broker's bound for one request"
            )
        self._left -= count


class Reader:
    """Reads one frame's bytes front to back."""

    __slots__ = ("_at", "_data")

    def __init__(self, data: bytes | memoryview) -> None:
        self._data = memoryview(data)
        self._at = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self._at

    def _take(self, size: int) -> memoryview:
        end = self._at + size
        if size < 0 or end > len(self._data):
            raise MalformedRequest(f"needs {size} bytes at {self._at}, has {self.remaining}")
        view = self._data[self._at : end]
        self._at = end
        return view

    def _fixed(self, form: struct.Struct) -> int:
        return form.unpack(self._take(form.size))[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def boolean(self) -> bool:
        return self._fixed(_I8) != 0

    def int16(self) -> int:
        return self._fixed(_I16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def uint32(self) -> int:
        return self._fixed(_U32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 63:
                raise MalformedRequest("varint longer than 10 bytes")
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def varint(self) -> int:
        """A zig-zag signed varint (records)."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def raw(self, size: int) -> bytes:
        return bytes(self._take(size))

    # ------------------------------------------------------------ lengths

    def _length(self, compact: bool, wide: bool) -> int:
        """A length; -1 for null."""
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def nullable_string(self, compact: bool = False) -> str | None:
        length = self._length(compact, wide=False)
        if length < 0:
            return None
        try:
            return str(self._take(length), "utf-8")
        except UnicodeDecodeError as error:
            raise MalformedRequest(f"string is not UTF-8: {error}") from None

    def string(self, compact: bool = False) -> str:
        value = self.nullable_string(compact)
        if value is None:
            raise MalformedRequest("null where a string is required")
        return value

    def nullable_bytes(self, compact: bool = False) -> bytes | None:
        length = self._length(compact, wide=True)
        return None if length < 0 else self.raw(length)

    def nullable_array(
        self,
        item: Callable[[Reader], T],
        compact: bool = False,
        budget: ItemBudget | None = None,
    ) -> list[T] | None:
        """`budget`: the items the request may still name, taken before any is read."""
        length = self._length(compact, wide=True)
        if length < 0:
            return None
        if length > self.remaining:  # every item takes at least a byte
            raise MalformedRequest(f"array of {length} items in {self.remaining} bytes")
        if budget is not None:
            budget.take(length)
        return [item(self) for _ in range(length)]

    def array(
        self,
        item: Callable[[Reader], T],
        compact: bool = False,
        budget: ItemBudget | None = None,
    ) -> list[T]:
        value = self.nullable_array(item, compact, budget)
        if value is None:
            raise MalformedRequest("null where an array is required")
        return value

    def tagged_fields(self) -> None:
        """Skip a flexible structure's tagged fields (none is understood yet)."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


class Writer:
    """Builds one response body."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def int8(self, value: int) -> Writer:
        self._parts.append(_I8.pack(value))
        return self

    def boolean(self, value: bool) -> Writer:
        return self.int8(1 if value else 0)

    def int16(self, value: int) -> Writer:
        self._parts.append(_I16.pack(value))
        return self

    def int32(self, value: int) -> Writer:
        self._parts.append(_I32.pack(value))
        return self

    def int64(self, value: int) -> Writer:
        self._parts.append(_I64.pack(value))
        return self

    def uvarint(self, value: int) -> Writer:
        self._parts.append(encode_uvarint(value))
        return self

    def raw(self, data: bytes) -> Writer:
        self._parts.append(data)
        return self

    def _length(self, length: int, compact: bool, wide: bool) -> None:
        if compact:
            self.uvarint(length + 1)
        elif wide:
            self.int32(length)
        else:
            self.int16(length)

    def string(self, value: str | None, compact: bool = False) -> Writer:
        if value is None:
            self._length(-1, compact, wide=False)
            return self
        encoded = value.encode()
        self._length(len(encoded), compact, wide=False)
        self._parts.append(encoded)
        return self

    def bytes_(self, value: bytes | None, compact: bool = False) -> Writer:
        if value is None:
            self._length(-1, compact, wide=True)
            return self
        self._length(len(value), compact, wide=True)
        self._parts.append(value)
        return self

    def array(
        self, items: list[T] | None, write: Callable[[Writer, T], object], compact: bool = False
    ) -> Writer:
        if items is None:
            self._length(-1, compact, wide=True)
            return self
        self._length(len(items), compact, wide=True)
        for item in items:
            write(self, item)
        return self

    def tagged_fields(self) -> Writer:
        """No tagged fields."""
        return self.uvarint(0)


encode_uvarint = uvarint  # Kafka's unsigned varint is protobuf's


def encode_varint(value: int) -> bytes:
    """Zig-zag signed varint (64-bit)."""
    if -1 <= value < _SMALL:
        return _SMALL_VARINTS[value]
    return encode_uvarint((value << 1) ^ (value >> 63))


# Records' lengths, deltas and -1 (null) are mostly small: their varints, made once.
_SMALL = 1 << 14
_SMALL_VARINTS = [encode_uvarint(v << 1) for v in range(_SMALL)] + [b"\x01"]  # [-1]: -1
