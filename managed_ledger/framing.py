"""CRC-framed entries in a segment file, and the recovery scan over them.

Frame: body length, CRC-32 of the body, header length (little-endian u32 each),
then the body = header bytes + payload bytes. What is checked before a frame is
written (lengths, CRC) is checked again when it is read back.

The header is never empty. That is what tells a frame from zeros: twelve zero
bytes would otherwise read as an empty frame with a valid CRC (CRC-32 of nothing
is 0), and a zero-filled tail left by a crash would recover as phantom entries.

Recovery (scan_log) keeps every frame that passes its checks. A bad frame with
valid frames after it is damage, not a torn tail: the scan resynchronises on the
next valid frame and reports the bad bytes as one damaged entry. Only bytes after
the last valid frame are a torn tail.

What a resync can prove. The format has no magic, so a valid frame is known only
by its lengths and by its CRC over header and payload: a random run of bytes
passes both with odd of about 2**-32. The scan first tries where the damaged
frame's own length says the next frame starts; when that frame is valid the
damaged entry is exactly one entry and its payload is never searched, so a frame
a producer embedded in a payload cannot be taken for an entry. Only when the
length field itself is damaged does the scan search byte by byte; then it cannot
tell how many entries the damaged bytes held, nor a frame inside a payload from a
real one, and says so (Damage.exact is False).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from managed_ledger.errors import CorruptEntryError

FRAME = struct.Struct("<III")
FRAME_SIZE = FRAME.size
# A frame longer than this is garbage, not an entry: recovery stops there.
MAX_FRAME_BODY = 256 * 1024 * 1024


def encode_frame(header: bytes, payload: bytes) -> bytes:
    assert header, "a frame's header is never empty"
    crc = zlib.crc32(payload, zlib.crc32(header))
    return FRAME.pack(len(header) + len(payload), crc, len(header)) + header + payload


def decode_frame(buffer: bytes | memoryview, offset: int) -> tuple[bytes, bytes, int]:
    """Decode the frame at offset: (header, payload, offset of the next frame)."""
    if offset + FRAME_SIZE > len(buffer):
        raise CorruptEntryError(f"truncated frame header at offset {offset}")
    body_len, crc, header_len = FRAME.unpack_from(buffer, offset)
    start = offset + FRAME_SIZE
    end = start + body_len
    if body_len > MAX_FRAME_BODY or not 0 < header_len <= body_len or end > len(buffer):
        raise CorruptEntryError(f"bad frame lengths at offset {offset}")
    header = bytes(buffer[start : start + header_len])
    payload = bytes(buffer[start + header_len : end])
    if zlib.crc32(payload, zlib.crc32(header)) != crc:
        raise CorruptEntryError(f"CRC mismatch at offset {offset}")
    return header, payload, end


def scan_frames(buffer: bytes | memoryview) -> Iterator[tuple[int, bytes, bytes, int]]:
    """Yield (offset, header, payload, next offset) per valid frame; stop at the first bad one."""
    offset = 0
    while offset < len(buffer):
        try:
            header, payload, following = decode_frame(buffer, offset)
        except CorruptEntryError:
            return
        yield offset, header, payload, following
        offset = following


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes between two valid frames that no valid frame covers: one damaged entry."""

    entry_index: int  # the entry number the damaged bytes take in the segment
    start: int
    end: int  # where the next valid frame starts
    # True when the damaged frame's own length led to the next valid frame: the
    # bytes held exactly this one entry. False when the length field itself was
    # damaged and the next frame was found by a byte search.
    exact: bool


@dataclass(frozen=True, slots=True)
class LogScan:
    """What scan_log found: where each entry starts, which ones are damaged."""

    # offsets[i] is where entry i starts (damaged ones included); offsets[-1] == end.
    offsets: list[int]
    damage: list[Damage] = field(default_factory=list)

    @property
    def end(self) -> int:
        """End of the last valid frame: any byte past it is a torn tail."""
        return self.offsets[-1]


def _valid_at(buffer: bytes | memoryview, offset: int) -> bool:
    try:
        decode_frame(buffer, offset)
    except CorruptEntryError:
        return False
    return True


def _resync(buffer: bytes | memoryview, bad: int) -> tuple[int, bool] | None:
    """Where the next valid frame after the bad one at `bad` starts, and whether the
    bad frame's own length led there; None when no valid frame follows (a torn tail)."""
    size = len(buffer)
    if bad + FRAME_SIZE <= size:
        body_len, _crc, _header_len = FRAME.unpack_from(buffer, bad)
        following = bad + FRAME_SIZE + body_len
        if body_len <= MAX_FRAME_BODY and following < size and _valid_at(buffer, following):
            return following, True
    for candidate in range(bad + 1, size - FRAME_SIZE):
        if _valid_at(buffer, candidate):
            return candidate, False
    return None


def scan_log(buffer: bytes | memoryview) -> LogScan:
    """Every entry of a segment file: valid frames kept, damaged ones between valid
    frames numbered and reported, the torn tail (after the last valid frame) left out."""
    offsets: list[int] = []
    damage: list[Damage] = []
    offset = 0
    while offset < len(buffer):
        try:
            _header, _payload, following = decode_frame(buffer, offset)
        except CorruptEntryError:
            resync = _resync(buffer, offset)
            if resync is None:
                break
            following, exact = resync
            damage.append(Damage(len(offsets), offset, following, exact))
        offsets.append(offset)
        offset = following
    offsets.append(offset)
    return LogScan(offsets, damage)
