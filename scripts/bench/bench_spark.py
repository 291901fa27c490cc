"""Spark batch read of a topic: READ_COMMITTED against READ_UNCOMMITTED, same run.

A broker process (temporary data dir) gets `--messages` 100-byte messages
(default 1,000,000) in committed transactions of 10,000 (client batches of 1,000), so both isolation
levels return the same rows; a local[2] SparkSession then reads the topic with
each level, alternating, and forces every value to be read (the sum of their
lengths). Reported: rows/s per level, and RC/RU. Goals: RC >= 500,000 rows/s,
RC/RU >= 0.9.

    python scripts/bench/bench_spark.py [--messages N] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import stableline
from stableline.spark import local_session
from stableline.testing import temporary_broker

REPO = Path(__file__).resolve().parents[2]
TOPIC = "spark-bench"
MESSAGE = b"m" * 100
TXN_MESSAGES = 10_000
BATCH_MESSAGES = 1000
GOAL_ROWS_PER_S = 500_000
GOAL_RATIO = 0.9
_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def fill(service_url: str, messages: int) -> None:
    with stableline.Client(service_url) as client:
        producer = client.create_producer(
            TOPIC, batching_max_messages=BATCH_MESSAGES, batching_max_publish_delay_ms=100
        )
        for done in range(0, messages, TXN_MESSAGES):
            txn = client.new_transaction()
            for _ in range(min(TXN_MESSAGES, messages - done)):
                producer.send_async(MESSAGE, lambda error, _id: None, txn=txn)
            txn.commit()
            if done % (messages // 5) == 0:
                progress(f"fill: {done:,} / {messages:,} messages")
        producer.flush()


def read_once(spark, broker, level: str) -> tuple[float, int, float]:
    """(seconds, rows, broker CPU seconds) of one read."""
    service_url = broker.service_url
    df = (
        spark.read.format("stableline")
        .option("service", service_url)
        .option("topic", TOPIC)
        .option("isolationLevel", level)
        .load()
    )
    started, broker_cpu = time.perf_counter(), broker.cpu_seconds()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    elapsed = time.perf_counter() - started
    assert row.bytes == row.n * len(MESSAGE), row
    return elapsed, row.n, broker.cpu_seconds() - broker_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with temporary_broker(REPO / "bench-results", "bench-spark-") as broker:
        fill(broker.service_url, args.messages)
        progress("starting Spark (local[2])")
        spark = local_session(app_name="stableline-bench")
        for level in ("read_uncommitted", "read_committed"):  # warm-up: JIT, Python workers
            read_once(spark, broker, level)
        results: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
        for round_ in range(args.rounds):
            for level in ("read_committed", "read_uncommitted")[:: 1 if round_ % 2 == 0 else -1]:
                elapsed, rows, broker_cpu = read_once(spark, broker, level)
                assert rows == args.messages, (level, rows)
                results[level].append(rows / elapsed)
                progress(
                    f"round {round_ + 1}: {level}: {rows:,} rows in {elapsed:.2f} s "
                    f"(broker CPU {broker_cpu / rows * 1e6:.2f} us/row)"
                )
        spark.stop()
    rc = sum(results["read_committed"]) / len(results["read_committed"])
    ru = sum(results["read_uncommitted"]) / len(results["read_uncommitted"])
    ratio = rc / ru
    print("\n| read | rows/s |\n|---|---:|")
    print(f"| read_committed | {rc:,.0f} |\n| read_uncommitted | {ru:,.0f} |")
    met = rc >= GOAL_ROWS_PER_S and ratio >= GOAL_RATIO
    print(
        f"\nRC/RU {ratio:.3f}; goals RC >= {GOAL_ROWS_PER_S:,} rows/s and RC/RU >= "
        f"{GOAL_RATIO}: {'met' if met else 'NOT met'}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rc_rows_per_s": rc, "ru_rows_per_s": ru, "ratio": ratio, "met": met})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
