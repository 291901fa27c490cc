"""Which brokers hold a new topic's (or coordinator shard's) ledgers: its ensemble.

Promises:
- `choose_ensemble` returns E distinct live broker ids, the leader first: the leader
  given, or else the least-loaded live broker, then the next least-loaded live
  brokers in the same order. Spreading followers by the same load as leaders keeps
  every broker's share of copies even when topics are placed one at a time.
- How loaded a broker is (`placement_order`) weighs two things against the
  candidates' means: the topics it leads (counted from the records, so a topic
  placed a moment ago counts at once, wherever it was placed, and concurrent
  placements spread instead of all taking the broker the last report made look
  idlest) and its reported load score (msgs and bytes per second, its last report).
  A broker is as loaded as the larger of the two ratios (a broker with few topics
  but heavy traffic is not idle; one with many idle topics is not either), then
  their sum, then the lowest id. Traffic is measured against the mean, but never
  against less than BUSY_CLUSTER_LOAD: in a cluster nearly idle, a few messages a
  second on one broker would otherwise look like all the load and keep every new
  topic off it; there the topics led decide. With no traffic reported anywhere
  this is the fewest topics led, then the lowest id, as placement always chose; a
  broker that just joined leads none and carries no traffic, so it takes
  placements at once.
- Fewer than E live brokers is a refusal, NotEnoughBrokersError (topics/persistence.py) (retryable: it
  succeeds once enough brokers are live, or after the policy is lowered), never a
  smaller ensemble: a topic placed with fewer copies than its policy asks would
  break the promise its namespace makes, silently (Kafka refuses a replication
  factor larger than its live brokers the same way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Load units per second (a message or a KiB in or out; observability/load_report.py)
# per broker below which traffic weighs less than the topics led in placement.
BUSY_CLUSTER_LOAD = 1000.0


def placement_order(
    candidates: Iterable[str], led: Mapping[str, int], traffic: Mapping[str, float]
) -> list[str]:
    """`candidates`, least loaded first (see the module docstring): `led` is topics
    led per broker id, `traffic` each one's reported load score."""
    brokers = sorted(set(candidates))
    if not brokers:
        return []
    mean_led = sum(led.get(broker, 0) for broker in brokers) / len(brokers)
    mean_traffic = sum(traffic.get(broker, 0.0) for broker in brokers) / len(brokers)
    traffic_scale = max(mean_traffic, BUSY_CLUSTER_LOAD)

    def key(broker: str) -> tuple[float, float, str]:
        led_ratio = led.get(broker, 0) / mean_led if mean_led > 0 else 0.0
        traffic_ratio = traffic.get(broker, 0.0) / traffic_scale
        return max(led_ratio, traffic_ratio), led_ratio + traffic_ratio, broker

    return sorted(brokers, key=key)


def choose_ensemble(
    live: Iterable[str],
    led: Mapping[str, int],
    size: int,
    leader: str | None = None,
    traffic: Mapping[str, float] | None = None,
) -> tuple[str, ...] | None:
    """E = `size` live brokers, the leader first (`leader`, or the least loaded by
    `led`, topics led per broker id, and `traffic`, reported load scores); None when
    fewer than `size` are live. `leader`, when given, counts as live (it is the
    broker placing the topic on itself)."""
    assert size >= 1, size
    candidates = set(live)
    if leader is not None:
        candidates.add(leader)
    if len(candidates) < size:
        return None
    ordered = placement_order(candidates, led, traffic or {})
    if leader is None:
        leader = ordered[0]
    followers = [broker for broker in ordered if broker != leader][: size - 1]
    ensemble = (leader, *followers)
    assert len(set(ensemble)) == size, ensemble
    return ensemble
