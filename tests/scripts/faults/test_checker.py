"""scripts/faults/checker.py on hand-made histories: a clean one passes, and each kind of
violation is found (and only it)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts" / "faults"


@pytest.fixture
def checker(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # as a script sees its neighbours
    return importlib.import_module("checker")


def clean_history(checker):
    """Two topics; a plain producer on A; transactions t0 (committed), t1 (aborted),
    t2 (end unanswered, never visible) and t3 (never ended) over A and B; an
    Exclusive READ_COMMITTED and an Exclusive READ_UNCOMMITTED subscription on A and
    an Exclusive READ_COMMITTED one on B, each seeing what it should."""
    h = checker.History()
    TxnOutcome = checker.TxnOutcome
    ack = checker.ACKED
    h.sends += [
        checker.Send("A", "p0", 0, "p0:0", ack, "1:0:-1"),
        checker.Send("A", "p0", 1, "p0:1", checker.UNKNOWN),  # never written: fine
        checker.Send("A", "p0", 2, "p0:2", ack, "1:1:-1"),
        checker.Send("A", "tx.A", 0, "ptx.A:0", ack, "1:2:-1", txn="t0"),
        checker.Send("B", "tx.B", 0, "ptx.B:0", ack, "2:0:-1", txn="t0"),
        checker.Send("A", "tx.A", 1, "ptx.A:1", ack, "1:3:-1", txn="t1"),
        checker.Send("B", "tx.B", 1, "ptx.B:1", ack, "2:1:-1", txn="t1"),
        checker.Send("A", "tx.A", 2, "ptx.A:2", ack, "1:4:-1", txn="t2"),
        checker.Send("B", "tx.B", 2, "ptx.B:2", ack, "2:2:-1", txn="t2"),
        checker.Send("A", "tx.A", 3, "ptx.A:3", ack, "1:5:-1", txn="t3"),
        checker.Send("A", "p0", 3, "p0:3", checker.FAILED),
    ]
    h.transactions = {
        "t0": TxnOutcome.COMMITTED,
        "t1": TxnOutcome.ABORTED,
        "t2": TxnOutcome.UNKNOWN,
        "t3": TxnOutcome.OPEN,
    }
    rc_a = checker.SubscriptionLog("rc-A", "A", read_committed=True, exclusive=True)
    rc_a.delivered("p0:0", "1:0:-1")
    rc_a.delivered("p0:0", "1:0:-1")  # redelivered before its ack was confirmed: fine
    rc_a.ack_confirmed(["p0:0"])
    rc_a.delivered("p0:2", "1:1:-1")
    rc_a.delivered("ptx.A:0", "1:2:-1")
    rc_a.ack_confirmed(["p0:2", "ptx.A:0"])
    ru_a = checker.SubscriptionLog("ru-A", "A", read_committed=False, exclusive=True)
    for payload, message_id in (("p0:0", "1:0:-1"), ("p0:2", "1:1:-1"), ("ptx.A:0", "1:2:-1"),
                                ("ptx.A:1", "1:3:-1"), ("ptx.A:2", "1:4:-1"),
                                ("ptx.A:3", "1:5:-1")):  # fmt: skip
        ru_a.delivered(payload, message_id)
    rc_b = checker.SubscriptionLog("rc-B", "B", read_committed=True, exclusive=True)
    rc_b.delivered("ptx.B:0", "2:0:-1")
    h.subscriptions += [rc_a, ru_a, rc_b]
    h.positions["A"] += ["1:0", "1:2", "1:2", "1:5"]
    h.positions["B"] += ["-1:-1", "2:0", "3:0"]
    return h


def kinds(checker, history) -> list[str]:
    return [violation.kind for violation in checker.check(history)]


def subscription(history, name):
    (log,) = [log for log in history.subscriptions if log.name == name]
    return log


def test_a_clean_history_passes(checker):
    history = clean_history(checker)
    assert checker.check(history) == []
    assert set(checker.summary([]).values()) == {0}


def test_an_acknowledged_send_never_delivered_is_lost(checker):
    history = clean_history(checker)
    history.sends.append(checker.Send("A", "p0", 4, "p0:4", checker.ACKED, "1:6:-1"))
    # Both subscriptions of A miss it.
    assert kinds(checker, history) == ["lost", "lost"]
    assert "rc-A: p0:4" in str(checker.check(history)[0])


def test_a_committed_transaction_missing_from_a_subscription_is_lost(checker):
    history = clean_history(checker)
    subscription(history, "rc-B").events.clear()
    assert kinds(checker, history) == ["lost"]


def test_a_payload_delivered_after_its_confirmed_ack_is_a_duplicate(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("p0:0", "1:0:-1")
    assert kinds(checker, history) == ["redelivered-after-ack"]


def test_a_payload_under_two_message_ids_was_written_twice(checker):
    history = clean_history(checker)
    subscription(history, "ru-A").delivered("p0:2", "1:9:-1")
    assert kinds(checker, history) == ["written-twice"]


def test_a_producer_out_of_order_on_an_exclusive_subscription(checker):
    history = clean_history(checker)
    rc_a = subscription(history, "rc-A")
    rc_a.events.clear()
    rc_a.delivered("p0:2", "1:1:-1")
    rc_a.delivered("p0:0", "1:0:-1")
    rc_a.delivered("ptx.A:0", "1:2:-1")
    found = checker.check(history)
    assert [v.kind for v in found] == ["reordered"]
    assert "p0:0 delivered after p0:2" in found[0].detail


def test_order_is_not_checked_on_a_shared_subscription(checker):
    history = clean_history(checker)
    shared = checker.SubscriptionLog("shared-A", "A", read_committed=False, exclusive=False)
    for event in reversed(subscription(history, "ru-A").events):
        shared.events.append(event)
    history.subscriptions.append(shared)
    assert checker.check(history) == []


def test_read_committed_sees_aborted_data(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("ptx.A:1", "1:3:-1")
    subscription(history, "rc-B").delivered("ptx.B:1", "2:1:-1")
    assert kinds(checker, history) == ["aborted-visible", "aborted-visible"]


def test_read_committed_sees_a_transaction_never_ended(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("ptx.A:3", "1:5:-1")
    assert kinds(checker, history) == ["open-visible"]


def test_an_unanswered_end_may_show_whole(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("ptx.A:2", "1:4:-1")
    subscription(history, "rc-B").delivered("ptx.B:2", "2:2:-1")
    assert checker.check(history) == []


def test_a_transaction_seen_on_one_topic_only_is_partial(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("ptx.A:2", "1:4:-1")
    found = checker.check(history)
    assert [v.kind for v in found] == ["partial-transaction"]
    assert "t2" in found[0].detail and "rc-B" in found[0].detail


def test_a_transaction_seen_in_part_on_one_topic_is_partial(checker):
    history = clean_history(checker)
    history.sends.append(checker.Send("B", "tx.B", 9, "ptx.B:9", checker.ACKED, "2:9:-1", "t0"))
    subscription(history, "rc-B").delivered("ptx.B:9", "2:9:-1")
    history.sends.append(checker.Send("A", "tx.A", 9, "ptx.A:9", checker.ACKED, "1:9:-1", "t0"))
    found = checker.check(history)
    # t0 is committed: A's subscriptions miss ptx.A:9 (RU as lost, RC as part of t0).
    assert sorted(v.kind for v in found) == ["lost", "partial-transaction"]


def test_a_stable_position_that_moves_back(checker):
    history = clean_history(checker)
    history.positions["A"] += ["1:4", "1:6"]
    found = checker.check(history)
    assert [v.kind for v in found] == ["position-back"]
    assert found[0].detail == "A: maxReadPosition 1:5 -> 1:4"


def test_a_stable_position_behind_for_many_samples_is_one_violation_per_dip(checker):
    history = clean_history(checker)
    history.positions["A"] += ["1:1", "1:1", "1:3", "1:5", "1:6", "0:0", "1:7"]
    found = checker.check(history)
    assert [v.detail for v in found] == [
        "A: maxReadPosition 1:5 -> 1:1",
        "A: maxReadPosition 1:6 -> 0:0",
    ]


def test_positions_compare_as_numbers_not_text(checker):
    history = clean_history(checker)
    history.positions["C"] += ["9:99", "10:0", "10:100"]
    assert checker.check(history) == []


def test_a_message_id_given_to_two_payloads_by_receipts(checker):
    history = clean_history(checker)
    # A send acknowledged with an id already handed out (the lost-disk failure).
    history.sends.append(checker.Send("A", "p1", 0, "p1:0", checker.ACKED, "1:0:-1"))
    subscription(history, "rc-A").delivered("p1:0", "1:0:-1")
    subscription(history, "ru-A").delivered("p1:0", "1:0:-1")
    found = checker.check(history)
    assert [v.kind for v in found] == ["id-reused"]
    assert found[0].detail == "A 1:0:-1: p0:0 and p1:0"


def test_the_same_id_on_two_topics_is_no_reuse(checker):
    history = clean_history(checker)
    history.sends.append(checker.Send("B", "p9", 0, "p9:0", checker.ACKED, "1:0:-1"))
    subscription(history, "rc-B").delivered("p9:0", "1:0:-1")
    assert checker.check(history) == []


def test_summary_counts_every_kind(checker):
    history = clean_history(checker)
    subscription(history, "rc-A").delivered("p0:0", "1:0:-1")
    history.positions["B"].append("1:0")
    counts = checker.summary(checker.check(history))
    assert set(counts) == set(checker.KINDS)
    assert counts["redelivered-after-ack"] == 1 and counts["position-back"] == 1
    assert sum(counts.values()) == 2
