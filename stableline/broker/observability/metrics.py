"""Prometheus metrics at /metrics: topic and coordinator figures collected at scrape
time from what the broker already counts (no second bookkeeping), the latency
histograms the publish and commit paths observe (stableline.broker.topics.latency), and
the standard process_* metrics (CPU, memory, open files, start time).

Transaction counters are the coordinator's since the broker started:
stableline_txn_aborted_total counts every abort, those by timeout included;
stableline_txn_timed_out_total counts the timeouts alone.

stableline_writes_fenced is 1 while the broker's write gate is closed (in a cluster:
not registered yet, its metadata session lost, or stopping; topics/write_gate.py), 0 else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from stableline.broker.cluster.topic_moves import HAND_OVER_SECONDS, TOPIC_MOVES
from stableline.broker.topics.latency import COMMIT_LATENCY, PUBLISH_LATENCY
from stableline.broker.topics.registry import TopicRegistry
from stableline.broker.topics.write_gate import WriteGate

if TYPE_CHECKING:
    from stableline.broker.txn.coordinators import Coordinators


class _CoordinatorCollector:
    """The figures of every coordinator shard this broker leads, summed."""

    def __init__(self, coordinators: Coordinators):
        self._coordinators = coordinators

    def collect(self):
        local = list(self._coordinators.local.values())
        figures = (
            ("committed", "Transactions committed", sum(c.committed_count for c in local)),
            (
                "aborted",
                "Transactions aborted (timeouts included)",
                sum(c.aborted_count for c in local),
            ),
            (
                "timed_out",
                "Transactions aborted by their timeout",
                sum(c.timed_out_count for c in local),
            ),
        )
        for name, documentation, value in figures:
            counter = CounterMetricFamily(f"stableline_txn_{name}", documentation)
            counter.add_metric([], value)
            yield counter
        open_txns = GaugeMetricFamily(
            "stableline_txn_open", "Transactions not yet ended (open, or committing/aborting)"
        )
        open_txns.add_metric([], len(self._coordinators.list_open()))
        yield open_txns


class _WriteGateCollector:
    def __init__(self, gate: WriteGate):
        self._gate = gate

    def collect(self):
        fenced = GaugeMetricFamily(
            "stableline_writes_fenced",
            "1 while this broker takes no writes for its topics (out of its cluster: "
            "its metadata session lost, not registered yet, or stopping)",
        )
        fenced.add_metric([], 0 if self._gate.is_open else 1)
        yield fenced


class _TopicCollector:
    def __init__(self, registry: TopicRegistry):
        self._registry = registry

    def collect(self):
        msg_in = CounterMetricFamily(
            "stableline_in_messages", "Messages published", labels=["topic"]
        )
        bytes_in = CounterMetricFamily(
            "stableline_in_bytes", "Payload bytes published", labels=["topic"]
        )
        storage = GaugeMetricFamily(
            "stableline_storage_size_bytes", "Bytes in the topic's ledgers", labels=["topic"]
        )
        corrupt = CounterMetricFamily(
            "stableline_corrupt_entries",
            "Entries whose stored bytes fail their checks (skipped by every reader)",
            labels=["topic"],
        )
        backlog = GaugeMetricFamily(
            "stableline_subscription_backlog",
            "Unacknowledged entries",
            labels=["topic", "subscription", "isolation_level"],
        )
        msg_out = CounterMetricFamily(
            "stableline_subscription_out_messages",
            "Messages delivered",
            labels=["topic", "subscription"],
        )
        consumers = GaugeMetricFamily(
            "stableline_subscription_consumers",
            "Connected consumers",
            labels=["topic", "subscription"],
        )
        ongoing = GaugeMetricFamily(
            "stableline_txn_buffer_ongoing",
            "Open transactions writing to the topic",
            labels=["topic"],
        )
        aborted = GaugeMetricFamily(
            "stableline_txn_buffer_aborted",
            "Aborted transactions retained in the topic",
            labels=["topic"],
        )
        lag = GaugeMetricFamily(
            "stableline_txn_buffer_stable_lag_entries",
            "Entries between maxReadPosition and the last confirmed entry (what READ_COMMITTED cannot see yet)",
            labels=["topic"],
        )
        under = GaugeMetricFamily(
            "stableline_under_replicated_topics",
            "Replicated topics served here with a member of their ensemble away (or its "
            "copy being made again): one more loss and writes stop",
        )
        members_up = GaugeMetricFamily(
            "stableline_replication_members_up",
            "Members of a replicated topic's ensemble taking its writes (this broker included)",
            labels=["topic"],
        )
        under_ledgers = GaugeMetricFamily(
            "stableline_under_replicated_ledgers",
            "Copies of ledgers that members of the ensembles of topics led here lack (a "
            "member away, back on a lost disk, or replacing a lost or draining broker): "
            "re-replication's work left, in ledgers",
        )
        catch_up = GaugeMetricFamily(
            "stableline_replication_catch_up_bytes",
            "Bytes of old entries, read back from this broker's files, sent to members "
            "of a topic's ensemble catching up since this broker took the topic",
            labels=["topic"],
        )
        under_count = 0
        ledgers_behind = 0
        for topic in self._registry.loaded():
            name = str(topic.name)
            replication = topic.ledger.replication
            if replication is not None:
                described = replication.describe()
                members_up.add_metric([name], described["membersUp"])
                under_count += described["underReplicated"]
                ledgers_behind += described.get("ledgersBehind", 0)
                catch_up.add_metric(
                    [name],
                    sum(r.get("catchUpBytes", 0) for r in described.get("replicas", {}).values()),
                )
            ongoing.add_metric([name], len(topic.buffer.ongoing))
            aborted.add_metric([name], len(topic.buffer.aborted))
            lag.add_metric(
                [name],
                topic.ledger.count_entries(
                    topic.buffer.stable_position, topic.ledger.last_confirmed
                ),
            )
            msg_in.add_metric([name], topic.rate_in.messages)
            bytes_in.add_metric([name], topic.rate_in.bytes)
            storage.add_metric([name], topic.ledger.total_size)
            corrupt.add_metric([name], topic.ledger.corrupt_entries)
            for sub in topic.subscriptions.values():
                backlog.add_metric([name, sub.name, sub.isolation_level.value], sub.backlog)
                msg_out.add_metric([name, sub.name], sub.messages_out)
                consumers.add_metric([name, sub.name], len(sub.consumers))
        topics = GaugeMetricFamily("stableline_topics", "Topics loaded by the broker")
        topics.add_metric([], len(self._registry.loaded()))
        cache = self._registry.entry_cache
        cached = GaugeMetricFamily(
            "stableline_entry_cache_size_bytes",
            "Bytes charged to the broker's entry cache (all topics; budget in max)",
            labels=["bound"],
        )
        cached.add_metric(["used"], cache.size_bytes)
        cached.add_metric(["max"], cache.max_bytes)
        budget = self._registry.write_budget
        pending = GaugeMetricFamily(
            "stableline_pending_write_bytes",
            "Bytes queued for the writers of all topics (budget in max)",
            labels=["bound"],
        )
        pending.add_metric(["used"], budget.used_bytes)
        pending.add_metric(["max"], budget.max_bytes)
        under.add_metric([], under_count)
        under_ledgers.add_metric([], ledgers_behind)
        yield from (
            under,
            under_ledgers,
            catch_up,
            members_up,
            topics,
            cached,
            pending,
            msg_in,
            bytes_in,
            storage,
            corrupt,
            backlog,
            msg_out,
            consumers,
            ongoing,
            aborted,
            lag,
        )


def make_registry(topics: TopicRegistry, coordinators: Coordinators) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_TopicCollector(topics))
    registry.register(_CoordinatorCollector(coordinators))
    registry.register(_WriteGateCollector(topics.write_gate))
    registry.register(PUBLISH_LATENCY)
    registry.register(COMMIT_LATENCY)
    registry.register(TOPIC_MOVES)
    registry.register(HAND_OVER_SECONDS)
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
