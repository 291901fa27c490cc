"""The broker's LMDB local store: named databases, atomic batches, prefix scans."""

from __future__ import annotations

import inspect

import pytest

from managed_ledger import LocalStore, local_store


def test_get_of_missing_key_is_none(store):
    assert store.get(b"ledgers", "absent") is None
    assert store.get_json(b"ledgers", "absent") is None


def test_put_then_get_returns_the_bytes(store):
    store.put(b"ledgers", "k", b"\x00\x01value")
    assert store.get(b"ledgers", "k") == b"\x00\x01value"


def test_json_values_round_trip(store):
    value = {"next_ledger_id": 3, "ledgers": [{"id": 2, "closed": False}], "name": "é"}
    store.put_json(b"ledgers", "topic", value)
    assert store.get_json(b"ledgers", "topic") == value


def test_databases_are_separate_namespaces(store):
    store.put(b"ledgers", "same", b"ledger")
    store.put(b"cursors", "same", b"cursor")
    assert store.get(b"ledgers", "same") == b"ledger"
    assert store.get(b"cursors", "same") == b"cursor"


def test_write_many_applies_deletes_and_puts_together(store):
    store.put(b"cursors", "old", b"1")
    store.write_many(b"cursors", {"a": b"A", "b": b"B"}, deletes=["old"])
    assert store.get(b"cursors", "old") is None
    assert (store.get(b"cursors", "a"), store.get(b"cursors", "b")) == (b"A", b"B")


def test_write_many_is_all_or_nothing(store):
    store.put(b"cursors", "keep", b"1")
    with pytest.raises(Exception):  # noqa: B017 - any LMDB error aborts the transaction
        store.write_many(b"cursors", {"new": b"N", "": b"empty keys are invalid"}, ["keep"])
    assert store.get(b"cursors", "keep") == b"1"
    assert store.get(b"cursors", "new") is None


def test_delete_of_missing_key_is_harmless(store):
    store.delete(b"cursors", "absent")


def test_scan_prefix_yields_only_that_prefix_in_key_order(store):
    for key in ["t1\x00b", "t1\x00a", "t10\x00z", "t0\x00x", "t2\x00c"]:
        store.put(b"cursors", key, key.encode())
    assert [key for key, _ in store.scan_prefix(b"cursors", "t1\x00")] == ["t1\x00a", "t1\x00b"]


def test_scan_prefix_past_the_last_key_yields_nothing(store):
    store.put(b"cursors", "a", b"1")
    assert list(store.scan_prefix(b"cursors", "z")) == []


def test_delete_prefix_removes_only_that_prefix_and_counts(store):
    for key in ["t\x00a", "t\x00b", "t\x00c", "u\x00a"]:
        store.put(b"cursors", key, b"v")
    assert store.delete_prefix(b"cursors", "t\x00") == 3
    assert [key for key, _ in store.scan_prefix(b"cursors", "")] == ["u\x00a"]


def test_delete_prefix_reaching_the_last_key_stops(store):
    store.put(b"cursors", "a", b"v")
    store.put(b"cursors", "b", b"v")
    assert store.delete_prefix(b"cursors", "b") == 1
    assert store.delete_prefix(b"cursors", "nothing") == 0
    assert store.get(b"cursors", "a") == b"v"


def test_values_survive_close_and_reopen(tmp_path):
    first = LocalStore(tmp_path / "m")
    first.put_json(b"coordinator", "log", [1, 2, 3])
    first.sync()
    first.close()
    second = LocalStore(tmp_path / "m")
    try:
        assert second.get_json(b"coordinator", "log") == [1, 2, 3]
    finally:
        second.close()


def test_a_database_its_caller_names_opens_on_first_use_and_survives_reopen(tmp_path):
    first = LocalStore(tmp_path / "m")
    assert first.get(b"a-callers-own", "k") is None
    assert list(first.scan_prefix(b"another", "")) == []
    first.put(b"a-callers-own", "k", b"v")
    first.close()
    second = LocalStore(tmp_path / "m")
    try:
        assert second.get(b"a-callers-own", "k") == b"v"
        assert second.get(b"ledgers", "k") is None
    finally:
        second.close()


def test_the_store_names_none_of_its_callers_databases():
    """The engines above it and the broker each name their own (one owner apiece)."""
    source = inspect.getsource(local_store)
    for name in (b"snapshots", b"coordinator", b"broker"):
        assert repr(name) not in source, name
