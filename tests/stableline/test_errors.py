"""Internal errors reach clients as an id, their text stays in the broker log."""

from __future__ import annotations

import logging
import re

import grpc
import lmdb
import pytest

from stableline.broker.errors import classify


@pytest.fixture
def lmdb_error(tmp_path) -> lmdb.Error:
    """A real LMDB error: a write to an environment opened read-only."""
    lmdb.open(str(tmp_path / "db")).close()
    env = lmdb.open(str(tmp_path / "db"), readonly=True)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"k", b"v")
    except lmdb.Error as error:
        return error
    finally:
        env.close()
    raise AssertionError("the read-only write did not fail")


def test_an_internal_error_sends_an_id_and_logs_its_text_with_that_id(lmdb_error, caplog):
    with caplog.at_level(logging.ERROR, logger="stableline.broker.errors"):
        broker_error = classify(lmdb_error)
    assert broker_error.status is grpc.StatusCode.INTERNAL
    message = str(broker_error)
    match = re.fullmatch(r"internal error \(id ([0-9a-f]{8})\); see the broker log", message)
    assert match, message
    assert str(lmdb_error) not in message and "mdb" not in message.lower()
    logged = [r for r in caplog.records if f"(id {match[1]})" in r.getMessage()]
    assert logged and str(lmdb_error) in logged[0].getMessage()


def test_each_internal_error_gets_its_own_id(lmdb_error):
    assert str(classify(lmdb_error)) != str(classify(lmdb_error))
