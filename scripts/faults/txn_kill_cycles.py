"""SIGKILL a broker at random moments under a transactional load, and check every restart.

A workload process runs concurrent transactions over two topics (each writes
`t{i}a` to one and `t{i}b` to the other, then a plain `p{i}` to the first, and
commits, or aborts one in five), journalling on stdout what the broker
acknowledged. The broker (snapshots every 50 changes, so recoveries mix snapshot
and tail replay) is killed with SIGKILL after a random number of transactions,
sometimes mid-commit, and restarted on the same data dir. After each restart,
once every transaction open at the kill has timed out, it checks:
- every acknowledged plain message is there, once, in its producer's order;
- every transaction whose commit returned is visible on both topics to
  READ_COMMITTED, every one whose abort returned on neither, and every other
  one on both or neither (never partly), and none whose end was never asked for;
- READ_COMMITTED shows nothing twice and keeps each producer's order;
- maxReadPosition is not behind where it was just before the kill.
A table row per cycle; exit status 1 on any violation. The broker, the kill and
restart, and the table are scripts/faults/kill_cycle.py's.

    python scripts/faults/txn_kill_cycles.py [--cycles 100] [--seed S] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field

import kill_cycle
from kill_cycle import KillCycles, buffer_stats

import stableline
from stableline.testing import BrokerProcess

TOPIC_A = "kill-cycles-a"
TOPIC_B = "kill-cycles-b"
WORKERS = 4
ABORT_FRACTION = 0.2
TXN_TIMEOUT_MS = 3000
SETTLE_TIMEOUT_S = 30.0
WORKLOAD_TIMEOUT_S = 5.0
CYCLE_START_STRIDE = 10_000_000  # each cycle's indexes: cycle * stride + worker * 1e6 + n
WORKER_STRIDE = 1_000_000
COLUMNS = ("cycle", "ended_before_kill", "mid_commit", "committed", "aborted", "unknown",
           "replayed", "from_snapshot", "recovery_ms", "restart_to_settled_s",
           "max_read_position")  # fmt: skip


# ---------------------------------------------------------------- the workload (child)


async def workload(service_url: str, start: int, seed: int) -> None:
    def emit(*fields: object) -> None:
        print(*fields, flush=True)

    # After the kill, requests retried across the outage give up this long after it
    # and the child exits: the default 30 s was most of each cycle's time.
    async with stableline.aio.Client(
        service_url, operation_timeout_seconds=WORKLOAD_TIMEOUT_S
    ) as client:
        to_a = await client.create_producer(TOPIC_A)
        to_b = await client.create_producer(TOPIC_B)

        async def worker(number: int) -> None:
            rng = random.Random(seed * 100 + number)
            index = start + number * WORKER_STRIDE
            while True:
                txn = await client.new_transaction(timeout_ms=TXN_TIMEOUT_MS)
                await to_a.send(f"t{index}a".encode(), txn=txn)
                await to_b.send(f"t{index}b".encode(), txn=txn)
                await to_a.send(f"p{index}".encode())
                emit("plain", index)
                outcome = "abort" if rng.random() < ABORT_FRACTION else "commit"
                emit("ending", index, outcome)
                await (txn.abort() if outcome == "abort" else txn.commit())
                emit("ended", index, outcome)
                index += 1

        with contextlib.suppress(stableline.StableLineError):
            await asyncio.gather(*(worker(n) for n in range(WORKERS)))


# ---------------------------------------------------------------- the journal and checks


@dataclass
class Journal:
    """What the broker acknowledged to the workload, over all cycles."""

    plain: set[int] = field(default_factory=set)
    ending: dict[int, str] = field(default_factory=dict)  # end asked for: outcome
    ended: dict[int, str] = field(default_factory=dict)  # end returned: outcome
    ended_this_cycle: int = 0

    def take(self, line: str) -> None:
        kind, *rest = line.split()
        index = int(rest[0])
        if kind == "plain":
            self.plain.add(index)
        elif kind == "ending":
            self.ending[index] = rest[1]
        elif kind == "ended":
            self.ended[index] = rest[1]
            self.ended_this_cycle += 1


def read_all(service_url: str, topic: str, level: stableline.IsolationLevel) -> list[str]:
    with stableline.Client(service_url) as client:
        reader = client.create_reader(topic, stableline.MessageId.earliest, level)
        values = []
        while reader.has_message_available():
            values.append(reader.read_next(10_000).data().decode())
        reader.close()
        return values


def consume_all(service_url: str, topic: str, subscription: str, expected: int) -> list[str]:
    """A new READ_COMMITTED subscription from the earliest message: `expected` messages,
    then whatever else arrives within a short wait (nothing, when all is well). It
    acknowledges nothing (an acknowledging lone subscription would let retention
    delete what the next checks read) and is removed after."""
    with stableline.Client(service_url) as client:
        consumer = client.subscribe(
            topic, subscription, initial_position=stableline.InitialPosition.Earliest
        )
        values = []
        with contextlib.suppress(stableline.Timeout):
            while True:
                wait_ms = 10_000 if len(values) < expected else 300
                messages = consumer.batch_receive(1000, wait_ms)
                if not messages:
                    break
                values.extend(m.data().decode() for m in messages)
        consumer.unsubscribe()
        return values


def _in_producer_order(indexes: list[int]) -> bool:
    last: dict[int, int] = {}
    for index in indexes:
        producer = index // WORKER_STRIDE
        if index <= last.get(producer, -1):
            return False
        last[producer] = index
    return True


def check(broker: BrokerProcess, journal: Journal) -> list[str]:
    """Every promise of the module docstring but maxReadPosition's (the harness
    checks that one); returns the violations found."""
    violations = []
    url = broker.service_url
    rc_a = read_all(url, TOPIC_A, stableline.IsolationLevel.READ_COMMITTED)
    rc_b = read_all(url, TOPIC_B, stableline.IsolationLevel.READ_COMMITTED)
    ru_a = read_all(url, TOPIC_A, stableline.IsolationLevel.READ_UNCOMMITTED)
    # Subscriptions (the dispatcher's filter) must deliver what readers (Fetch plus
    # the client's aborted-list filter) read.
    for topic, values in ((TOPIC_A, rc_a), (TOPIC_B, rc_b)):
        delivered = consume_all(url, topic, f"check-{time.monotonic_ns()}", len(values))
        if delivered != values:
            extra = sorted(set(delivered) - set(values))[:5]
            violations.append(f"{topic}: RC subscription differs from RC reader (extra {extra})")
    for name, values in (("RC a", rc_a), ("RC b", rc_b), ("RU a", ru_a)):
        if len(values) != len(set(values)):
            violations.append(f"{name}: a message delivered twice")
    plain_rc = [int(v[1:]) for v in rc_a if v.startswith("p")]
    missing = journal.plain - set(plain_rc)
    if missing:
        violations.append(f"acknowledged plain messages lost: {sorted(missing)[:5]}")
    if journal.plain - {int(v[1:]) for v in ru_a if v.startswith("p")}:
        violations.append("acknowledged plain messages missing from READ_UNCOMMITTED")
    txns_a = [int(v[1:-1]) for v in rc_a if v.startswith("t")]
    txns_b = [int(v[1:-1]) for v in rc_b]
    for name, indexes in (("plain", plain_rc), ("txn a", txns_a), ("txn b", txns_b)):
        if not _in_producer_order(indexes):
            violations.append(f"RC {name}: a producer's order not kept")
    visible_a, visible_b = set(txns_a), set(txns_b)
    if visible_a != visible_b:
        partly = sorted(visible_a ^ visible_b)[:5]
        violations.append(f"transactions partly visible: {partly}")
    for index, outcome in journal.ended.items():
        if outcome == "commit" and index not in visible_a:
            violations.append(f"committed transaction {index} not visible")
        if outcome == "abort" and index in visible_a | visible_b:
            violations.append(f"aborted transaction {index} visible")
    never_ended = (visible_a | visible_b) - set(journal.ending)
    if never_ended:
        violations.append(f"transactions visible without an end asked: {sorted(never_ended)[:5]}")
    return violations


# ---------------------------------------------------------------- the cycles (parent)


def run_cycle(harness: KillCycles, journal: Journal, cycle: int, rng: random.Random) -> dict:
    broker = harness.broker
    journal.ended_this_cycle = 0
    wanted = rng.randint(5, 80)  # transactions to end before the kill
    mid_commit = rng.random() < 0.5  # then kill at the next "ending", not after an "ended"
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--workload",
            broker.service_url,
            str(cycle * CYCLE_START_STRIDE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    for line in child.stdout:
        journal.take(line)
        if journal.ended_this_cycle >= wanted and (not mid_commit or line.startswith("ending")):
            break
        if time.monotonic() > deadline:
            break
    before_kill = harness.kill()
    for line in child.stdout:  # acknowledgements that raced the kill still count
        journal.take(line)
    child.wait(timeout=30)
    killed_after = journal.ended_this_cycle

    started = harness.restart()
    harness.wait_settled(SETTLE_TIMEOUT_S)
    stats = buffer_stats(broker, TOPIC_A)
    violations = check(broker, journal) + harness.positions_gone_back(before_kill)
    return {
        "cycle": cycle,
        "ended_before_kill": killed_after,
        "mid_commit": mid_commit,
        "committed": sum(o == "commit" for o in journal.ended.values()),
        "aborted": sum(o == "abort" for o in journal.ended.values()),
        "unknown": len(set(journal.ending) - set(journal.ended)),
        "replayed": stats["replayedEntries"],
        "from_snapshot": stats["recoveredFromSnapshot"],
        "recovery_ms": stats["recoveryTimeMs"],
        "restart_to_settled_s": round(time.monotonic() - started, 2),
        "max_read_position": stats["maxReadPosition"],
        "violations": violations,
    }


def main() -> int:
    def workload_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workload", nargs=2, metavar=("URL", "START"), help=argparse.SUPPRESS)

    args = kill_cycle.parse_args(__doc__, workload_option)
    if args.workload:
        asyncio.run(workload(args.workload[0], int(args.workload[1]), args.seed))
        return 0
    rng = random.Random(args.seed)
    journal = Journal()

    async def drive(harness: KillCycles) -> list[dict]:
        return await harness.cycles(
            args.cycles, lambda n: asyncio.to_thread(run_cycle, harness, journal, n, rng)
        )

    return kill_cycle.run("txn_kill_cycles", args, (TOPIC_A, TOPIC_B), COLUMNS, drive)


if __name__ == "__main__":
    sys.exit(main())
