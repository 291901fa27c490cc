"""Entry headers and positions: the only parts of an entry the broker decodes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managed_ledger import EARLIEST, LATEST, EntryHeader, EntryType, Position, TxnId
from managed_ledger.entry import stamp_base_offset, with_base_offset_slot


@pytest.mark.parametrize(
    "header",
    [
        EntryHeader(),
        EntryHeader(
            type=EntryType.DATA,
            num_messages=100,
            publish_time_ms=1_700_000_000_123,
            producer_name="producer-é-1",
            sequence_id=42,
            txn_id=TxnId(7, 2**64 - 1),
            low_watermark=3,
        ),
        EntryHeader(type=EntryType.TXN_COMMIT, num_messages=0, txn_id=TxnId(0, 0)),
        EntryHeader(type=EntryType.TXN_ABORT, txn_id=TxnId(1, 2)),
    ],
)
def test_header_round_trips_every_field(header):
    assert EntryHeader.decode(header.encode()) == header


def test_txn_id_zero_is_distinct_from_no_txn():
    assert EntryHeader.decode(EntryHeader(txn_id=TxnId(0, 0)).encode()).txn_id == TxnId(0, 0)
    assert EntryHeader.decode(EntryHeader().encode()).txn_id is None


def test_header_with_trailing_bytes_is_rejected():
    with pytest.raises(ValueError, match="entry header is"):
        EntryHeader.decode(EntryHeader(producer_name="p").encode() + b"x")


def test_markers_are_the_non_data_types():
    assert not EntryHeader().is_marker
    assert EntryHeader(type=EntryType.TXN_COMMIT).is_marker
    assert EntryHeader(type=EntryType.TXN_ABORT).is_marker


def test_positions_order_by_ledger_then_entry():
    assert EARLIEST < Position(0, 0) < Position(0, 1) < Position(1, -1) < Position(1, 0) < LATEST


def test_position_parse_round_trips_its_string():
    assert Position.parse(str(Position(12, 345))) == Position(12, 345)
    assert Position.parse("-1:-1") == EARLIEST


@pytest.mark.parametrize("text", ["", "1", "a:b", "1:2:3"])
def test_position_parse_rejects_malformed_text(text):
    with pytest.raises(ValueError, match="not a position"):
        Position.parse(text)


@given(st.integers(-1, 2**63 - 1), st.integers(-1, 2**63 - 1))
def test_position_text_round_trips(ledger_id, entry_id):
    position = Position(ledger_id, entry_id)
    assert str(position) == f"{ledger_id}:{entry_id}"
    assert Position.parse(str(position)) == position


@pytest.mark.parametrize("text", ["+1:2", " 1:2", "1:2 ", "1_0:2", "\u0661:2", "1:", ":2", "1;2"])
def test_position_parse_takes_only_the_text_str_makes(text):
    with pytest.raises(ValueError, match="not a position"):
        Position.parse(text)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_txn_id_text_is_most_colon_least_and_round_trips(most, least):
    txn_id = TxnId(most, least)
    assert str(txn_id) == f"{most}:{least}"
    assert TxnId.parse(str(txn_id)) == txn_id


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "(1,2)",
        "1,2",
        "1:2:3",
        "-1:2",
        "1:-2",
        "+1:2",
        " 1:2",
        "1_0:2",
        "\u0661:2",
        f"{2**64}:0",
        f"0:{2**64}",
    ],
)
def test_txn_id_parse_refuses_anything_else_saying_what_it_expects(text):
    with pytest.raises(ValueError, match=r"not a transaction id .*expected 'most:least'"):
        TxnId.parse(text)


@pytest.mark.parametrize("key_hash", [0, 1, 2**32 - 1])
def test_key_hash_round_trips_with_and_without_a_transaction(key_hash):
    for txn in (None, TxnId(3, 4)):
        header = EntryHeader(producer_name="p", key_hash=key_hash, txn_id=txn)
        assert EntryHeader.decode(header.encode()) == header


def test_header_written_without_key_flag_decodes_as_keyless():
    # The layout entries had before key hashes: no flag bit 2, nothing after the name.
    old = EntryHeader(producer_name="old", txn_id=TxnId(1, 1)).encode()
    assert old[1] == 1
    assert EntryHeader.decode(old).key_hash is None


def test_header_with_unknown_flag_is_rejected():
    data = bytearray(EntryHeader().encode())
    data[1] |= 0x80
    with pytest.raises(ValueError, match="unknown flags"):
        EntryHeader.decode(bytes(data))


def test_header_with_key_flag_and_missing_hash_is_rejected():
    data = EntryHeader(producer_name="p", key_hash=9).encode()
    with pytest.raises(ValueError, match="entry header is"):
        EntryHeader.decode(data[:-1])


@pytest.mark.parametrize("base_offset", [0, 1, 2**62])
def test_base_offset_round_trips_with_key_hash_and_transaction(base_offset):
    for txn in (None, TxnId(3, 4)):
        for key_hash in (None, 7):
            header = EntryHeader(
                producer_name="p", key_hash=key_hash, txn_id=txn, base_offset=base_offset
            )
            assert EntryHeader.decode(header.encode()) == header


def test_header_written_without_base_offset_flag_decodes_without_one():
    # The layout entries had before offsets: no flag bit 4, nothing after the key hash.
    old = EntryHeader(producer_name="old", key_hash=5).encode()
    assert old[1] & 4 == 0
    decoded = EntryHeader.decode(old)
    assert decoded.base_offset is None and decoded.key_hash == 5


def test_header_with_base_offset_flag_and_missing_offset_is_rejected():
    data = EntryHeader(producer_name="p", base_offset=9).encode()
    with pytest.raises(ValueError, match="entry header is"):
        EntryHeader.decode(data[:-1])


def test_a_marker_takes_one_offset_and_a_batch_one_per_message():
    assert EntryHeader(type=EntryType.TXN_ABORT, num_messages=0).offset_count == 1
    assert EntryHeader(num_messages=7).offset_count == 7


def test_stamping_an_encoded_header_sets_its_base_offset_only():
    encoded = EntryHeader(producer_name="p", key_hash=3, base_offset=0).encode()
    decoded = EntryHeader.decode(stamp_base_offset(encoded, 41))
    assert decoded == EntryHeader(producer_name="p", key_hash=3, base_offset=41)


def test_a_header_encoded_without_an_offset_takes_one_in_its_slot():
    header = EntryHeader(producer_name="p", key_hash=3, txn_id=TxnId(1, 2))
    slotted = with_base_offset_slot(header.encode())
    assert EntryHeader.decode(stamp_base_offset(slotted, 7)) == header.stamped(7)
    assert with_base_offset_slot(slotted) == slotted
