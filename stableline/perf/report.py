"""What a perf run tells: the live progress line, the final summary (a dict, the JSON
written by --json) and the summary as text.

Rates: published = acknowledged durable by the broker, over go -> the last
acknowledgement; consumed = received over go -> the last receipt. MB/s counts
payload bytes (10^6 bytes per MB). Latencies are in milliseconds.
"""

from __future__ import annotations

import dataclasses

from stableline._types import IsolationLevel
from stableline.perf.histogram import LatencyHistogram
from stableline.perf.producer import TXN_KEY_SEQUENCE_BITS
from stableline.perf.workload import Workload


def _latency_text(histogram: LatencyHistogram) -> str:
    if not histogram.count:
        return "-"
    p50, p99, p999 = (histogram.percentile(p) / 1000 for p in (50, 99, 99.9))
    return f"p50 {p50:.2f} p99 {p99:.2f} p99.9 {p999:.2f} ms"


def progress_line(
    elapsed_s: float,
    seconds: float,
    published: int,
    received: int,
    message_size: int,
    histograms: dict[str, LatencyHistogram],
) -> str:
    """One line a second: rates over the last interval and that interval's latencies."""
    parts = [f"[{elapsed_s:6.1f}s]"]
    if "publish" in histograms:
        rate = published / seconds
        parts.append(
            f"pub {rate:>10,.0f} msg/s {rate * message_size / 1e6:7.2f} MB/s "
            f"({_latency_text(histograms['publish'])})"
        )
    if "e2e" in histograms:
        rate = received / seconds
        parts.append(
            f"recv {rate:>10,.0f} msg/s {rate * message_size / 1e6:7.2f} MB/s "
            f"(e2e {_latency_text(histograms['e2e'])})"
        )
    commits = histograms.get("commit")
    if commits is not None and commits.count:
        parts.append(f"txn ends {commits.count / seconds:,.0f}/s (commit {_latency_text(commits)})")
    return "  ".join(parts)


def _rate(count: int, seconds: float, message_size: int) -> dict:
    rate = count / seconds if seconds > 0 else 0.0
    return {
        "messages": count,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(rate),
        "mb_per_s": round(rate * message_size / 1e6, 2),
    }


def commit_to_visible(
    workload: Workload, producer_finals: list[dict], consumer_finals: list[dict]
) -> tuple[LatencyHistogram, int]:
    """Per READ_COMMITTED subscription and committed transaction: first receipt minus the
    moment before EndTransaction; and how many were received before it (violations)."""
    first_seen: dict[tuple[str, str], dict[int, int]] = {}
    for final in consumer_finals:
        for subscription, seen in final["first_seen"].items():
            merged = first_seen.setdefault(subscription, {})
            for key, at in seen.items():
                merged[key] = min(at, merged.get(key, at))
    topics = [spec.topic for spec in workload.producer_specs()]
    histogram = LatencyHistogram()
    early = 0
    for final in producer_finals:
        for key, started_us in final["commit_started_us"].items():
            topic = topics[key >> TXN_KEY_SEQUENCE_BITS]
            for (seen_topic, _subscription), seen in first_seen.items():
                at = seen.get(key) if seen_topic == topic else None
                if at is None:
                    continue
                if at < started_us:
                    early += 1
                else:
                    histogram.record(at - started_us)
    return histogram, early


def summarise(
    workload: Workload,
    totals: dict[str, LatencyHistogram],
    producer_finals: list[dict],
    consumer_finals: list[dict],
    go: float,
    broker_cpu_s: float | None,
    drain_timed_out: bool,
) -> dict:
    size = workload.message_size
    result: dict = {"workload": dataclasses.asdict(workload)}
    if workload.token:
        result["workload"]["token"] = "(given)"  # a credential never goes into a report
    published = sum(f["published"] for f in producer_finals)
    visible = sum(f["visible"] for f in producer_finals)
    received = sum(f["received"] for f in consumer_finals)
    cpu: dict[str, float] = {}
    checks: dict = {}
    if producer_finals:
        last_ack = max(f["last_ack"] for f in producer_finals)
        result["produced"] = {
            **_rate(published, last_ack - go, size),
            "visible_to_read_committed": visible,
            "publish_latency": totals["publish"].summary(),
        }
        if published:
            cpu["producers"] = sum(f["cpu_s"] for f in producer_finals) / published
    if consumer_finals:
        last = max(f["last_receive"] for f in consumer_finals)
        by_level = {level.name: 0 for level in IsolationLevel}
        aborted = dict(by_level)
        for final in consumer_finals:
            for name, count in final["by_level"].items():
                by_level[name] += count
                aborted[name] += final["aborted_by_level"][name]
        result["consumed"] = {
            **_rate(received, last - go if last else 0.0, size),
            "by_level": by_level,
            "e2e_latency": totals["e2e"].summary(),
        }
        if received:
            cpu["consumers"] = sum(f["cpu_s"] for f in consumer_finals) / received
        checks["rc_received_aborted"] = aborted[IsolationLevel.READ_COMMITTED.name]
        checks["ru_received_aborted"] = aborted[IsolationLevel.READ_UNCOMMITTED.name]
        checks["wrong_size"] = sum(f["wrong_size"] for f in consumer_finals)
        checks["drain_timed_out"] = drain_timed_out
        if producer_finals:
            levels = workload.subscriptions_by_level()
            expected = (
                levels[IsolationLevel.READ_COMMITTED] * visible
                + levels[IsolationLevel.READ_UNCOMMITTED] * published
            )
            checks["expected_deliveries"] = expected
            checks["missing"] = max(expected - received, 0)
            checks["duplicates"] = max(received - expected, 0)
    if workload.transactional and producer_finals:
        ends = totals["commit"]
        txns = {
            "committed": sum(f["committed_txns"] for f in producer_finals),
            "aborted": sum(f["aborted_txns"] for f in producer_finals),
            "end_latency": ends.summary(),
        }
        producing_s = result["produced"]["seconds"]
        txns["ends_per_s"] = round(ends.count / producing_s) if producing_s > 0 else 0
        if consumer_finals:
            visible_after, early = commit_to_visible(workload, producer_finals, consumer_finals)
            txns["commit_to_visible"] = visible_after.summary()
            checks["rc_visible_before_commit"] = early
        result["transactions"] = txns
    if broker_cpu_s is not None:
        delivered = received or published
        if delivered:
            cpu["broker"] = broker_cpu_s / delivered
    result["cpu_us_per_msg"] = {role: round(value * 1e6, 3) for role, value in cpu.items()}
    violations = sum(
        checks.get(name, 0)
        for name in (
            "rc_received_aborted",
            "rc_visible_before_commit",
            "wrong_size",
            "missing",
            "duplicates",
        )
    )
    checks["ok"] = not violations and not checks.get("drain_timed_out")
    result["checks"] = checks
    return result


def format_summary(result: dict) -> str:
    """The summary as aligned text lines."""
    rows: list[tuple[str, str]] = []
    produced, consumed = result.get("produced"), result.get("consumed")
    if produced:
        rows.append(("published (durable)", _summary_rate(produced)))
        rows.append(("publish latency", _summary_latency(produced["publish_latency"])))
    if consumed:
        rows.append(("received", _summary_rate(consumed)))
        rows.append(("end-to-end latency", _summary_latency(consumed["e2e_latency"])))
    txns = result.get("transactions")
    if txns:
        rows.append(
            (
                "transactions",
                f"{txns['committed']:,} committed, {txns['aborted']:,} aborted, "
                f"{txns['ends_per_s']:,} ends/s",
            )
        )
        rows.append(("commit/abort call", _summary_latency(txns["end_latency"])))
        if "commit_to_visible" in txns:
            rows.append(("commit -> RC visible", _summary_latency(txns["commit_to_visible"])))
    if result["cpu_us_per_msg"]:
        rows.append(
            (
                "CPU us/msg",
                ", ".join(f"{role} {value}" for role, value in result["cpu_us_per_msg"].items()),
            )
        )
    checks = {k: v for k, v in result["checks"].items() if k != "ok"}
    verdict = "ok" if result["checks"]["ok"] else "FAILED"
    rows.append(("checks", f"{verdict} " + ", ".join(f"{k}={v}" for k, v in checks.items())))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _summary_rate(side: dict) -> str:
    return (
        f"{side['messages']:,} msgs in {side['seconds']} s: "
        f"{side['msgs_per_s']:,} msg/s, {side['mb_per_s']} MB/s"
    )


def _summary_latency(summary: dict) -> str:
    if not summary.get("count"):
        return "-"
    return (
        f"p50 {summary['p50_ms']} p99 {summary['p99_ms']} p99.9 {summary['p99.9_ms']} "
        f"max {summary['max_ms']} ms (n={summary['count']:,})"
    )
