"""A Jepsen-style checker of a fault run's history: what was promised against what was seen.

Pure: no broker, no clock, no I/O. A fault tool records a History as its load runs
(every send and what became of it, every delivery and confirmed acknowledgement per
subscription, how each transaction ended, the stable position sampled per topic)
and hands it to `check`, which returns a Violation for each broken promise:

- lost: an acknowledged send (plain, or of a committed transaction) that a
  subscription meant to see it never delivered;
- redelivered-after-ack: a payload delivered again after its acknowledgement was
  confirmed;
- written-twice: one payload delivered under two message ids (written twice);
- reordered: on an Exclusive subscription, a producer's message first delivered
  after a later one of the same producer;
- aborted-visible / open-visible: a READ_COMMITTED subscription delivered data of an
  aborted transaction, or of one whose end was never asked for;
- partial-transaction: a READ_COMMITTED subscription delivered some of a
  transaction's acknowledged sends on its topic but not all, or none while another
  READ_COMMITTED subscription saw part of it;
- position-back: a topic's stable position (maxReadPosition) sampled behind an
  earlier sample;
- id-reused: one message id of a topic given to two different payloads (by send
  receipts or deliveries).

A send whose outcome is "failed" or "unknown" promises nothing either way (a
timed-out send may still have been written), nor does a transaction whose end was
asked for but not answered, beyond all-or-nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

ACKED = "acked"
FAILED = "failed"
UNKNOWN = "unknown"
SEND_OUTCOMES = (ACKED, FAILED, UNKNOWN)


class TxnOutcome(Enum):
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"  # the end was asked for and not answered
    OPEN = "open"  # the end was never asked for: it times out, nothing of it may show


@dataclass(frozen=True, slots=True)
class Send:
    """One send: `seq` is the producer's order; `message_id` is given when acked."""

    topic: str
    producer: str
    seq: int
    payload: str
    outcome: str
    message_id: str | None = None
    txn: str | None = None


@dataclass(frozen=True, slots=True)
class Delivered:
    payload: str
    message_id: str


@dataclass(frozen=True, slots=True)
class AckConfirmed:
    """The broker confirmed the subscription's acknowledgement of `payload`."""

    payload: str


@dataclass
class SubscriptionLog:
    """What one subscription (from the earliest message) delivered, in order."""

    name: str
    topic: str
    read_committed: bool
    exclusive: bool
    events: list[Delivered | AckConfirmed] = field(default_factory=list)

    def delivered(self, payload: str, message_id: str) -> None:
        self.events.append(Delivered(payload, message_id))

    def ack_confirmed(self, payloads: Iterable[str]) -> None:
        self.events.extend(AckConfirmed(payload) for payload in payloads)


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    subscriptions: list[SubscriptionLog] = field(default_factory=list)
    transactions: dict[str, TxnOutcome] = field(default_factory=dict)
    # topic -> maxReadPosition samples ("ledger:entry") in the order taken
    positions: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


KINDS = (
    "lost",
    "redelivered-after-ack",
    "written-twice",
    "reordered",
    "aborted-visible",
    "open-visible",
    "partial-transaction",
    "position-back",
    "id-reused",
)


def check(history: History) -> list[Violation]:
    """Every violation of the promises the module docstring lists."""
    by_payload = {send.payload: send for send in history.sends}
    violations: list[Violation] = []
    for log in history.subscriptions:
        violations += _delivery_order(log, by_payload)
        violations += _visibility(log, history, by_payload)
    violations += _partial_across_subscriptions(history, by_payload)
    violations += _ids_reused(history)
    violations += _positions_back(history.positions)
    return violations


def _delivery_order(log: SubscriptionLog, by_payload: dict[str, Send]) -> list[Violation]:
    """Redelivery after a confirmed ack, a payload under two ids, a producer's order."""
    violations = []
    first_id: dict[str, str] = {}
    confirmed: set[str] = set()
    last_seq: dict[str, tuple[int, str]] = {}  # producer -> (seq, payload) last first-delivered
    for event in log.events:
        if isinstance(event, AckConfirmed):
            confirmed.add(event.payload)
            continue
        payload, message_id = event.payload, event.message_id
        if payload in confirmed:
            violations.append(
                Violation("redelivered-after-ack", f"{log.name}: {payload} at {message_id}")
            )
        seen_id = first_id.get(payload)
        if seen_id is not None:
            if seen_id != message_id:
                violations.append(
                    Violation(
                        "written-twice", f"{log.name}: {payload} at {seen_id} and {message_id}"
                    )
                )
            continue
        first_id[payload] = message_id
        send = by_payload.get(payload)
        if not log.exclusive or send is None:
            continue
        previous = last_seq.get(send.producer)
        if previous is not None and send.seq < previous[0]:
            violations.append(
                Violation("reordered", f"{log.name}: {payload} delivered after {previous[1]}")
            )
        else:
            last_seq[send.producer] = (send.seq, payload)
    return violations


def _visibility(
    log: SubscriptionLog, history: History, by_payload: dict[str, Send]
) -> list[Violation]:
    """Lost acknowledged sends; on READ_COMMITTED, aborted, open or partial transactions."""
    violations = []
    seen = {event.payload for event in log.events if isinstance(event, Delivered)}
    txn_parts: dict[str, list[str]] = defaultdict(list)  # txn -> its acked sends on this topic
    for send in history.sends:
        if send.topic != log.topic or send.outcome != ACKED:
            continue
        if send.txn is None or not log.read_committed:
            if send.payload not in seen:
                violations.append(Violation("lost", f"{log.name}: {send.payload}"))
        else:
            txn_parts[send.txn].append(send.payload)
    if not log.read_committed:
        return violations
    for txn, parts in sorted(txn_parts.items()):
        outcome = history.transactions.get(txn, TxnOutcome.OPEN)
        visible = [p for p in parts if p in seen]
        if outcome is TxnOutcome.COMMITTED and not visible:
            violations.append(Violation("lost", f"{log.name}: committed {txn} ({parts[0]}...)"))
        elif visible and len(visible) < len(parts):
            missing = sorted(set(parts) - set(visible))
            violations.append(
                Violation("partial-transaction", f"{log.name}: {txn} without {missing[:3]}")
            )
    for payload in sorted(seen):
        send = by_payload.get(payload)
        if send is None or send.txn is None:
            continue
        outcome = history.transactions.get(send.txn, TxnOutcome.OPEN)
        if outcome is TxnOutcome.ABORTED:
            violations.append(
                Violation("aborted-visible", f"{log.name}: {payload} of aborted {send.txn}")
            )
        elif outcome is TxnOutcome.OPEN:
            violations.append(
                Violation("open-visible", f"{log.name}: {payload} of open {send.txn}")
            )
    return violations


def _partial_across_subscriptions(history: History, by_payload: dict[str, Send]) -> list[Violation]:
    """A transaction one READ_COMMITTED subscription saw (in part or whole) of which
    another, on a topic the transaction wrote to, saw nothing."""
    committed_logs = [log for log in history.subscriptions if log.read_committed]
    seen_by: dict[str, set[str]] = {}  # subscription -> transactions it saw any of
    for log in committed_logs:
        seen_by[log.name] = {
            by_payload[event.payload].txn
            for event in log.events
            if isinstance(event, Delivered)
            and event.payload in by_payload
            and by_payload[event.payload].txn is not None
        }
    acked_on: dict[str, set[str]] = defaultdict(set)  # txn -> topics it has acked sends on
    for send in history.sends:
        if send.txn is not None and send.outcome == ACKED:
            acked_on[send.txn].add(send.topic)
    violations = []
    seen_anywhere = set().union(*seen_by.values()) if seen_by else set()
    for txn in sorted(seen_anywhere):
        if history.transactions.get(txn) is TxnOutcome.COMMITTED:
            continue  # a committed one missing somewhere is reported as lost
        for log in committed_logs:
            if log.topic in acked_on[txn] and txn not in seen_by[log.name]:
                violations.append(
                    Violation("partial-transaction", f"{txn} seen elsewhere, not by {log.name}")
                )
    return violations


def _ids_reused(history: History) -> list[Violation]:
    """One message id of a topic for two payloads, from receipts and deliveries alike."""
    payload_of: dict[tuple[str, str], str] = {}
    reported: set[tuple[str, str]] = set()
    violations = []

    def note(topic: str, message_id: str, payload: str) -> None:
        key = (topic, message_id)
        other = payload_of.setdefault(key, payload)
        if other != payload and key not in reported:
            reported.add(key)
            violations.append(
                Violation("id-reused", f"{topic} {message_id}: {other} and {payload}")
            )

    for send in history.sends:
        if send.outcome == ACKED and send.message_id is not None:
            note(send.topic, send.message_id, send.payload)
    for log in history.subscriptions:
        for event in log.events:
            if isinstance(event, Delivered):
                note(log.topic, event.message_id, event.payload)
    return violations


def _position(text: str) -> tuple[int, int]:
    ledger_id, entry_id = text.split(":")
    return int(ledger_id), int(entry_id)


def _positions_back(positions: dict[str, list[str]]) -> list[Violation]:
    violations = []
    for topic, samples in sorted(positions.items()):
        highest: str | None = None
        behind = False  # a dip is reported once, however many samples it lasts
        for sample in samples:
            if highest is not None and _position(sample) < _position(highest):
                if not behind:
                    violations.append(
                        Violation(
                            "position-back", f"{topic}: maxReadPosition {highest} -> {sample}"
                        )
                    )
                behind = True
                continue
            behind = False
            highest = sample
    return violations


def summary(violations: list[Violation]) -> dict[str, int]:
    """Count per kind, every kind present (0 when clean)."""
    counts = dict.fromkeys(KINDS, 0)
    for violation in violations:
        counts[violation.kind] += 1
    return counts
