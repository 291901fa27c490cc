"""Which brokers hold a new topic's (or coordinator shard's) ledgers: its ensemble.

Promises:
- `choose_ensemble` returns E distinct live broker ids, the leader first: the leader
  given, or else the least-loaded live broker (fewest records leading, then the
  lowest id, as placement always chose), then the next least-loaded live brokers in
  the same order. Spreading followers by the same load as leaders keeps every
  broker's share of copies even when topics are placed one at a time.
- Fewer than E live brokers is a refusal, NotEnoughBrokersError (topics/persistence.py) (retryable: it
  succeeds once enough brokers are live, or after the policy is lowered), never a
  smaller ensemble: a topic placed with fewer copies than its policy asks would
  break the promise its namespace makes, silently (Kafka refuses a replication
  factor larger than its live brokers the same way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def choose_ensemble(
    live: Iterable[str],
    led: Mapping[str, int],
    size: int,
    leader: str | None = None,
) -> tuple[str, ...] | None:
    """E = `size` live brokers, the leader first (`leader`, or the least loaded by
    `led`: topics led per broker id); None when fewer than `size` are live. `leader`,
    when given, counts as live (it is the broker placing the topic on itself)."""
    assert size >= 1, size
    candidates = set(live)
    if leader is not None:
        candidates.add(leader)
    if len(candidates) < size:
        return None
    ordered = sorted(candidates, key=lambda broker: (led.get(broker, 0), broker))
    if leader is None:
        leader = ordered[0]
    followers = [broker for broker in ordered if broker != leader][: size - 1]
    ensemble = (leader, *followers)
    assert len(set(ensemble)) == size, ensemble
    return ensemble
