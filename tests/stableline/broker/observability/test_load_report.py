"""The load report (observability/load_report.py): rates over the interval from the
topics' running totals, a topic loaded mid-interval counted from zero, a shrinking
total never negative, CPU per second, the busiest topics bounded."""

from __future__ import annotations

from dataclasses import dataclass, field

from stableline.broker.observability.load_report import (
    MAX_REPORTED_TOPICS,
    LoadSampler,
    load_units,
)
from stableline.broker.topics.topic import RateCounter
from stableline.topic_name import TopicName


@dataclass
class FakeSubscription:
    messages_out: int = 0
    bytes_out: int = 0


@dataclass
class FakeTopic:
    name: TopicName
    rate_in: RateCounter = field(default_factory=RateCounter)
    subscriptions: dict[str, FakeSubscription] = field(default_factory=dict)


class FakeRegistry:
    def __init__(self):
        self.topics: list[FakeTopic] = []

    def loaded(self):
        return list(self.topics)

    def count(self) -> int:
        return len(self.topics)


class Clock:
    def __init__(self):
        self.now = 100.0
        self.cpu = 5.0

    def time(self) -> float:
        return self.now

    def cpu_seconds(self) -> float:
        return self.cpu


def _sampler(registry: FakeRegistry, clock: Clock) -> LoadSampler:
    return LoadSampler(
        registry,
        topics_led=lambda: 3,
        connections=lambda: 2,
        clock=clock.time,
        cpu_seconds=clock.cpu_seconds,
        rss_bytes=lambda: 123_000_000,
        wall_clock=lambda: 1_700_000_000.0,
    )


def test_rates_are_over_the_interval_and_the_busiest_topics_are_reported():
    registry, clock = FakeRegistry(), Clock()
    sampler = _sampler(registry, clock)
    orders = FakeTopic(TopicName.parse("orders"), subscriptions={"s": FakeSubscription()})
    idle = FakeTopic(TopicName.parse("idle"))
    registry.topics = [orders, idle]
    orders.rate_in.add(500, 512_000)
    orders.subscriptions["s"].messages_out = 250
    orders.subscriptions["s"].bytes_out = 256_000
    clock.now += 5.0
    clock.cpu += 2.5
    report = sampler.sample()
    load = report.load
    assert load["msgRateIn"] == 100.0 and load["msgRateOut"] == 50.0
    assert load["msgThroughputIn"] == 102_400.0 and load["msgThroughputOut"] == 51_200.0
    assert load["cpu"] == 0.5
    assert load["rssBytes"] == 123_000_000 and load["topicsLed"] == 3
    assert load["connections"] == 2 and load["topics"] == 2 and load["loadedTopics"] == 2
    assert load["loadScore"] == load_units(100, 50, 102_400, 51_200) == 300.0
    assert report.topic_loads == {"persistent://public/default/orders": 300.0}
    # The next interval counts only what happened in it.
    orders.rate_in.add(50, 0)
    clock.now += 5.0
    report = sampler.sample()
    assert report.load["msgRateIn"] == 10.0 and report.load["msgRateOut"] == 0.0


def test_a_reloaded_topic_counts_from_zero_and_a_shrinking_total_counts_nothing():
    registry, clock = FakeRegistry(), Clock()
    sampler = _sampler(registry, clock)
    first = FakeTopic(TopicName.parse("t"), subscriptions={"s": FakeSubscription(1000, 0)})
    first.rate_in.add(1000, 0)
    registry.topics = [first]
    clock.now += 10.0
    sampler.sample()
    # Unloaded and loaded again: a new object whose totals start at zero.
    again = FakeTopic(TopicName.parse("t"))
    again.rate_in.add(30, 0)
    registry.topics = [again]
    clock.now += 10.0
    report = sampler.sample()
    assert report.load["msgRateIn"] == 3.0
    assert report.load["msgRateOut"] == 0.0  # its subscription went: not negative


def test_at_most_the_busiest_topics_are_named():
    registry, clock = FakeRegistry(), Clock()
    sampler = _sampler(registry, clock)
    for i in range(MAX_REPORTED_TOPICS + 10):
        topic = FakeTopic(TopicName.parse(f"t{i:03d}"))
        topic.rate_in.add(i + 1, 0)
        registry.topics.append(topic)
    clock.now += 1.0
    report = sampler.sample()
    assert len(report.topic_loads) == MAX_REPORTED_TOPICS
    assert min(report.topic_loads.values()) == 11.0  # the ten quietest are left out
