"""CRC framing: what is checked before a frame is written is checked when it is read."""

from __future__ import annotations

import pytest

from managed_ledger import CorruptEntryError
from managed_ledger.framing import (
    FRAME,
    FRAME_SIZE,
    MAX_FRAME_BODY,
    decode_frame,
    encode_frame,
    scan_frames,
    scan_log,
)


def _flip(data: bytes, index: int) -> bytes:
    flipped = bytearray(data)
    flipped[index] ^= 0x01
    return bytes(flipped)


def test_frame_round_trips_header_and_payload():
    frame = encode_frame(b"head", b"payload bytes")
    assert decode_frame(frame, 0) == (b"head", b"payload bytes", len(frame))


def test_frame_length_is_frame_header_plus_body():
    assert len(encode_frame(b"abc", b"12345")) == FRAME_SIZE + 3 + 5


def test_empty_payload_round_trips():
    frame = encode_frame(b"h", b"")
    assert decode_frame(frame, 0) == (b"h", b"", FRAME_SIZE + 1)


def test_frame_with_empty_header_is_never_written():
    with pytest.raises(AssertionError):
        encode_frame(b"", b"payload")


def test_decode_returns_offset_of_next_frame():
    first, second = encode_frame(b"h1", b"p1"), encode_frame(b"h2", b"second")
    buffer = memoryview(first + second)
    _, _, following = decode_frame(buffer, 0)
    assert following == len(first)
    assert decode_frame(buffer, following) == (b"h2", b"second", len(first) + len(second))


@pytest.mark.parametrize("where", ["header", "payload", "crc field"])
def test_flipped_bit_is_detected_as_crc_mismatch(where):
    frame = encode_frame(b"header", b"payload")
    index = {"header": FRAME_SIZE + 1, "payload": len(frame) - 1, "crc field": 4}[where]
    with pytest.raises(CorruptEntryError, match="CRC mismatch"):
        decode_frame(_flip(frame, index), 0)


@pytest.mark.parametrize("keep", [0, 1, FRAME_SIZE - 1, FRAME_SIZE, FRAME_SIZE + 5])
def test_truncated_frame_is_detected(keep):
    frame = encode_frame(b"header", b"payload")
    with pytest.raises(CorruptEntryError, match=r"truncated|bad frame lengths"):
        decode_frame(frame[:keep], 0)


def test_header_length_beyond_body_is_rejected():
    frame = bytearray(encode_frame(b"h", b"p"))
    body_len, crc, _ = FRAME.unpack_from(frame, 0)
    FRAME.pack_into(frame, 0, body_len, crc, body_len + 1)
    with pytest.raises(CorruptEntryError, match="bad frame lengths"):
        decode_frame(bytes(frame), 0)


def test_body_length_over_the_maximum_is_rejected_as_garbage():
    garbage = FRAME.pack(MAX_FRAME_BODY + 1, 0, 0) + b"\x00" * 16
    with pytest.raises(CorruptEntryError, match="bad frame lengths"):
        decode_frame(garbage, 0)


@pytest.mark.parametrize("length", [FRAME_SIZE, 4096])
def test_zero_filled_region_is_not_a_frame(length):
    # Twelve zero bytes are an empty body whose CRC (0) matches: only the rule that
    # a header is never empty keeps a zero-filled tail from scanning as entries.
    with pytest.raises(CorruptEntryError, match="bad frame lengths"):
        decode_frame(b"\x00" * length, 0)
    good = encode_frame(b"h", b"good")
    assert [p for _, _, p, _ in scan_frames(good + b"\x00" * length)] == [b"good"]


def test_scan_yields_every_valid_frame_with_offsets():
    frames = [encode_frame(b"h%d" % i, b"p" * i) for i in range(5)]
    buffer = b"".join(frames)
    scanned = list(scan_frames(buffer))
    offsets = [sum(len(f) for f in frames[:i]) for i in range(5)]
    assert [s[0] for s in scanned] == offsets
    assert [(s[1], s[2]) for s in scanned] == [(b"h%d" % i, b"p" * i) for i in range(5)]
    assert scanned[-1][3] == len(buffer)


def test_scan_stops_at_first_bad_frame():
    good = encode_frame(b"h", b"good")
    bad = _flip(encode_frame(b"h", b"bad"), -1)
    after = encode_frame(b"h", b"after")
    scanned = list(scan_frames(good + bad + after))
    assert [payload for _, _, payload, _ in scanned] == [b"good"]


def test_scan_of_empty_buffer_yields_nothing():
    assert list(scan_frames(b"")) == []


def test_scan_log_resyncs_after_a_damaged_frame_and_keeps_the_rest():
    frames = [encode_frame(b"h", f"payload-{i}".encode()) for i in range(4)]
    data = b"".join(frames)
    size = len(frames[0])
    scan = scan_log(_flip(data, size + FRAME_SIZE + 3))  # inside frame 1's body
    assert scan.offsets == [0, size, 2 * size, 3 * size, 4 * size]
    assert [(d.entry_index, d.start, d.end, d.exact) for d in scan.damage] == [
        (1, size, 2 * size, True)
    ]


def test_scan_log_never_takes_a_frame_inside_a_damaged_payload_when_its_length_holds():
    # A producer's payload that is itself a valid frame: only where the damaged
    # frame's own length points is searched, never inside its payload.
    inner = encode_frame(b"forged", b"entry")
    frames = [encode_frame(b"h", b"a"), encode_frame(b"h", inner), encode_frame(b"h", b"c")]
    data = b"".join(frames)
    damaged = _flip(data, len(frames[0]) + FRAME_SIZE)  # frame 1's header byte
    scan = scan_log(damaged)
    assert len(scan.offsets) - 1 == 3
    assert [d.exact for d in scan.damage] == [True]
    assert scan.offsets[2] == len(frames[0]) + len(frames[1])


def test_scan_log_finds_the_next_frame_by_search_when_the_length_is_damaged():
    frames = [encode_frame(b"h", f"payload-{i}".encode()) for i in range(3)]
    data = b"".join(frames)
    size = len(frames[0])
    scan = scan_log(_flip(data, size + 2))  # frame 1's length field
    assert scan.offsets == [0, size, 2 * size, 3 * size]
    assert [d.exact for d in scan.damage] == [False]


def test_scan_log_cuts_only_after_the_last_valid_frame():
    frames = [encode_frame(b"h", f"payload-{i}".encode()) for i in range(3)]
    data = b"".join(frames)
    scan = scan_log(_flip(data, len(data) - 1) + b"\x00" * 50)
    assert scan.end == 2 * len(frames[0]) and scan.damage == []
