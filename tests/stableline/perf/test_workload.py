"""stableline/perf/workload.py: options are checked once, work is shared out exactly."""

from __future__ import annotations

import pytest

from stableline import IsolationLevel
from stableline.perf.workload import Workload, split


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"message_size": 8}, "--size must be >= 17"),
        ({"abort_ratio": 0.1}, "--abort-ratio needs transactions"),
        ({"txn_size": 10, "abort_ratio": 1.5}, "--abort-ratio must be in [0, 1]"),
        ({"duration_s": 0, "messages": 0}, "unbounded run"),
        ({"producers": 0, "subscriptions": 0}, "nothing to do"),
        ({"isolation": "serializable"}, "--isolation must be one of"),
        ({"topic": "persistent://only-tenant"}, "--topic"),
    ],
)
def test_bad_options_are_refused_with_what_to_change(options, complaint):
    with pytest.raises(ValueError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        Workload(**options)


def test_message_count_is_shared_exactly_among_producers_of_all_topics():
    workload = Workload(topic="t", topics=3, producers=2, messages=1001, rate=600)
    specs = workload.producer_specs()
    assert [spec.topic for spec in specs] == ["t-0", "t-1", "t-2"] * 2
    assert sum(spec.messages for spec in specs) == 1001
    assert max(spec.messages for spec in specs) - min(spec.messages for spec in specs) <= 1
    assert sum(spec.rate for spec in specs) == pytest.approx(600)
    assert len({spec.index for spec in specs}) == 6


def test_mixed_isolation_alternates_subscriptions_and_counts_them_per_topic():
    workload = Workload(topics=2, subscriptions=5, consumers=2, isolation="mixed")
    specs = workload.consumer_specs()
    assert len(specs) == 2 * 5 * 2
    levels = {(s.topic, s.subscription): s.isolation for s in specs}
    assert levels[("perf-0", "perf-sub-0")] is IsolationLevel.READ_COMMITTED
    assert levels[("perf-1", "perf-sub-1")] is IsolationLevel.READ_UNCOMMITTED
    assert workload.subscriptions_by_level() == {
        IsolationLevel.READ_COMMITTED: 3,
        IsolationLevel.READ_UNCOMMITTED: 2,
    }


def test_split_deals_round_robin_and_drops_empty_parts():
    assert split(list(range(5)), 2) == [[0, 2, 4], [1, 3]]
    assert split([1], 4) == [[1]]
    assert split([], 3) == []
