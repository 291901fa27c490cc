"""TotalsRate: out rates derived from delivery totals that subscriptions count."""

from __future__ import annotations

import pytest

from stableline.broker.topics import topic as topic_module
from stableline.broker.topics.topic import TotalsRate


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(topic_module.time, "monotonic", lambda: now[0])
    return now


def _rate(clock) -> TotalsRate:
    # The default start time is bound to the real clock when the class is made.
    return TotalsRate(_sampled_at=clock[0])


def test_rate_is_the_growth_of_the_totals_between_samples(clock):
    rate = _rate(clock)
    clock[0] += 2.0
    rate.sample(40, 4000)
    assert (rate.message_rate, rate.byte_rate) == (20.0, 2000.0)
    clock[0] += 1.0
    rate.sample(50, 4500)
    assert (rate.message_rate, rate.byte_rate) == (10.0, 500.0)


def test_samples_closer_than_the_window_keep_the_last_rate(clock):
    rate = _rate(clock)
    clock[0] += 1.0
    rate.sample(10, 100)
    clock[0] += 0.2
    rate.sample(1000, 100_000)
    assert rate.message_rate == 10.0
    clock[0] += 0.8  # a full window since the last sample taken
    rate.sample(1000, 100_000)
    assert rate.message_rate == 990.0


def test_totals_that_shrink_count_as_no_traffic(clock):
    rate = _rate(clock)
    clock[0] += 1.0
    rate.sample(100, 1000)
    clock[0] += 1.0
    rate.sample(30, 300)  # a subscription went away with its counters
    assert (rate.message_rate, rate.byte_rate) == (0.0, 0.0)
