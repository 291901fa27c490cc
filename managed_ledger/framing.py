"""CRC-framed entries in a segment file.

Frame: body length, CRC-32 of the body, header length (little-endian u32 each),
then the body = header bytes + payload bytes. What is checked before a frame is
written (lengths, CRC) is checked again when it is read back.

The header is never empty. That is what tells a frame from zeros: twelve zero
bytes would otherwise read as an empty frame with a valid CRC (CRC-32 of nothing
is 0), and a zero-filled tail left by a crash would recover as phantom entries.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

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
