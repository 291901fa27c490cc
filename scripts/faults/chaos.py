"""Chaos: SIGKILL a broker at random moments under a mixed load; clients reconnect alone.

One asyncio client drives, for the whole run, against a real broker process:
- two plain producers on topic A (one named, one the broker names), batching;
- a transactional producer writing `t{k}:a` to A and `t{k}:b` to B in one
  transaction, then committing (or aborting one in five);
- subscriptions on A: Exclusive READ_COMMITTED, Shared READ_COMMITTED (two
  consumers, which nack one message in twenty), Exclusive READ_UNCOMMITTED; and
  Exclusive READ_COMMITTED on B. Every consumer acknowledges what it keeps, a
  batch at a time.
Each cycle lets the load run a random while (or until a commit is in flight),
kills the broker with SIGKILL, starts it again on the same data dir and ports,
waits for the load to make progress again (the SDK reconnects and resends on its
own), pauses the load, lets every transaction end and every subscription catch
up, and checks:
- no acknowledged message lost: every send whose receipt came back, and every
  message of a committed transaction, reaches every subscription meant to see it;
- no message written twice (a resend is de-duplicated) and none delivered again
  after its acknowledgement was confirmed before a kill;
- nothing aborted or still open visible to READ_COMMITTED, no transaction partly
  visible (its A and B messages both or neither);
- each producer's order kept on Exclusive subscriptions;
- maxReadPosition never behind where it was before the kill.
A table row per cycle and totals; exit status 1 on any violation. The broker, the
kill and restart, and the table are scripts/faults/kill_cycle.py's.

    python scripts/faults/chaos.py [--cycles 100] [--seed S] [--json PATH]
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass, field

import kill_cycle
from kill_cycle import KillCycles

from stableline import aio

TOPIC_A = "chaos-a"
TOPIC_B = "chaos-b"
ABORT_FRACTION = 0.2
NACK_FRACTION = 0.05
TXN_TIMEOUT_MS = 2000
CATCH_UP_TIMEOUT_S = 30.0
PROGRESS_TIMEOUT_S = 30.0
RC = aio.IsolationLevel.READ_COMMITTED
RU = aio.IsolationLevel.READ_UNCOMMITTED
COLUMNS = ("cycle", "kill_after_s", "phase", "sent_acked", "delivered", "commits", "aborts",
           "recovery_s")  # fmt: skip


@dataclass
class Subscription:
    """What one subscription delivered and had acknowledged, over the run."""

    name: str
    topic: str
    level: aio.IsolationLevel
    ordered: bool  # Exclusive: each producer's order must hold
    delivered: dict[str, str] = field(default_factory=dict)  # value -> first message id
    acked: dict[str, int] = field(default_factory=dict)  # value -> epoch confirmed
    last_index: dict[str, int] = field(default_factory=dict)  # producer -> last new index
    violations: list[str] = field(default_factory=list)

    def take(self, value: str, message_id: str, epoch: int, state: Load) -> None:
        first_id = self.delivered.get(value)
        if first_id is None:
            self.delivered[value] = message_id
            producer, index = _producer_and_index(value)
            if self.ordered and index <= self.last_index.get(producer, -1):
                self.violations.append(f"{self.name}: {value} after a later one of its producer")
            self.last_index[producer] = max(index, self.last_index.get(producer, -1))
        elif first_id != message_id:
            self.violations.append(f"{self.name}: {value} written twice ({first_id}, {message_id})")
        acked_in = self.acked.get(value)
        if acked_in is not None and acked_in < epoch:
            self.violations.append(f"{self.name}: {value} delivered again after its ack")
        if self.level is RC and value.startswith("t"):
            txn = _txn_of(value)
            if txn in state.aborted:
                self.violations.append(f"{self.name}: {value} of aborted transaction visible")
            elif txn not in state.ending:
                self.violations.append(f"{self.name}: {value} of open transaction visible")


def _producer_and_index(value: str) -> tuple[str, int]:
    """("named", 7) for "named-7"; ("txn:a", 3) for "t3:a" (one transactional producer)."""
    if value.startswith("t"):
        number, side = value[1:].split(":")
        return f"txn:{side}", int(number)
    producer, number = value.rsplit("-", 1)
    return producer, int(number)


def _txn_of(value: str) -> str:
    return value.split(":")[0]


@dataclass
class Load:
    """What the broker acknowledged to the load, over the run."""

    epoch: int = 0  # kills so far
    plain_acked: set[str] = field(default_factory=set)
    txn_sent: set[str] = field(default_factory=set)  # transactional sends acknowledged
    ending: set[str] = field(default_factory=set)  # end asked for
    committed: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)  # the end raised
    committing: int = 0  # commits in flight
    sent_since_restart: int = 0
    running: asyncio.Event = field(default_factory=asyncio.Event)
    busy: int = 0  # load tasks between a pause check and the end of their step


async def plain_producer(client: aio.Client, load: Load, name: str | None, tag: str) -> None:
    producer = await client.create_producer(TOPIC_A, producer_name=name, batching_max_messages=10)
    index = 0
    while True:
        await load.running.wait()
        load.busy += 1
        try:
            values = [f"{tag}-{index + i}" for i in range(20)]
            index += 20
            receipts = [producer.send_nowait(v.encode()) for v in values]
            for value, receipt in zip(values, receipts, strict=True):
                try:
                    await receipt
                except aio.StableLineError:
                    continue
                load.plain_acked.add(value)
                load.sent_since_restart += 1
        finally:
            load.busy -= 1


async def txn_producer(client: aio.Client, load: Load, rng: random.Random) -> None:
    to_a = await client.create_producer(TOPIC_A, producer_name="chaos-txn-a")
    to_b = await client.create_producer(TOPIC_B, producer_name="chaos-txn-b")
    index = 0
    while True:
        await load.running.wait()
        load.busy += 1
        try:
            name = f"t{index}"
            index += 1
            try:
                txn = await client.new_transaction(timeout_ms=TXN_TIMEOUT_MS)
                await asyncio.gather(
                    to_a.send(f"{name}:a".encode(), txn=txn),
                    to_b.send(f"{name}:b".encode(), txn=txn),
                )
            except aio.StableLineError:
                continue  # never ended: it times out, and nothing of it may show
            load.txn_sent.update((f"{name}:a", f"{name}:b"))
            load.ending.add(name)
            abort = rng.random() < ABORT_FRACTION
            load.committing += 1
            try:
                await (txn.abort() if abort else txn.commit())
                (load.aborted if abort else load.committed).add(name)
            except aio.StableLineError:
                load.unknown.add(name)
            finally:
                load.committing -= 1
        finally:
            load.busy -= 1


async def consume(consumer: aio.Consumer, record: Subscription, load: Load, rng) -> None:
    """Take each batch, nack a few on Shared subscriptions, ack the rest in one call (an
    ack is confirmed once durable: one fsync a call, as a fast consumer would)."""
    while True:
        messages = await consumer.batch_receive(100, 200)
        epoch = load.epoch  # when delivered: acking the batch may span a kill
        to_ack = []
        for message in messages:
            value = message.data().decode()
            record.take(value, str(message.message_id()), epoch, load)
            if rng.random() < NACK_FRACTION and record.name.startswith("shared"):
                await consumer.negative_acknowledge(message)
                continue
            to_ack.append((value, message))
        if to_ack:
            await consumer.acknowledge([message for _value, message in to_ack])
            for value, _message in to_ack:
                record.acked.setdefault(value, load.epoch)


def expected_for(record: Subscription, load: Load) -> set[str]:
    """What the subscription must have delivered once the load is paused and settled."""
    side = ":a" if record.topic == TOPIC_A else ":b"
    plain = load.plain_acked if record.topic == TOPIC_A else set()
    if record.level is RU:
        return plain | {v for v in load.txn_sent if v.endswith(side)}
    return plain | {f"{t}{side}" for t in load.committed}


def check(records: list[Subscription], load: Load) -> list[str]:
    """The promises of the module docstring but maxReadPosition's (the harness checks
    that one); returns the violations found."""
    violations = []
    for record in records:
        violations += record.violations
        record.violations.clear()
        missing = expected_for(record, load) - set(record.delivered)
        if missing:
            violations.append(f"{record.name}: acknowledged messages lost: {sorted(missing)[:3]}")
    rc_a = {_txn_of(v) for v in records[0].delivered if v.startswith("t")}
    rc_b = {_txn_of(v) for v in records[3].delivered if v.startswith("t")}
    if rc_a != rc_b:
        violations.append(f"transactions partly visible: {sorted(rc_a ^ rc_b)[:3]}")
    return violations


async def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s} s")
        await asyncio.sleep(0.02)


async def run_cycle(
    harness: KillCycles, load: Load, records, cycle: int, rng: random.Random
) -> dict:
    counts = (len(load.plain_acked), len(load.committed), len(load.aborted))
    delivered = sum(len(r.delivered) for r in records)
    load.running.set()
    mid_commit = rng.random() < 0.5
    run_for = rng.uniform(0.2, 1.5)
    await asyncio.sleep(run_for)  # the load runs: this is the random kill moment
    if mid_commit:
        await wait_for(lambda: load.committing > 0, 10, "commit in flight")
    phase = "mid-commit" if load.committing else "steady"
    # On the loop, not in a thread: no delivery is taken between the kill and the
    # epoch that marks it.
    before_kill = harness.kill()
    load.epoch += 1
    load.sent_since_restart = 0
    started = await asyncio.to_thread(harness.restart)
    await wait_for(lambda: load.sent_since_restart > 0, PROGRESS_TIMEOUT_S, "send after restart")
    recovery_s = time.monotonic() - started
    load.running.clear()
    await wait_for(lambda: load.busy == 0, CATCH_UP_TIMEOUT_S, "load to pause")
    await asyncio.to_thread(harness.wait_settled, CATCH_UP_TIMEOUT_S)
    with_deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < with_deadline and any(
        expected_for(r, load) - set(r.delivered) for r in records
    ):
        await asyncio.sleep(0.05)
    violations = check(records, load)
    violations += await asyncio.to_thread(harness.positions_gone_back, before_kill)
    return {
        "cycle": cycle,
        "kill_after_s": round(run_for, 2),
        "phase": phase,
        "sent_acked": len(load.plain_acked) - counts[0],
        "delivered": sum(len(r.delivered) for r in records) - delivered,
        "commits": len(load.committed) - counts[1],
        "aborts": len(load.aborted) - counts[2],
        "recovery_s": round(recovery_s, 2),
        "violations": violations,
    }


async def chaos(harness: KillCycles, cycles: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    load = Load()
    records = [
        Subscription("rc-exclusive", TOPIC_A, RC, True),
        Subscription("shared-rc", TOPIC_A, RC, False),
        Subscription("ru-exclusive", TOPIC_A, RU, True),
        Subscription("rc-b", TOPIC_B, RC, True),
    ]
    async with aio.Client(harness.broker.service_url, operation_timeout_seconds=60) as client:
        tasks = []
        for record, kind in zip(
            records, ("Exclusive", "Shared", "Exclusive", "Exclusive"), strict=True
        ):
            for _ in range(2 if kind == "Shared" else 1):
                consumer = await client.subscribe(
                    record.topic, record.name, getattr(aio.ConsumerType, kind),
                    aio.InitialPosition.Earliest, record.level,
                    negative_ack_redelivery_delay_ms=50,
                )  # fmt: skip
                tasks.append(asyncio.create_task(consume(consumer, record, load, rng)))
        tasks.append(asyncio.create_task(plain_producer(client, load, "chaos-plain", "named")))
        tasks.append(asyncio.create_task(plain_producer(client, load, None, "anon")))
        tasks.append(asyncio.create_task(txn_producer(client, load, rng)))

        async def cycle(number: int) -> dict:
            row = await run_cycle(harness, load, records, number, rng)
            for task in tasks:
                if task.done():
                    raise RuntimeError(f"a load task stopped: {task.exception()!r}")
            return row

        try:
            rows = await harness.cycles(cycles, cycle)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    print(
        f"totals: {len(rows)} cycles, {len(load.plain_acked)} plain sends acknowledged, "
        f"{len(load.committed)} commits, {len(load.aborted)} aborts, "
        f"{len(load.unknown)} ends unanswered, "
        f"{sum(len(r.delivered) for r in records)} distinct deliveries, "
        f"recovery median {sorted(r['recovery_s'] for r in rows)[len(rows) // 2]} s, "
        f"max {max(r['recovery_s'] for r in rows)} s"
    )
    return rows


def main() -> int:
    args = kill_cycle.parse_args(__doc__)
    return kill_cycle.run(
        "chaos",
        args,
        (TOPIC_A, TOPIC_B),
        COLUMNS,
        lambda harness: chaos(harness, args.cycles, args.seed),
    )


if __name__ == "__main__":
    sys.exit(main())
