"""The client's text forms agree with the engines': a position is "ledger:entry" and a
transaction id "most:least" on both sides of the import line (the client never
imports managed_ledger, so each side writes them; these tests hold them to one form)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managed_ledger import Position, TxnId
from stableline._types import MessageId, parse_position, position_text, txn_id_text

positions = st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**63 - 1))
txn_ids = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
# Text either side might be given: well-formed, near misses and noise.
texts = st.one_of(
    st.from_regex(r"-?[0-9]{1,4}:-?[0-9]{1,4}", fullmatch=True),
    st.from_regex(r"[ +\-0-9:_,()\u0661]{0,8}", fullmatch=True),
    st.text(max_size=8),
)


@given(positions)
def test_client_and_engine_write_a_position_alike_and_read_it_back(pair):
    ledger_id, entry_id = pair
    text = position_text(MessageId(ledger_id, entry_id))
    assert text == str(Position(ledger_id, entry_id))
    assert parse_position(text) == MessageId(ledger_id, entry_id)


@given(texts)
def test_client_and_engine_accept_the_same_position_texts(text):
    try:
        engine = Position.parse(text)
    except ValueError:
        engine = None
    try:
        client = parse_position(text)
    except ValueError:
        client = None
    if engine is None:
        assert client is None
    else:
        assert (client.ledger_id, client.entry_id, client.batch_index) == (*engine, -1)


@given(txn_ids)
def test_client_writes_a_txn_id_as_the_engine_parses_it(pair):
    text = txn_id_text(pair)
    assert text == str(TxnId(*pair))
    assert TxnId.parse(text) == pair


def test_a_position_with_a_batch_index_is_not_a_position():
    with pytest.raises(ValueError, match="not a position '1:2:3'"):
        parse_position("1:2:3")


def test_the_client_and_the_spark_source_load_no_engine():
    """Of the engines, the client needs only the dispatcher's values (IsolationLevel, the
    key hash): never the ledger, the transaction buffer or the dispatcher's machinery."""
    code = (
        "import sys, stableline, stableline.aio, stableline.spark._read\n"
        "print(sorted(m for m in sys.modules"
        " if m.startswith(('managed_ledger', 'txnbuffer', 'dispatcher'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.strip() == "['dispatcher', 'dispatcher.key_hash', 'dispatcher.kinds']"
