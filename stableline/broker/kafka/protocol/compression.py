"""The codecs of Kafka record batches: inflating a producer's records, bounded.

gzip (zlib), lz4 (LZ4 frames, the `lz4` package) and zstd (the `zstandard`
package) are inflated; snappy is refused with UnsupportedCompression (the client
hears UNSUPPORTED_COMPRESSION_TYPE) rather than stored unreadable. Inflation stops
one byte past `limit` (RecordsTooLarge) instead of trusting the batch: a megabyte
of any of them can stand for a gigabyte of zeros. Batches are served to fetchers
uncompressed or gzipped, so only gzip is written.

The bound is per request too: an InflationBudget, one per Produce, is what all its
batches together may still cost decoded (their bytes, and each record the Python
objects it becomes); a batch is inflated no further than what is left, so a
request of many small bombs stops at the first that would pass it, and the rest
are never inflated.
"""

from __future__ import annotations

import enum
import gzip
import zlib

import lz4.frame
import zstandard

_TOO_LARGE_ADVICE = "send smaller batches (batch.size, linger.ms)"


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class UnsupportedCompression(ValueError):
    """A batch compressed with a codec this broker does not carry."""


class RecordsTooLarge(ValueError):
    """A compressed batch whose records inflate past the bound (MESSAGE_TOO_LARGE)."""


class CorruptCompression(ValueError):
    """Compressed records that do not inflate (the batch is corrupt)."""


# What one decoded record costs beside its bytes: its Record, timestamp and value
# objects (about 150 bytes measured for a one-byte value).
RECORD_COST_BYTES = 160


class InflationBudget:
    """Bytes the decoded records of one request may still cost (RecordsTooLarge
    past them); `exhausted` once a charge was refused, for good."""

    __slots__ = ("exhausted", "left", "limit")

    def __init__(self, limit: int) -> None:
        assert limit > 0
        self.limit = limit
        self.left = limit
        self.exhausted = False

    def charge(self, size: int) -> None:
        if size > self.left:
            raise self.refusal()
        self.left -= size

    def refusal(self) -> RecordsTooLarge:
        """The error of a request past its budget (and the budget marked spent)."""
        self.exhausted = True
        self.left = 0
        return RecordsTooLarge(
            f"the records of this request decompress to more than {self.limit:,} bytes "
            f"(kafka_max_produce_inflated_bytes, each record counted as "
            f"{RECORD_COST_BYTES} bytes more): nothing of it was written; "
            f"{_TOO_LARGE_ADVICE}, fewer per request (max.request.size)"
        )


def inflate(codec: Compression, data: bytes, limit: int) -> bytes:
    """The records of a batch compressed with `codec`, at most `limit` bytes."""
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return _gunzip(data, limit)
    if codec is Compression.LZ4:
        return _unlz4(data, limit)
    if codec is Compression.ZSTD:
        return _unzstd(data, limit)
    raise UnsupportedCompression(
        f"{codec.name.lower()} compression is not supported by this broker; "
        "use compression.type none, gzip, lz4 or zstd"
    )


def deflate(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=1)
    raise UnsupportedCompression(f"cannot write {codec.name.lower()} batches")


def _check_size(name: str, size: int, limit: int) -> None:
    if size > limit:
        raise RecordsTooLarge(
            f"{name} records decompress to more than {limit:,} bytes, this broker's bound "
            f"for one batch: {_TOO_LARGE_ADVICE}"
        )


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip members one after another, as gzip.decompress reads them."""
    out = bytearray()
    while data:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out += member.decompress(data, limit + 1 - len(out))
        except zlib.error as error:
            raise CorruptCompression(f"gzip records do not decompress: {error}") from None
        _check_size("gzip", len(out), limit)
        if not member.eof:
            raise CorruptCompression("gzip records end before their stream does")
        data = member.unused_data
    return bytes(out)


def _unlz4(data: bytes, limit: int) -> bytes:
    """LZ4 frames one after another (Kafka's clients write one)."""
    out = bytearray()
    while data:
        frame = lz4.frame.LZ4FrameDecompressor()
        try:
            out += frame.decompress(data, max_length=limit + 1 - len(out))
            # max_length may stop short of a block's end: take the rest in steps.
            while not frame.eof and not frame.needs_input and len(out) <= limit:
                out += frame.decompress(b"", max_length=limit + 1 - len(out))
        except RuntimeError as error:
            raise CorruptCompression(f"lz4 records do not decompress: {error}") from None
        _check_size("lz4", len(out), limit)
        if not frame.eof:
            raise CorruptCompression("lz4 records end before their frame does")
        data = frame.unused_data
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    """zstd frames, read as a stream so that a frame claiming a huge size is
    never given that much memory at once."""
    out = bytearray()
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    try:
        while len(out) <= limit:
            chunk = reader.read(limit + 1 - len(out))
            if not chunk:
                break
            out += chunk
    except zstandard.ZstdError as error:
        raise CorruptCompression(f"zstd records do not decompress: {error}") from None
    _check_size("zstd", len(out), limit)
    return bytes(out)
