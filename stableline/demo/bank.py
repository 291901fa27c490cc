"""PIP-298's bank, end to end: why each subscription chooses its isolation level.

Requests go into one topic: deposits and withdrawals as plain messages,
transfers as transactions that debit one account and credit another. Most
transfers commit; some abort after both legs; some abort after the debit alone
(the transfer service failed midway). Two readers watch the topic:
- a monitor subscription at READ_UNCOMMITTED shows activity as it happens,
  in-flight and failed transfers included;
- a Spark structured-streaming job at READ_COMMITTED keeps each account's
  balance and writes the balances, transactionally, to a balances topic.
At the end both totals are printed: the committed one must equal deposits
minus withdrawals exactly; the monitor's is off by the money of the transfers
that failed midway, which it saw and the bank never booked.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import stableline

RU = stableline.IsolationLevel.READ_UNCOMMITTED
EARLIEST = stableline.InitialPosition.Earliest
PROGRESS_INTERVAL_S = 1.0
SETTLE_TIMEOUT_S = 120.0


@dataclass
class Ledger:
    """What the request generator did, for the final check."""

    deposits: int = 0
    withdrawals: int = 0
    transfers_committed: int = 0
    transfers_aborted: int = 0
    transfers_failed_midway: int = 0
    lost_midway: int = 0  # debits of failed transfers: seen uncommitted, never booked
    requests: int = 0
    messages: int = 0  # every message written, aborted ones included


@dataclass
class Monitor:
    """The READ_UNCOMMITTED view: every request the moment it is durable."""

    seen: int = 0
    total: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)


def _request(account: str, amount: int, kind: str) -> bytes:
    return json.dumps({"account": account, "amount": amount, "kind": kind}).encode()


def generate(client, topic: str, count: int, accounts: int, seed: int, ledger: Ledger) -> None:
    rng = random.Random(seed)
    names = [f"acct-{i:02d}" for i in range(accounts)]
    producer = client.create_producer(topic)
    for _ in range(count):
        roll = rng.random()
        amount = rng.randint(1, 100)
        if roll < 0.4:
            producer.send(_request(rng.choice(names), amount, "deposit"))
            ledger.deposits += amount
            ledger.messages += 1
        elif roll < 0.6:
            producer.send(_request(rng.choice(names), -amount, "withdrawal"))
            ledger.withdrawals += amount
            ledger.messages += 1
        else:
            source, target = rng.sample(names, 2)
            txn = client.new_transaction(timeout_ms=30_000)
            producer.send(_request(source, -amount, "transfer-debit"), txn=txn)
            ledger.messages += 1
            outcome = rng.random()
            if outcome < 0.1:  # the transfer service failed between the legs
                txn.abort()
                ledger.transfers_failed_midway += 1
                ledger.lost_midway += amount
            else:
                producer.send(_request(target, amount, "transfer-credit"), txn=txn)
                ledger.messages += 1
                if outcome < 0.2:
                    txn.abort()
                    ledger.transfers_aborted += 1
                else:
                    txn.commit()
                    ledger.transfers_committed += 1
        ledger.requests += 1
    producer.close()


def watch(client, topic: str, monitor: Monitor, stop: threading.Event) -> None:
    consumer = client.subscribe(topic, "monitor", initial_position=EARLIEST, isolation_level=RU)
    while not stop.is_set():
        messages = consumer.batch_receive(max_num_messages=500, timeout_millis=200)
        with monitor.changed:
            for message in messages:
                monitor.seen += 1
                monitor.total += json.loads(message.data())["amount"]
            monitor.changed.notify_all()
        if messages:
            consumer.acknowledge(messages)
    consumer.close()


def start_balances_job(spark, service: str, requests: str, balances: str, checkpoint: str):
    """READ_COMMITTED requests -> balance per account, written transactionally."""
    from pyspark.sql import functions as F

    def write_balances(batch, _batch_id: int) -> None:
        if batch.isEmpty():
            return
        (
            batch.select(
                F.col("account").alias("key"), F.col("balance").cast("string").alias("value")
            )
            .write.format("stableline")
            .option("service", service)
            .option("topic", balances)
            .mode("append")
            .save()
        )

    schema = "account string, amount long, kind string"
    return (
        spark.readStream.format("stableline")
        .option("service", service)
        .option("topic", requests)
        .option("startingPositions", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("r"))
        .groupBy("r.account")
        .agg(F.sum("r.amount").alias("balance"))
        .writeStream.outputMode("update")
        .foreachBatch(write_balances)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )


def committed_balances(client, topic: str) -> dict[str, int]:
    """The latest balance of each account in the balances topic (READ_COMMITTED)."""
    reader = client.create_reader(topic, stableline.MessageId.earliest)
    balances: dict[str, int] = {}
    while reader.has_message_available():
        message = reader.read_next(5000)
        balances[message.partition_key()] = int(message.data())
    reader.close()
    return balances


def run(service: str | None, count: int, accounts: int, seed: int, out=print) -> bool:
    """The whole demo; True when the committed total equals deposits - withdrawals."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bank-demo-")))
        # Spark starts first, while this process has no gRPC threads: its JVM is
        # forked from here and exits when its stdin closes, and a fork while gRPC's
        # threads close and reuse descriptors once cost it that pipe ("Java gateway
        # process exited before sending its port number").
        out("starting Spark (local[2]); the balances job reads READ_COMMITTED")
        from stableline.spark import local_session

        spark = local_session(
            app_name="stableline-bank-demo", **{"spark.sql.shuffle.partitions": "2"}
        )
        stack.callback(spark.stop)
        if service is None:
            from stableline.local_cluster.broker_process import temporary_broker

            broker = stack.enter_context(temporary_broker(work, "broker-"))
            service = broker.service_url
            out(f"started a broker on {service}")
        run_id = uuid.uuid4().hex[:6]
        requests, balances = f"bank-requests-{run_id}", f"bank-balances-{run_id}"
        client = stack.enter_context(stableline.Client(service))
        query = start_balances_job(spark, service, requests, balances, str(work / "checkpoint"))
        stack.callback(query.stop)

        ledger, monitor, stop = Ledger(), Monitor(), threading.Event()
        watcher = threading.Thread(target=watch, args=(client, requests, monitor, stop))
        generator = threading.Thread(
            target=generate, args=(client, requests, count, accounts, seed, ledger)
        )
        generator.start()
        watcher.start()
        started = time.monotonic()
        while generator.is_alive():
            generator.join(PROGRESS_INTERVAL_S)
            with monitor.changed:
                seen, total = monitor.seen, monitor.total
            out(
                f"[{time.monotonic() - started:5.1f}s] requests sent {ledger.requests:>5}/{count}"
                f"  |  monitor (READ_UNCOMMITTED): {seen:>5} seen, total {total:>7}"
            )
        expected = ledger.deposits - ledger.withdrawals
        out("requests done; waiting for the balances job to book everything committed")
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        booked = committed_balances(client, balances)
        while sum(booked.values()) != expected and time.monotonic() < deadline:
            query.processAllAvailable()
            booked = committed_balances(client, balances)
        with monitor.changed:  # the monitor drains its last deliveries
            monitor.changed.wait_for(
                lambda: monitor.seen >= ledger.messages, max(deadline - time.monotonic(), 0)
            )
        stop.set()
        watcher.join()

        committed_total = sum(booked.values())
        out("")
        out("| view | total money |")
        out("|---|---:|")
        out(f"| deposits - withdrawals | {expected:,} |")
        out(f"| balances job (READ_COMMITTED) | {committed_total:,} |")
        out(f"| monitor (READ_UNCOMMITTED) | {monitor.total:,} |")
        out("")
        out(
            f"{ledger.requests} requests: {ledger.transfers_committed} transfers committed, "
            f"{ledger.transfers_aborted} aborted, {ledger.transfers_failed_midway} failed "
            f"midway (their {ledger.lost_midway:,} debited was seen by the monitor and "
            "never booked)"
        )
        ok = committed_total == expected
        out("committed total equals deposits - withdrawals: " + ("yes" if ok else "NO"))
        return ok
