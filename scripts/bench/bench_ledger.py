"""Managed-ledger append with fsync group commit against a raw write + fdatasync baseline.

Two workloads, each measured twice in the same run, on the same filesystem (a
temporary directory under the current directory, removed afterwards):

- group commit: many concurrent appenders (asyncio tasks, `--appenders`) each
  awaiting `ManagedLedger.append` of a 100-byte payload in a loop for `--seconds`;
  the ledger (default config: fsync on, rollover, entry cache) batches whatever
  is queued into one pwrite + fdatasync. Every batch it made durable is recorded
  (an entry listener sees each batch once). The raw baseline then replays exactly
  that sequence of batch sizes on a fresh file: `os.write` of the same frame bytes
  (CRC frame + entry header + payload) then `os.fdatasync`, one per batch.
- one by one: a single appender awaiting each append before the next (one entry
  per fdatasync) for `--seconds`, against raw `os.write` + `os.fdatasync` of one
  frame at a time, as many times as the ledger managed.

Reported per side: appends/s, MB/s (payload bytes, 10^6 bytes per MB), fsyncs/s
(group-commit fdatasyncs; the ledger's rollover fsyncs are not counted but their
time is), mean entries per fsync, CPU microseconds per append (all threads), and
the ratio ledger/raw of appends/s. The goal
printed is a group-commit ratio >= 0.7. Progress goes to stderr once a second,
the markdown table to stdout. With the default 5 s it takes about 20 s.

    python scripts/bench/bench_ledger.py [--seconds S] [--appenders N] [--payload-size B] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from managed_ledger import EntryHeader, LocalStore, ManagedLedger, ManagedLedgerConfig
from managed_ledger.framing import encode_frame

PAYLOAD_SIZE = 100
GOAL_RATIO = 0.7
DEFAULT_APPENDERS = 256
# The raw replay stops here even if it has not replayed every batch (it never
# needs to: raw is the faster side); keeps the whole run under a minute.
RAW_TIME_LIMIT_FACTOR = 2.0
PROGRESS_INTERVAL_S = 1.0

PAYLOAD = b"p" * PAYLOAD_SIZE
HEADER = EntryHeader(publish_time_ms=1_700_000_000_000, producer_name="bench", sequence_id=0)
FRAME = encode_frame(HEADER.encode(), PAYLOAD)

_STARTED = time.perf_counter()


def set_payload_size(size: int) -> None:
    """Payload of every append: 100 B (one small message per entry) by default, or a
    producer batch's size (1,000 x 100 B messages make a ~100 KB entry)."""
    global PAYLOAD_SIZE, PAYLOAD, FRAME
    PAYLOAD_SIZE = size
    PAYLOAD = b"p" * size
    FRAME = encode_frame(HEADER.encode(), PAYLOAD)


def progress(message: str) -> None:
    """A progress line on stderr (stdout keeps the table), stamped with the elapsed time."""
    print(f"[{time.perf_counter() - _STARTED:5.1f}s] {message}", file=sys.stderr, flush=True)


def figures(entries: int, fsyncs: int, seconds: float, cpu_s: float) -> dict:
    """Rates over `seconds`; CPU (every thread of the process) per append, which shows
    what the ledger side spends beyond the write and the fdatasync."""
    rate = entries / seconds if seconds > 0 else 0.0
    return {
        "appends": entries,
        "fsyncs": fsyncs,
        "seconds": round(seconds, 3),
        "appends_per_s": round(rate),
        "mb_per_s": round(rate * PAYLOAD_SIZE / 1e6, 3),
        "fsyncs_per_s": round(fsyncs / seconds, 1) if seconds > 0 else 0.0,
        "entries_per_fsync": round(entries / fsyncs, 2) if fsyncs else 0.0,
        "cpu_percent": round(100 * cpu_s / seconds) if seconds > 0 else 0,
        "cpu_us_per_append": round(1e6 * cpu_s / entries, 2) if entries else 0.0,
    }


# ---------------------------------------------------------------- the ledger side


async def run_ledger(
    directory: Path, label: str, appenders: int, seconds: float
) -> tuple[dict, list[int]]:
    """`appenders` tasks append in a loop for `seconds`; figures and the batch sizes."""
    store = LocalStore(directory / "metadata")
    ledger = await ManagedLedger.open(
        "bench", directory / "ledger", store, ManagedLedgerConfig(fsync=True)
    )
    batches: list[int] = []
    ledger.add_entry_listener(lambda entries: batches.append(len(entries)))
    acknowledged = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds

    async def appender() -> None:
        nonlocal acknowledged
        while time.perf_counter() < deadline:
            await ledger.append(HEADER, PAYLOAD)
            acknowledged += 1

    async def report() -> None:
        last_t, last_n, last_b = started, 0, 0
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            t, n, b = time.perf_counter(), acknowledged, len(batches)
            progress(
                f"[{label}] ledger {t - started:4.1f}s  appends {n:>10,}  "
                f"{(n - last_n) / (t - last_t):>9,.0f}/s  fsyncs {(b - last_b) / (t - last_t):>7,.0f}/s"
                f"  entries/fsync {(n - last_n) / max(b - last_b, 1):6.1f}"
            )
            last_t, last_n, last_b = t, n, b

    reporter = asyncio.create_task(report())
    try:
        await asyncio.gather(*(appender() for _ in range(appenders)))
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
    finally:
        reporter.cancel()
        await ledger.close()
        store.close()
    if sum(batches) != acknowledged:
        raise RuntimeError(
            f"{label}: {acknowledged:,} appends acknowledged, batches hold {sum(batches):,}"
        )
    return figures(acknowledged, len(batches), elapsed, cpu), batches


# ---------------------------------------------------------------- the raw side


def run_raw(directory: Path, label: str, batches: list[int], time_limit_s: float) -> dict:
    """os.write + os.fdatasync of the same frames, one call pair per batch, in order."""
    if not batches:
        raise RuntimeError(f"{label}: the ledger made no batch durable; nothing to replay")
    largest = max(batches)
    buffer = memoryview(FRAME * largest)  # built before the clock starts
    path = directory / "raw.log"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    entries = fsyncs = 0
    try:
        cpu = time.process_time()
        started = time.perf_counter()
        deadline = started + time_limit_s
        next_report = started + PROGRESS_INTERVAL_S
        last_t, last_n, last_f = started, 0, 0
        for count in batches:
            data = buffer[: count * len(FRAME)]
            written = os.write(fd, data)
            if written != len(data):
                raise RuntimeError(f"{label}: short write {written} of {len(data)}")
            os.fdatasync(fd)
            entries += count
            fsyncs += 1
            now = time.perf_counter()
            if now >= next_report:
                progress(
                    f"[{label}] raw    {now - started:4.1f}s  appends {entries:>10,}  "
                    f"{(entries - last_n) / (now - last_t):>9,.0f}/s  "
                    f"fsyncs {(fsyncs - last_f) / (now - last_t):>7,.0f}/s"
                )
                last_t, last_n, last_f = now, entries, fsyncs
                next_report = now + PROGRESS_INTERVAL_S
            if now >= deadline:
                progress(
                    f"[{label}] raw: time limit reached after {fsyncs:,} of {len(batches):,} batches"
                )
                break
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu
    finally:
        os.close(fd)
        path.unlink()
    return figures(entries, fsyncs, elapsed, cpu)


# ---------------------------------------------------------------- the workloads


def compare(root: Path, key: str, label: str, appenders: int, seconds: float) -> dict:
    directory = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=root))
    progress(f"[{label}] ledger: {appenders} appender(s) for {seconds:g} s, fsync on")
    ledger, batches = asyncio.run(run_ledger(directory, label, appenders, seconds))
    progress(
        f"[{label}] raw: replaying {len(batches):,} batches "
        f"({ledger['appends']:,} frames of {len(FRAME)} bytes) as os.write + os.fdatasync"
    )
    raw = run_raw(directory, label, batches, RAW_TIME_LIMIT_FACTOR * seconds)
    ratio = ledger["appends_per_s"] / raw["appends_per_s"] if raw["appends_per_s"] else 0.0
    return {
        "label": label,
        "appenders": appenders,
        "ledger": ledger,
        "raw": raw,
        "ratio": round(ratio, 3),
    }


def print_table(rows: dict[str, dict]) -> None:
    print()
    print(
        "| workload | side | appends/s | MB/s | fsyncs/s | entries/fsync "
        "| CPU us/append | ledger/raw |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows.values():
        for side, name in (("ledger", "managed ledger"), ("raw", "raw write+fdatasync")):
            f = row[side]
            ratio = f"{row['ratio']:.3f}" if side == "ledger" else ""
            print(
                f"| {row['label']} | {name} | {f['appends_per_s']:,} | {f['mb_per_s']:.2f} | "
                f"{f['fsyncs_per_s']:,.0f} | {f['entries_per_fsync']:.1f} | "
                f"{f['cpu_us_per_append']:.2f} | {ratio} |"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="ledger run length per workload (max 12)"
    )
    parser.add_argument(
        "--appenders",
        type=int,
        default=DEFAULT_APPENDERS,
        help="concurrent appenders of the group-commit workload",
    )
    parser.add_argument(
        "--payload-size", type=int, default=PAYLOAD_SIZE, help="bytes per appended entry"
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    if args.payload_size < 1:
        parser.error("--payload-size must be >= 1")
    set_payload_size(args.payload_size)
    if not 0 < args.seconds <= 12 or args.appenders < 2:
        parser.error(
            "--seconds must be in (0, 12] (the run stays under a minute), --appenders >= 2"
        )
    cwd = Path.cwd()
    print(
        f"bench_ledger: {PAYLOAD_SIZE}-byte payloads ({len(FRAME)}-byte frames), fsync on, "
        f"{args.seconds:g} s per ledger run; Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, files under {cwd}",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="bench-ledger-", dir=cwd))
    rows: dict[str, dict] = {}
    try:
        rows["group_commit"] = compare(
            root, "group", f"group commit, {args.appenders} appenders", args.appenders, args.seconds
        )
        rows["one_by_one"] = compare(root, "single", "one by one, awaited", 1, args.seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(rows)
    ratio = rows["group_commit"]["ratio"]
    met = ratio >= GOAL_RATIO
    print(
        f"goal: group-commit ledger/raw >= {GOAL_RATIO}: {'met' if met else 'NOT met'} "
        f"({ratio:.3f}); one by one: {rows['one_by_one']['ratio']:.3f}"
    )
    print(f"total {time.perf_counter() - _STARTED:.1f} s")
    if args.json is not None:
        report = {
            "payload_size": PAYLOAD_SIZE,
            "frame_size": len(FRAME),
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "directory": str(cwd),
            "args": {"seconds": args.seconds, "appenders": args.appenders},
            "workloads": rows,
            "goal_ratio": GOAL_RATIO,
            "goal_met": met,
            "total_seconds": round(time.perf_counter() - _STARTED, 1),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
