"""Subscription settings: types and isolation levels as clients spell them."""

from __future__ import annotations

import pytest

from dispatcher import IsolationLevel, SubscriptionType


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("READ_COMMITTED", IsolationLevel.READ_COMMITTED),
        ("read_committed", IsolationLevel.READ_COMMITTED),
        ("  Read-Uncommitted ", IsolationLevel.READ_UNCOMMITTED),
        ("read-uncommitted", IsolationLevel.READ_UNCOMMITTED),
    ],
)
def test_isolation_level_parse_accepts_case_spaces_and_dashes(text, level):
    assert IsolationLevel.parse(text) is level


@pytest.mark.parametrize("text", ["", "committed", "READ COMMITTED", "SERIALIZABLE"])
def test_isolation_level_parse_names_the_choices_on_error(text):
    with pytest.raises(ValueError, match="READ_COMMITTED, READ_UNCOMMITTED") as error:
        IsolationLevel.parse(text)
    assert repr(text) in str(error.value)


def test_isolation_level_values_are_what_the_admin_stats_report():
    assert [level.value for level in IsolationLevel] == ["READ_COMMITTED", "READ_UNCOMMITTED"]


def test_subscription_type_values_are_pulsar_names():
    assert [t.value for t in SubscriptionType] == ["Exclusive", "Shared", "Failover", "Key_Shared"]
