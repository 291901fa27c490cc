"""Failover under faults: etcd and three brokers, a load, a fault per cycle, a checker at the end.

One etcd and three brokers of one cluster (each on its own data dir; their metadata
session, the lease that says a broker is alive, lasts --session-timeout s) serve a
load through one client whose service URL lists all three brokers:
- --producers named plain producers per topic, each sending unique payloads
  "p{topic}.{n}:{seq}" one at a time;
- one transactional producer writing one message to every topic per transaction,
  then committing (or aborting one in five);
- on every topic an Exclusive READ_COMMITTED and an Exclusive READ_UNCOMMITTED
  subscription (from the earliest message) that consume and acknowledge.
Every --interval s a fault (--fault) strikes the broker that owns the cycle's topic
(the lookup API says which):
- kill: SIGKILL, restarted after --down s on the same data dir;
- lose-disk: SIGKILL, its data dir deleted, restarted empty after --down s;
- pause: SIGSTOP for the session timeout plus --down s, then SIGCONT;
- kill-coordinator: SIGKILL of the leader of the transaction coordinator shard the
  transactional producer's latest transaction is on (not the cycle topic's owner,
  though it may own topics too), restarted after --down s;
- two-down: SIGKILL of the two other members of the owner's topics (the owner stays
  up); writes must then be refused (no acknowledgement: below the ack quorum) and
  reads go on; one restarts after --down s (writes must resume), the other --down s
  later. (With the owner among the two, no broker may serve: one member cannot know
  the last acknowledged entry.)
- partition (root and iproute2 only, else exit 2): etcd and each broker on a test
  host of its own (scripts/faults/hosts.py: network namespaces on a bridge the client
  shares); the owner is cut off from etcd and from one other member, both ways, for
  the session timeout plus --down s, then healed. Checked: its lease lapses (the
  others stop listing it), its log says its session is lost, the others name another
  owner of its topics, its last confirmed entry of each moves no more once both
  happened, and it is listed again within --deadline s of the heal. Its
  unavailability counts from the cut to the acknowledgement of the first send asked
  for after the owner declared its session lost (until then it still serves).
Per fault it measures the unavailability of each topic the struck broker owned:
from the fault to the first acknowledged send on the topic (for two-down, from the
first restart); for kill-coordinator, from the kill to the first transaction
decided after it (committed or aborted, asked after the kill). A topic not served,
or no transaction decided, within --deadline s is a violation
("unavailable: topic X not served within N s after the kill"); every wait has a
deadline, so a run never hangs. maxReadPosition is sampled from each topic's owner
as the load runs. At the end the load stops, the subscriptions catch up, and
scripts/faults/checker.py judges the whole history (lost, duplicated, reordered,
aborted or open transactions visible, partial transactions, stable position back,
message id reused).

A row per cycle, then the unavailability p50/p99/max and the checker's counts;
exit status 1 on any violation. --json PATH writes the rows, the figures and the
violations.

    python scripts/faults/failover.py [--fault kill] [--cycles 12] [--interval 10]
        [--down 10] [--deadline 10] [--session-timeout 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import checker
import kill_cycle
from checker import ACKED, UNKNOWN, Delivered, History, Send, SubscriptionLog, TxnOutcome
from hosts import Hosts, HostsUnavailable, open_hosts
from kill_cycle import buffer_stats

from stableline import aio
from stableline.local_cluster.etcd import INSTALL_HINT, EtcdProcess, find_etcd
from stableline.testing import BrokerProcess, cluster_brokers

REPO = Path(__file__).resolve().parents[2]
BROKERS = 3
TOPICS = ("failover-0", "failover-1", "failover-2")
FAULTS = ("kill", "lose-disk", "pause", "two-down", "kill-coordinator", "partition")
ABORT_FRACTION = 0.2
TXN_TIMEOUT_MS = 5000
CATCH_UP_TIMEOUT_S = 60.0
SERVED_AGAIN_TIMEOUT_S = 60.0
SAMPLE_EVERY_S = 0.5
RC = aio.IsolationLevel.READ_COMMITTED
RU = aio.IsolationLevel.READ_UNCOMMITTED
COLUMNS = (
    "cycle", "fault", "topic", "struck", "owned", "unavailable_s", "decided_s", "acked",
    "delivered",
)  # fmt: skip


def options(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(cycles=12)
    parser.add_argument("--fault", choices=FAULTS, default="kill")
    parser.add_argument("--interval", type=float, default=10.0, help="s between faults")
    parser.add_argument("--down", type=float, default=10.0, help="s a struck broker stays down")
    parser.add_argument(
        "--deadline", type=float, default=10.0, help="s a topic may go unserved after a fault"
    )
    parser.add_argument("--session-timeout", type=float, default=3.0, help="brokers' lease, s")
    parser.add_argument("--producers", type=int, default=2, help="plain producers per topic")
    parser.add_argument("--rate", type=float, default=20.0, help="sends/s per plain producer")
    parser.add_argument("--operation-timeout", type=float, default=15.0, help="client's, s")


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile; None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


# ---------------------------------------------------------------- the cluster


@dataclass
class FaultCluster:
    etcd: EtcdProcess
    brokers: list[BrokerProcess]
    cluster_name: str = ""
    # For --fault partition: etcd on host "etcd", broker I on host "bI".
    hosts: Hosts | None = None

    @property
    def service_url(self) -> str:
        """One URL naming every broker: the client finds the owners through any of them."""
        return ",".join(broker.service_url for broker in self.brokers)

    def alive(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.process is not None and b.process.poll() is None]

    def owner(self, topic: str, among: list[BrokerProcess] | None = None) -> BrokerProcess | None:
        """The broker the lookup API names for `topic`, asking live brokers in turn."""
        for asked in among if among is not None else self.alive():
            try:
                found = asked.admin(f"/lookup/v2/topic/persistent/public/default/{topic}")
            except (OSError, ValueError):
                continue
            address = found["nativeUrl"].rstrip("/").rsplit("/", 1)[-1]
            for broker in self.brokers:
                if address == f"{broker.host}:{broker.grpc_port}":
                    return broker
        return None

    def shard_leader(self, shard: int) -> BrokerProcess | None:
        """The live broker whose coordinator stats say it leads `shard`."""
        for broker in self.alive():
            try:
                stats = broker.admin("/admin/v3/transactions/coordinatorStats")
            except (OSError, ValueError):
                continue
            if str(shard) in stats.get("coordinators", {}):
                return broker
        return None

    def name(self, broker: BrokerProcess | None) -> str:
        return "-" if broker is None else f"b{self.brokers.index(broker)}"


# ---------------------------------------------------------------- the load


@dataclass
class Load:
    """The history as the load makes it, and when each topic last had a send acked."""

    history: History = field(default_factory=History)
    # topic -> (when the send was asked, when its acknowledgement came), monotonic
    acked_at: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    running: bool = True
    consumer_errors: list[str] = field(default_factory=list)  # each one resubscribed
    busy: int = 0
    # (when an end was asked, when it was answered), monotonic; the latest txn's shard.
    decided_at: list[tuple[float, float]] = field(default_factory=list)
    last_shard: int = -1

    def acked(self, topic: str, asked_at: float) -> None:
        self.acked_at.setdefault(topic, []).append((asked_at, time.monotonic()))

    def acks_between(self, start: float, end: float) -> int:
        """Sends asked for and acknowledged within (start, end)."""
        return sum(
            start < asked < end and acked < end
            for times in self.acked_at.values()
            for asked, acked in times
        )

    def sent(self) -> int:
        return sum(send.outcome == ACKED for send in self.history.sends)

    def delivered(self) -> int:
        return sum(
            isinstance(event, Delivered)
            for log in self.history.subscriptions
            for event in log.events
        )


async def plain_producer(client: aio.Client, load: Load, topic: str, number: int, rate: float):
    key = f"{topic.rsplit('-', 1)[1]}.{number}"
    name = f"{topic}-p{number}"
    producer = None
    seq = 0
    while load.running:
        load.busy += 1
        try:
            if producer is None:
                with contextlib.suppress(aio.StableLineError):
                    producer = await client.create_producer(topic, producer_name=name)
                if producer is None:
                    await asyncio.sleep(0.2)
                    continue
            payload = f"p{key}:{seq}"
            asked_at = time.monotonic()
            try:
                message_id = await producer.send(payload.encode())
            except aio.StableLineError:
                # A timed-out send may still be written: its outcome is unknown. The
                # producer may have given up; a new one (same name) takes over.
                load.history.sends.append(Send(topic, key, seq, payload, UNKNOWN))
                with contextlib.suppress(aio.StableLineError):
                    await producer.close()
                producer = None
            else:
                load.history.sends.append(Send(topic, key, seq, payload, ACKED, str(message_id)))
                load.acked(topic, asked_at)
            seq += 1
        finally:
            load.busy -= 1
        await asyncio.sleep(1 / rate)


async def txn_producer(client: aio.Client, load: Load, rng: random.Random) -> None:
    producers: dict[str, aio.Producer] = {}
    number = 0
    while load.running:
        load.busy += 1
        try:
            txn_name = f"t{number}"
            try:
                for topic in TOPICS:
                    if topic not in producers:
                        producers[topic] = await client.create_producer(
                            topic, producer_name=f"{topic}-txn"
                        )
                txn = await client.new_transaction(timeout_ms=TXN_TIMEOUT_MS)
            except aio.StableLineError:
                producers.clear()
                await asyncio.sleep(0.2)
                continue
            number += 1
            load.last_shard = txn.id[0]
            load.history.transactions[txn_name] = TxnOutcome.OPEN
            all_acked = True
            for topic in TOPICS:
                key = f"tx.{topic.rsplit('-', 1)[1]}"
                payload = f"p{key}:{number}"
                asked_at = time.monotonic()
                try:
                    message_id = await producers[topic].send(payload.encode(), txn=txn)
                except aio.StableLineError:
                    load.history.sends.append(
                        Send(topic, key, number, payload, UNKNOWN, None, txn_name)
                    )
                    producers.pop(topic)
                    all_acked = False
                    break
                load.history.sends.append(
                    Send(topic, key, number, payload, ACKED, str(message_id), txn_name)
                )
                load.acked(topic, asked_at)
            if not all_acked:
                continue  # never ended: it times out, and nothing of it may show
            abort = rng.random() < ABORT_FRACTION
            load.history.transactions[txn_name] = TxnOutcome.UNKNOWN
            asked_at = time.monotonic()
            try:
                await (txn.abort() if abort else txn.commit())
            except aio.StableLineError:
                continue
            load.decided_at.append((asked_at, time.monotonic()))
            load.history.transactions[txn_name] = (
                TxnOutcome.ABORTED if abort else TxnOutcome.COMMITTED
            )
        finally:
            load.busy -= 1


async def consume(client: aio.Client, log: SubscriptionLog, errors: list[str]) -> None:
    """Receive, record and acknowledge; after an error, subscribe again (as an
    application would: the subscription redelivers from its acknowledged position)."""
    level = RC if log.read_committed else RU
    consumer = None
    while True:
        try:
            if consumer is None:
                consumer = await client.subscribe(
                    log.topic, log.name, aio.ConsumerType.Exclusive,
                    aio.InitialPosition.Earliest, level,
                )  # fmt: skip
            messages = await consumer.batch_receive(100, 200)
            payloads = []
            for message in messages:
                payload = message.data().decode()
                log.delivered(payload, str(message.message_id()))
                payloads.append(payload)
            if messages:
                await consumer.acknowledge(list(messages))
                log.ack_confirmed(payloads)
        except aio.StableLineError as error:
            errors.append(f"{log.name}: {type(error).__name__}: {error}")
            if consumer is not None:
                with contextlib.suppress(aio.StableLineError):
                    await consumer.close()
                consumer = None
            await asyncio.sleep(0.2)


async def sample_positions(cluster: FaultCluster, load: Load) -> None:
    """Each topic's maxReadPosition from its owner, as the run goes."""

    def sample() -> None:
        for topic in TOPICS:
            owner = cluster.owner(topic)
            if owner is None:
                continue
            with contextlib.suppress(OSError, ValueError, KeyError):
                position = buffer_stats(owner, topic)["maxReadPosition"]
                load.history.positions[topic].append(position)

    while True:
        await asyncio.to_thread(sample)
        await asyncio.sleep(SAMPLE_EVERY_S)


# ---------------------------------------------------------------- the faults


@dataclass
class Strike:
    """A fault's effect: when it struck, the brokers it took, what brings them back."""

    at: float
    brokers: list[BrokerProcess]
    # (after s, broker, "start" | "cont" | "heal")
    restore: list[tuple[float, BrokerProcess, str]]
    heal: Callable[[], None] | None = None  # undoes a partition's cuts
    cut_from: BrokerProcess | None = None  # the member a partition cut the struck one from


def strike(fault: str, cluster: FaultCluster, owner: BrokerProcess, args) -> Strike:
    at = time.monotonic()
    if fault == "partition":
        # Cut from etcd and from one other member of its ensemble (every topic's is all
        # three), both ways; the client and the third broker still reach it.
        hosts = cluster.hosts
        peer = next(b for b in cluster.alive() if b is not owner)
        hosts.cut(cluster.name(owner), "etcd")
        hosts.cut(cluster.name(owner), cluster.name(peer))
        after_s = args.session_timeout + args.down
        return Strike(at, [owner], [(after_s, owner, "heal")], hosts.heal, peer)
    if fault == "pause":
        owner.signal(signal.SIGSTOP)
        return Strike(at, [owner], [(args.session_timeout + args.down, owner, "cont")])
    struck = [owner]
    if fault == "two-down":
        struck = [b for b in cluster.alive() if b is not owner][:2]
    for broker in struck:
        broker.kill()
    if fault == "lose-disk":
        shutil.rmtree(owner.data_dir, ignore_errors=True)
    restore = [(args.down * (i + 1), broker, "start") for i, broker in enumerate(struck)]
    return Strike(at, struck, restore)


async def restore(strike_: Strike) -> list[str]:
    """Bring back each struck broker on time; the problems met."""
    problems = []
    for after_s, broker, how in strike_.restore:
        await asyncio.sleep(max(0.0, strike_.at + after_s - time.monotonic()))
        if how == "cont":
            broker.signal(signal.SIGCONT)
            continue
        if how == "heal":
            strike_.heal()
            continue
        try:
            await asyncio.to_thread(broker.start)
        except (RuntimeError, OSError) as error:
            problems.append(f"restart failed: {str(error).splitlines()[0]}")
    return problems


async def wait_first_ack(
    load: Load, topic: str, since: float, deadline_s: float, asked_after: float | None = None
) -> float | None:
    """Seconds from `since` to the acknowledgement of the first send on `topic` asked
    for after it (or after `asked_after`); None if none within `deadline_s`. Counting
    only sends asked for after `since` keeps out acknowledgements the struck broker
    sent before it died and the client read after (one send's wait at most is added,
    a producer's pacing)."""
    deadline = since + deadline_s
    asked_after = since if asked_after is None else asked_after
    while time.monotonic() < deadline:
        for asked, acked in load.acked_at.get(topic, [])[-200:]:
            if asked > asked_after:
                return acked - since
        await asyncio.sleep(0.02)
    return None


async def wait_first_decision(load: Load, since: float, deadline_s: float) -> float | None:
    """Seconds from `since` to the answer of the first end (commit or abort) asked for
    after it; None if none within `deadline_s`."""
    deadline = since + deadline_s
    while time.monotonic() < deadline:
        for asked, decided in load.decided_at[-50:]:
            if asked > since:
                return decided - since
        await asyncio.sleep(0.02)
    return None


async def reads_go_on(client: aio.Client, topics: list[str], deadline_s: float) -> list[str]:
    """A new reader of each topic reads its first message within `deadline_s`."""
    problems = []
    for topic in topics:
        try:
            async with asyncio.timeout(deadline_s):
                reader = await client.create_reader(topic, aio.MessageId.earliest, RU)
                try:
                    await reader.read_next(int(deadline_s * 1000))
                finally:
                    await reader.close()
        except (aio.StableLineError, TimeoutError):
            problems.append(f"reads stopped: topic {topic} not read within {deadline_s:g} s")
    return problems


PARTITION_SAMPLE_EVERY_S = 0.1
SESSION_LOST_LINE = "cluster metadata session lost"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a broker that sends us elsewhere answers nothing of its own


_ASK_ONLY = urllib.request.build_opener(_NoRedirect)


def ask(broker: BrokerProcess, path: str):
    """GET `path` from this very broker (no redirect followed), briefly: None when it
    does not answer it itself."""
    try:
        with _ASK_ONLY.open(broker.http_url + path, timeout=2) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return None


def live_brokers(cluster: FaultCluster, among: list[BrokerProcess]) -> set[str] | None:
    """The cluster's registered brokers as the first of `among` to answer sees them."""
    for broker in among:
        found = ask(broker, f"/admin/v2/brokers/{cluster.cluster_name}")
        if isinstance(found, list):
            return set(found)
    return None


def last_confirmed(broker: BrokerProcess, topic: str) -> str | None:
    """The topic's last confirmed entry as `broker` itself has it; None if it has no
    such topic loaded (or does not answer)."""
    found = ask(broker, f"/admin/v2/persistent/public/default/{topic}/stats")
    return found.get("lastConfirmedEntry") if isinstance(found, dict) else None


async def watch_partition(
    cluster: FaultCluster, struck: Strike, owned: list[str], args, fenced: asyncio.Future
) -> tuple[list[str], dict]:
    """What a partition must bring about, checked from the cut until the heal: the cut
    broker's lease lapses (the others stop listing it), it declares its own session
    lost (its log says so), the others name another owner of each of its topics, and,
    once the lease has lapsed and it knows, its last confirmed entry of each topic
    moves no more (it acknowledges nothing); after the heal it is listed again.
    `fenced` gets the moment (monotonic) its log first said its session was lost."""
    victim = struck.brokers[0]
    others = [b for b in cluster.brokers if b is not victim]
    victim_id = f"{victim.host}:{victim.grpc_port}"
    heal_at = struck.at + struck.restore[0][0]
    lapsed_s = fenced_s = None
    moved_s: dict[str, float] = {}
    baseline: dict[str, str | None] = {}
    acked_after: dict[str, tuple[str, str]] = {}
    while time.monotonic() < heal_at:
        elapsed = time.monotonic() - struck.at
        if lapsed_s is None:
            live = await asyncio.to_thread(live_brokers, cluster, others)
            if live is not None and victim_id not in live:
                lapsed_s = round(elapsed, 3)
        if fenced_s is None and SESSION_LOST_LINE in victim.log():
            fenced_s = round(elapsed, 3)
            fenced.set_result(struck.at + elapsed)
        for topic in owned:
            if topic not in moved_s:
                owner = await asyncio.to_thread(cluster.owner, topic, others)
                if owner is not None and owner is not victim:
                    moved_s[topic] = round(elapsed, 3)
        if lapsed_s is not None and fenced_s is not None:
            for topic in owned:
                position = await asyncio.to_thread(last_confirmed, victim, topic)
                if baseline.get(topic) is None:
                    baseline[topic] = position
                elif position is not None and position != baseline[topic]:
                    acked_after.setdefault(topic, (baseline[topic], position))
        await asyncio.sleep(PARTITION_SAMPLE_EVERY_S)
    name = cluster.name(victim)
    violations = []
    if lapsed_s is None:
        violations.append(f"lease kept: {name} still registered while cut off from etcd")
    if fenced_s is None:
        violations.append(f"{name} never declared its session lost while cut off from etcd")
    for topic in owned:
        if topic not in moved_s:
            violations.append(f"topic {topic} still {name}'s while {name} was cut off")
    for topic, (before, after) in acked_after.items():
        violations.append(
            f"{name} acknowledged after losing its lease: topic {topic} last confirmed "
            f"entry {before} -> {after}"
        )
    rejoined_s = None
    deadline = heal_at + args.deadline
    while time.monotonic() < deadline:
        live = await asyncio.to_thread(live_brokers, cluster, others)
        if live is not None and victim_id in live:
            rejoined_s = round(time.monotonic() - heal_at, 3)
            break
        await asyncio.sleep(PARTITION_SAMPLE_EVERY_S)
    if rejoined_s is None:
        violations.append(f"{name} not registered again within {args.deadline:g} s of the heal")
    return violations, {
        "cut_from": f"etcd+{cluster.name(struck.cut_from)}",
        "lease_lapsed_s": lapsed_s,
        "fenced_s": fenced_s,
        "moved_s": max(moved_s.values()) if moved_s else None,
        "rejoined_s": rejoined_s,
    }


async def run_cycle(
    client: aio.Client, cluster: FaultCluster, load: Load, args, number: int
) -> dict:
    await asyncio.sleep(args.interval)
    topic = TOPICS[number % len(TOPICS)]
    if args.fault == "kill-coordinator":
        victim = await asyncio.to_thread(cluster.shard_leader, load.last_shard)
    else:
        victim = await asyncio.to_thread(cluster.owner, topic)
    violations: list[str] = []
    if victim is None:
        return {"cycle": number, "fault": args.fault, "topic": topic, "struck": "-", "owned": "",
                "unavailable_s": None, "decided_s": None, "acked": load.sent(),
                "delivered": load.delivered(), "unavailability": [], "decisions": [],
                "violations": [f"no owner found for {topic}"]}  # fmt: skip
    others = [b for b in cluster.alive() if b is not victim]
    owned = [t for t in TOPICS if await asyncio.to_thread(cluster.owner, t, others) is victim]
    if topic not in owned and args.fault != "kill-coordinator":
        owned.insert(0, topic)
    struck = strike(args.fault, cluster, victim, args)
    struck_names = "+".join(cluster.name(b) for b in struck.brokers)
    restoring = asyncio.create_task(restore(struck))
    watching = None
    asked_after = None
    if args.fault == "partition":
        fenced = asyncio.get_running_loop().create_future()
        watching = asyncio.create_task(watch_partition(cluster, struck, owned, args, fenced))
        # Until it knows its session lost, the cut broker still serves (its lease
        # holds): the unavailability counts from the cut to the first send asked for
        # after that and acknowledged, by another.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.deadline):
                asked_after = await asyncio.shield(fenced)
    unavailability: list[float] = []
    if args.fault == "two-down":
        first_back = struck.at + struck.restore[0][0]
        violations += await reads_go_on(client, owned, args.deadline)
        await asyncio.sleep(max(0.0, first_back - time.monotonic()))
        refused_window_end = time.monotonic()
        acked_meanwhile = load.acks_between(struck.at, refused_window_end)
        if acked_meanwhile:
            violations.append(
                f"{acked_meanwhile} sends acknowledged with {len(struck.brokers)} of "
                f"{BROKERS} brokers down"
            )
        since, what = refused_window_end, "the first restart"
    else:
        since, what = struck.at, f"the {args.fault}"
    decisions: list[float] = []
    if args.fault == "kill-coordinator":
        decided = await wait_first_decision(load, since, args.deadline)
        if decided is None:
            violations.append(f"no transaction decided within {args.deadline:g} s after {what}")
        else:
            decisions.append(round(decided, 3))
    for each in owned:
        waited = await wait_first_ack(load, each, since, args.deadline, asked_after)
        if waited is None:
            violations.append(
                f"unavailable: topic {each} not served within {args.deadline:g} s after {what}"
            )
        else:
            unavailability.append(round(waited, 3))
    violations += await restoring
    partition: dict = {}
    if watching is not None:
        found, partition = await watching
        violations += found
    # Back to three brokers serving every topic before the next fault.
    back = time.monotonic()
    for each in TOPICS:
        if await wait_first_ack(load, each, back, SERVED_AGAIN_TIMEOUT_S) is None:
            violations.append(f"topic {each} not served {SERVED_AGAIN_TIMEOUT_S:g} s after restore")
    return {
        "cycle": number,
        "fault": args.fault,
        "topic": topic,
        "struck": struck_names,
        "owned": ",".join(t.rsplit("-", 1)[1] for t in owned),
        "unavailable_s": max(unavailability) if unavailability else None,
        "decided_s": decisions[0] if decisions else None,
        "acked": load.sent(),
        "delivered": load.delivered(),
        "unavailability": unavailability,
        "decisions": decisions,
        "partition": partition,
        "violations": violations,
    }


async def read_back(client: aio.Client) -> list[SubscriptionLog]:
    """Every topic read from its first message at both isolation levels."""
    logs = []
    for topic in TOPICS:
        for level, name in ((RC, "rc"), (RU, "ru")):
            log = SubscriptionLog(f"read-back-{name}-{topic}", topic, level is RC, exclusive=True)
            reader = await client.create_reader(topic, aio.MessageId.earliest, level)
            try:
                while await reader.has_message_available():
                    message = await reader.read_next(10_000)
                    log.delivered(message.data().decode(), str(message.message_id()))
            finally:
                await reader.close()
            logs.append(log)
    return logs


# ---------------------------------------------------------------- the run


def expected(log: SubscriptionLog, history: History) -> set[str]:
    """What a subscription must deliver once the load has stopped and settled."""
    payloads = set()
    for send in history.sends:
        if send.topic != log.topic or send.outcome != ACKED:
            continue
        committed = history.transactions.get(send.txn) is TxnOutcome.COMMITTED
        if send.txn is None or not log.read_committed or committed:
            payloads.add(send.payload)
    return payloads


async def drive(cluster: FaultCluster, args) -> tuple[list[dict], Load, list[str]]:
    load = Load()
    logs = [
        SubscriptionLog(f"{level}-{topic}", topic, read_committed=level == "rc", exclusive=True)
        for topic in TOPICS
        for level in ("rc", "ru")
    ]
    load.history.subscriptions += logs
    rng = random.Random(args.seed)
    async with aio.Client(
        cluster.service_url, operation_timeout_seconds=args.operation_timeout
    ) as client:
        for topic in TOPICS:
            # A subscription that acknowledges nothing keeps every ledger from retention
            # (the others acknowledge all), so the read back at the end finds them all.
            holder = await client.subscribe(
                topic, "read-back-hold", initial_position=aio.InitialPosition.Earliest
            )
            await holder.close()
        consumers = [
            asyncio.create_task(consume(client, log, load.consumer_errors)) for log in logs
        ]
        producers = [
            asyncio.create_task(plain_producer(client, load, topic, n, args.rate))
            for topic in TOPICS
            for n in range(args.producers)
        ]
        producers.append(asyncio.create_task(txn_producer(client, load, rng)))
        sampler = asyncio.create_task(sample_positions(cluster, load))
        problems: list[str] = []
        try:
            print("| " + " | ".join(COLUMNS) + " | violations |")
            print("|" + "---|" * (len(COLUMNS) + 1), flush=True)
            rows = []
            for number in range(args.cycles):
                row = await run_cycle(client, cluster, load, args, number)
                rows.append(row)
                cells = [str(row[column]) for column in COLUMNS]
                print(f"| {' | '.join(cells)} | {'; '.join(row['violations']) or 0} |", flush=True)
                if row["partition"]:
                    print(f"  partition: {row['partition']}", flush=True)
            load.running = False
            await asyncio.gather(*producers, return_exceptions=True)
            # Transactions left open time out; then every subscription catches up.
            await asyncio.sleep(TXN_TIMEOUT_MS / 1000)
            deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
            while time.monotonic() < deadline and any(
                expected(log, load.history) - {e.payload for e in log.events} for log in logs
            ):
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # whatever should not arrive has had its chance
            # What a subscription delivered may since have been lost from the store:
            # fresh readers read every topic back from its start.
            for log in await read_back(client):
                load.history.subscriptions.append(log)
        except TimeoutError as error:
            problems.append(str(error))
        finally:
            load.running = False
            for task in (*consumers, *producers, sampler):
                task.cancel()
            await asyncio.gather(*consumers, *producers, sampler, return_exceptions=True)
    return rows, load, problems


def main() -> int:
    args = kill_cycle.parse_args(__doc__, options)
    binary = find_etcd()
    if binary is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    hosts = None
    if args.fault == "partition":
        try:
            hosts = open_hosts(["etcd", *(f"b{i}" for i in range(BROKERS))])
        except HostsUnavailable as error:
            print(f"failover: --fault partition cannot run here: {error}", file=sys.stderr)
            return 2
    try:
        return run(binary, args, hosts)
    finally:
        if hosts is not None:
            hosts.remove()


def run(binary: str, args, hosts: Hosts | None) -> int:
    (REPO / "bench-results").mkdir(exist_ok=True)  # git-ignored; absent in a fresh clone
    directory = Path(tempfile.mkdtemp(prefix="failover-", dir=REPO / "bench-results"))
    if hosts is None:
        etcd = EtcdProcess(binary, directory / "etcd")
    else:
        etcd = EtcdProcess(
            binary, directory / "etcd", host=hosts["etcd"].address,
            command_prefix=hosts["etcd"].command_prefix,
        )  # fmt: skip
    cluster_name = f"failover-{os.getpid()}"
    brokers = cluster_brokers(etcd.url, cluster_name, directory, BROKERS, args.session_timeout)
    if hosts is not None:
        for i, broker in enumerate(brokers):
            broker.host = hosts[f"b{i}"].address
            broker.command_prefix = hosts[f"b{i}"].command_prefix
    cluster = FaultCluster(etcd, brokers, cluster_name, hosts)
    print(
        f"failover: --fault {args.fault}, {args.cycles} cycles every {args.interval:g} s, "
        f"down {args.down:g} s, session {args.session_timeout:g} s, data in {directory}",
        flush=True,
    )
    try:
        etcd.start()
        for broker in cluster.brokers:  # one after another, as the cluster tests do
            broker.start()
        print(f"cluster up: {cluster.service_url}", flush=True)
        rows, load, problems = asyncio.run(drive(cluster, args))
    finally:
        for broker in cluster.brokers:
            with contextlib.suppress(Exception):
                if broker.process is not None and broker.process.poll() is None:
                    broker.signal(signal.SIGCONT)  # a paused broker cannot stop
                broker.stop()
        etcd.stop()
    found = checker.check(load.history)
    counts = checker.summary(found)
    waits = [w for row in rows for w in row["unavailability"]]
    decisions = [d for row in rows for d in row["decisions"]]
    figures = {
        "failovers": len(waits),
        "unserved": sum(v.startswith("unavailable:") for row in rows for v in row["violations"]),
        "unavailable_p50_s": percentile(waits, 0.5),
        "unavailable_p99_s": percentile(waits, 0.99),
        "unavailable_max_s": max(waits) if waits else None,
        "decided_p50_s": percentile(decisions, 0.5),
        "decided_p99_s": percentile(decisions, 0.99),
        "sends_acked": load.sent(),
        "sends_unknown": sum(s.outcome == UNKNOWN for s in load.history.sends),
        "transactions": {
            outcome.value: sum(o is outcome for o in load.history.transactions.values())
            for outcome in TxnOutcome
        },
        "deliveries": load.delivered(),
        "consumer_errors": load.consumer_errors[:20],
        "position_samples": sum(len(s) for s in load.history.positions.values()),
    }
    print()
    print("| unavailability per failover | p50 s | p99 s | max s | failovers | not served |")
    print("|---|---|---|---|---|---|")
    print(
        f"| fault to first acked send | {figures['unavailable_p50_s']} | "
        f"{figures['unavailable_p99_s']} | {figures['unavailable_max_s']} | {len(waits)} | "
        f"{figures['unserved']} |"
    )
    if decisions:
        print(
            f"| kill to first decided transaction | {figures['decided_p50_s']} | "
            f"{figures['decided_p99_s']} | {max(decisions)} | {len(decisions)} | - |"
        )
    print()
    print("| checker | count |")
    print("|---|---|")
    for kind, count in counts.items():
        print(f"| {kind} | {count} |")
    for kind in checker.KINDS:  # the first few of each kind
        for violation in [v for v in found if v.kind == kind][:3]:
            print(f"  {violation}")
    print(
        f"totals: {figures['sends_acked']} sends acknowledged, {figures['sends_unknown']} "
        f"unknown, transactions {figures['transactions']}, {figures['deliveries']} deliveries"
    )
    cycle_violations = [v for row in rows for v in row["violations"]]
    all_violations = cycle_violations + problems + [str(v) for v in found]
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rows": rows, "figures": figures, "checker": counts, "violations": all_violations},
                indent=2,
            )
        )
    print(f"{len(rows)} cycles, {len(all_violations)} violations")
    if all_violations:
        print(f"data and logs kept in {directory}")
        return 1
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except urllib.error.URLError as error:  # an admin call after every retry
        print(f"failover: {error}", file=sys.stderr)
        sys.exit(1)
