"""The balancer's decision: brokers' load scores and their busiest topics in, topic
moves out. Pure (no I/O, no clock of its own): load_balancing.py feeds it each
interval and carries the moves out.

Promises (Pulsar's ThresholdShedder, Cruise Control's goals, in small):
- A broker is overloaded when its score is more than `threshold` above the mean of
  the live brokers' scores and at least `min_excess` above it; it is drained only
  once it has been overloaded in `consecutive_reports` of its reports in a row (a
  decision that sees the same report again counts nothing), and after topics are
  moved off it the count starts again: new reports must show the moves before
  more are made (a report older than the moves would drain it twice).
- Draining moves the overloaded broker's busiest topics, one at a time, each to the
  least-loaded other member of its ensemble (a transfer only goes to a member: a
  topic of one copy never moves), while the broker's projected score is above the
  mean. A move is made only if it narrows the gap between the two brokers
  (traffic < source - target) and leaves the target at or under the overload line:
  a move never makes a new hot spot, so nothing is moved back by the next decision.
- When no member of a topic's ensemble can take it, the least-loaded live broker
  outside it that can (by the same test) is sent a copy first: a copy move
  (`Move.leaving` set: the member to leave once the copy is whole, the most loaded
  non-leader member holding its copy; ensemble_swaps.py). That is how a broker that
  joins takes existing load. It counts against the per-minute cap, but the topic is
  not cooled down: once its reports name the new member (its copy whole) a later
  decision transfers the topic to it. At most `max_copies_per_broker` copies are
  being made to one broker at once; a copy not whole within `copy_timeout_s`, or whose
  target is gone, is forgotten (the writer abandons it, ensemble_swaps.py). A topic
  of one copy, or one already being swapped, is sent no copy.
- A topic moved is not moved again for `move_cooldown_s`; at most
  `max_moves_per_minute` moves are made in any 60 s. An even cluster moves nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class BalancerSettings:
    threshold: float = 0.25
    min_excess: float = 100.0
    consecutive_reports: int = 3
    max_moves_per_minute: int = 6
    move_cooldown_s: float = 300.0
    max_copies_per_broker: int = 2
    copy_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        assert self.threshold >= 0 and self.min_excess >= 0, self
        assert self.consecutive_reports >= 1 and self.max_moves_per_minute >= 1, self
        assert self.move_cooldown_s >= 0, self
        assert self.max_copies_per_broker >= 0 and self.copy_timeout_s > 0, self


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """A topic as its leader last reported it."""

    name: str
    leader: str
    members: tuple[str, ...]  # its ensemble, the leader among them
    score: float
    swapping: bool = False  # a copy is being made to a broker outside its ensemble


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    source: str
    target: str
    score: float
    # Set: not a transfer but a copy to `target`, outside the ensemble, in place of
    # this member (the topic is transferred once the copy is whole).
    leaving: str = ""


class Balancer:
    """The decisions of one balancer run (its memory: reports in a row overloaded,
    recent moves); a broker that takes the balancer over starts afresh, its first
    moves `consecutive_reports` decisions later."""

    def __init__(self, settings: BalancerSettings):
        self.settings = settings
        self._overloaded_for: dict[str, int] = {}
        self._last_report: dict[str, float] = {}  # broker -> the report last counted
        self._moved_at: dict[str, float] = {}  # topic -> when it was last moved
        # When the last moves were made, for the per-minute cap (bounded by it).
        self._recent: deque[float] = deque(maxlen=settings.max_moves_per_minute)
        # Copies being made: topic -> (its target, when the copy was asked for).
        self._copying: dict[str, tuple[str, float]] = {}

    def decide(
        self,
        scores: Mapping[str, float],
        topics: Iterable[TopicLoad],
        now: float,
        report_ids: Mapping[str, float] | None = None,
        no_copies_to: frozenset[str] = frozenset(),
    ) -> list[Move]:
        """The moves to make now: `scores` is every live broker's reported load score,
        `topics` the topics brokers reported with theirs, `now` in seconds.
        `report_ids`: what tells each broker's reports apart (when it was made); a
        report seen before is not counted again. None: every decision is on new
        reports. `no_copies_to`: brokers to send no copy to (draining)."""
        settings = self.settings
        topics = list(topics)
        self._forget_before(now)
        self._forget_copies(topics, scores, now)
        if len(scores) < 2:
            self._overloaded_for.clear()
            return []
        mean = sum(scores.values()) / len(scores)
        line = mean * (1 + settings.threshold)
        hot = []
        for broker, score in scores.items():
            if report_ids is not None:
                if self._last_report.get(broker) == report_ids.get(broker):
                    if self._overloaded_for.get(broker, 0) >= settings.consecutive_reports:
                        hot.append(broker)  # moves capped last time may go on
                    continue
                self._last_report[broker] = report_ids.get(broker, 0.0)
            if score > line and score - mean >= settings.min_excess:
                self._overloaded_for[broker] = self._overloaded_for.get(broker, 0) + 1
                if self._overloaded_for[broker] >= settings.consecutive_reports:
                    hot.append(broker)
            else:
                self._overloaded_for.pop(broker, None)
        for broker in list(self._overloaded_for):
            if broker not in scores:
                del self._overloaded_for[broker]
        for broker in list(self._last_report):
            if broker not in scores:
                del self._last_report[broker]
        if not hot:
            return []
        by_leader: dict[str, list[TopicLoad]] = {}
        for topic in topics:
            by_leader.setdefault(topic.leader, []).append(topic)
        projected = dict(scores)
        moves: list[Move] = []
        budget = settings.max_moves_per_minute - len(self._recent)
        for source in sorted(hot, key=lambda broker: (-scores[broker], broker)):
            candidates = sorted(
                (
                    topic
                    for topic in by_leader.get(source, ())
                    if topic.score > 0 and topic.name not in self._moved_at
                ),
                key=lambda topic: (-topic.score, topic.name),
            )
            moved_here = False
            for topic in candidates:
                if budget <= 0 or projected[source] <= mean:
                    break
                target = self._target(topic, source, projected, line)
                if target is not None:
                    moves.append(Move(topic.name, source, target, topic.score))
                    self._moved_at[topic.name] = now
                    moved_here = True
                else:
                    copy = self._copy(topic, source, scores, projected, line, no_copies_to)
                    if copy is None:
                        continue
                    # The source stays hot in its reports until the transfer: it is
                    # not made to wait for more of them.
                    moves.append(copy)
                    target = copy.target
                    self._copying[topic.name] = (target, now)
                projected[source] -= topic.score
                projected[target] += topic.score
                self._recent.append(now)
                budget -= 1
            if moved_here:
                # Its next reports must show the moves before it counts as hot again.
                self._overloaded_for.pop(source, None)
        return moves

    def _target(
        self, topic: TopicLoad, source: str, projected: Mapping[str, float], line: float
    ) -> str | None:
        """The least-loaded live member of the topic's ensemble the move narrows the
        gap to without overloading it; None if there is none."""
        members = sorted(
            (member for member in topic.members if member != source and member in projected),
            key=lambda member: (projected[member], member),
        )
        for member in members:
            after = projected[member] + topic.score
            if topic.score < projected[source] - projected[member] and after <= line:
                return member
        return None

    def _copy(
        self,
        topic: TopicLoad,
        source: str,
        scores: Mapping[str, float],
        projected: Mapping[str, float],
        line: float,
        no_copies_to: frozenset[str],
    ) -> Move | None:
        """A copy of the topic to the least-loaded live broker outside its ensemble
        that could then take it (as _target), in place of its most loaded non-leader
        member holding a copy; None if there is none."""
        if topic.swapping or topic.name in self._copying:
            return None
        others = [member for member in topic.members if member != source]
        if not others:
            return None  # one copy: no member to swap
        copies_to: dict[str, int] = {}
        for target, _ in self._copying.values():
            copies_to[target] = copies_to.get(target, 0) + 1
        outside = sorted(
            (
                broker
                for broker in projected
                if broker not in topic.members
                and broker not in no_copies_to
                and copies_to.get(broker, 0) < self.settings.max_copies_per_broker
            ),
            key=lambda broker: (projected[broker], broker),
        )
        for broker in outside:
            after = projected[broker] + topic.score
            if topic.score < projected[source] - projected[broker] and after <= line:
                leaving = max(others, key=lambda member: (scores.get(member, 0.0), member))
                return Move(topic.name, source, broker, topic.score, leaving)
        return None

    def _forget_copies(
        self, topics: Iterable[TopicLoad], scores: Mapping[str, float], now: float
    ) -> None:
        """Copies whole (the topic's reports name the target a member), timed out, or
        to a broker gone are no longer being made."""
        members = {topic.name: topic.members for topic in topics}
        for name, (target, since) in list(self._copying.items()):
            whole = target in members.get(name, ())
            if whole or target not in scores or now - since >= self.settings.copy_timeout_s:
                del self._copying[name]

    def _forget_before(self, now: float) -> None:
        cooldown = self.settings.move_cooldown_s
        for topic, moved_at in list(self._moved_at.items()):
            if now - moved_at >= cooldown:
                del self._moved_at[topic]
        while self._recent and now - self._recent[0] >= _MINUTE_S:
            self._recent.popleft()
