"""Producers' last sequence ids: duplicates refused, pushes rolled back, names bounded."""

from __future__ import annotations

from txnbuffer import producer_state
from txnbuffer.producer_state import ANONYMOUS_PREFIX, ProducerSequences, tracked


def test_a_sequence_at_or_below_the_last_pushed_or_persisted_is_a_duplicate():
    sequences = ProducerSequences()
    assert sequences.last("p") == -1
    sequences.push("p", 0)
    assert sequences.is_duplicate("p", 0)  # in flight counts
    assert not sequences.is_duplicate("p", 1)
    sequences.persist("p", 0, 0)
    sequences.push("p", 1)
    sequences.persist("p", 1, 0)
    assert sequences.last("p") == 1
    assert sequences.is_duplicate("p", 1) and sequences.is_duplicate("p", 0)
    assert not sequences.is_duplicate("q", 0)  # per name


def test_a_failed_push_goes_back_to_what_is_persisted():
    sequences = ProducerSequences()
    sequences.persist("p", 4, 0)
    sequences.push("p", 5)
    sequences.rollback("p")
    assert sequences.last("p") == 4
    assert not sequences.is_duplicate("p", 5)


def test_persisting_never_lowers_the_last_sequence():
    sequences = ProducerSequences()
    sequences.persist("p", 7, 0)
    sequences.persist("p", 3, 0)  # an older entry met again in a replay
    assert sequences.last("p") == 7


def test_every_named_producer_is_tracked_generated_names_included():
    assert tracked("orders-writer")
    assert tracked(f"{ANONYMOUS_PREFIX}5d1e-7")
    assert not tracked("")


def test_the_least_recently_used_name_is_forgotten_past_the_limit(monkeypatch):
    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 2)
    sequences = ProducerSequences()
    sequences.persist("a", 1, 0)
    sequences.persist("b", 1, 0)
    sequences.persist("a", 2, 0)  # a is used again: b is now the oldest
    sequences.persist("c", 1, 0)
    assert set(sequences.persisted) == {"a", "c"}
    assert sequences.last("b") == -1


def test_a_name_is_forgotten_with_the_ledger_of_its_last_entry():
    sequences = ProducerSequences()
    sequences.persist("old", 3, 0)
    sequences.persist("moved-on", 1, 0)
    sequences.persist("moved-on", 2, 1)
    sequences.forget_ledger(0)
    assert sequences.last("old") == -1
    assert sequences.last("moved-on") == 2
