"""What this broker reports of its load to its cluster registration, every
`load_report_interval_s`.

Promises:
- Rates are over the last interval, from counters the broker keeps anyway: each
  loaded topic's published totals (`Topic.rate_in`) and its subscriptions'
  delivered totals. A topic loaded during the interval counts from zero; a total
  that shrinks (a subscription went away) counts as nothing, never as negative.
- CPU is this process's CPU seconds per wall second over the interval (1.0 = one
  core busy); RSS is its resident memory now.
- The load score (`loadScore`) is one figure in "load units" per second: a message
  in or out is one unit, and so is a KiB of payload in or out (so a few large
  messages weigh like many small ones). Placement and the balancer weigh it; CPU is
  reported but not weighed, since a topic's share of it is not measured (and
  brokers sharing a machine share its CPU).
- The busiest topics, at most MAX_REPORTED_TOPICS with a non-zero score, are
  reported with their scores: what the balancer may move. Bounded, so a broker with
  many topics writes a registration of bounded size.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.topic import Topic

# Topics named in one report (the busiest); keeps a registration small.
MAX_REPORTED_TOPICS = 32
# Payload bytes that weigh as much as one message in the load score.
BYTES_PER_LOAD_UNIT = 1024.0

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def load_units(msgs_in: float, msgs_out: float, bytes_in: float, bytes_out: float) -> float:
    """The load score of these rates (see the module docstring)."""
    return msgs_in + msgs_out + (bytes_in + bytes_out) / BYTES_PER_LOAD_UNIT


@dataclass(frozen=True, slots=True)
class _Totals:
    topic: int  # id() of the Topic object the totals were read from
    msgs_in: int
    bytes_in: int
    msgs_out: int
    bytes_out: int


def _totals(topic: Topic) -> _Totals:
    msgs_out = bytes_out = 0
    for subscription in topic.subscriptions.values():
        msgs_out += subscription.messages_out
        bytes_out += subscription.bytes_out
    return _Totals(id(topic), topic.rate_in.messages, topic.rate_in.bytes, msgs_out, bytes_out)


def process_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_rss_bytes() -> int:
    """Resident memory now (/proc/self/statm), else the peak getrusage knows."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass(frozen=True, slots=True)
class LoadReport:
    # Broker-wide figures, by Pulsar's names where it has one.
    load: dict[str, float]
    # The busiest topics (full name -> load score), MAX_REPORTED_TOPICS at most.
    topic_loads: dict[str, float]


class LoadSampler:
    """Turns the broker's running totals into a LoadReport per call (one per interval)."""

    def __init__(
        self,
        registry: TopicRegistry,
        topics_led: Callable[[], int],
        connections: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
        cpu_seconds: Callable[[], float] = process_cpu_seconds,
        rss_bytes: Callable[[], int] = process_rss_bytes,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._registry = registry
        self._topics_led = topics_led
        self._connections = connections
        self._clock = clock
        self._cpu_seconds = cpu_seconds
        self._rss_bytes = rss_bytes
        self._wall_clock = wall_clock
        self._sampled_at = clock()
        self._cpu_at = cpu_seconds()
        # Per loaded topic (full name): its totals at the last sample.
        self._last: dict[str, _Totals] = {}

    def sample(self) -> LoadReport:
        now, cpu = self._clock(), self._cpu_seconds()
        elapsed = max(now - self._sampled_at, 1e-6)
        rates = [0.0, 0.0, 0.0, 0.0]  # msgs in, msgs out, bytes in, bytes out (per s)
        topic_loads: dict[str, float] = {}
        current: dict[str, _Totals] = {}
        for topic in self._registry.loaded():
            name = str(topic.name)
            totals = _totals(topic)
            before = self._last.get(name)
            if before is None or before.topic != totals.topic:
                before = _Totals(totals.topic, 0, 0, 0, 0)  # loaded since: from zero
            deltas = (
                max(totals.msgs_in - before.msgs_in, 0) / elapsed,
                max(totals.msgs_out - before.msgs_out, 0) / elapsed,
                max(totals.bytes_in - before.bytes_in, 0) / elapsed,
                max(totals.bytes_out - before.bytes_out, 0) / elapsed,
            )
            for index, delta in enumerate(deltas):
                rates[index] += delta
            score = load_units(*deltas)
            if score > 0:
                topic_loads[name] = round(score, 3)
            current[name] = totals
        self._last = current  # topics unloaded since are forgotten
        cpu_per_second = max(cpu - self._cpu_at, 0.0) / elapsed
        self._sampled_at, self._cpu_at = now, cpu
        busiest = sorted(topic_loads.items(), key=lambda item: (-item[1], item[0]))
        msgs_in, msgs_out, bytes_in, bytes_out = rates
        load = {
            "topics": self._registry.count(),
            "loadedTopics": len(current),
            "topicsLed": self._topics_led(),
            "connections": self._connections(),
            "msgRateIn": round(msgs_in, 3),
            "msgRateOut": round(msgs_out, 3),
            "msgThroughputIn": round(bytes_in, 3),
            "msgThroughputOut": round(bytes_out, 3),
            "cpu": round(cpu_per_second, 4),
            "rssBytes": self._rss_bytes(),
            "loadScore": round(load_units(msgs_in, msgs_out, bytes_in, bytes_out), 3),
            # Tells this report from the last (the balancer counts each once).
            "reportedAtMs": int(self._wall_clock() * 1000),
        }
        return LoadReport(load, dict(busiest[:MAX_REPORTED_TOPICS]))
