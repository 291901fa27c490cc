"""`stableline perf produce|consume|txn|e2e`: the options, mapped onto a Workload.

Progress goes to stdout once a second; the summary follows; `--json FILE` writes
the summary as JSON. The exit code is 1 when a consistency check failed (a
READ_COMMITTED subscription saw an aborted or not yet committed message, a
message went missing, or the drain timed out). Ctrl-C stops the run: the summary
of what was done so far is printed, and the exit code is 130.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from stableline.perf.workload import ISOLATION_CHOICES

# What a shell reports for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT_CODE = 130

_common = [
    click.argument("topic", default="perf"),
    click.option("--service-url", default="127.0.0.1:6650", show_default=True),
    click.option("--topics", default=1, show_default=True, help="Topics: TOPIC-0..TOPIC-(n-1)."),
    click.option(
        "-d", "--duration", "duration_s", default=10.0, show_default=True,
        help="Seconds of producing (consume: of consuming); 0 = no limit.",
    ),
    click.option(
        "-n", "--messages", default=0, show_default=True, type=click.IntRange(0),
        help="Messages in all (consume: to receive); 0 = no limit.",
    ),
    click.option("-s", "--size", "message_size", default=100, show_default=True, help="Bytes per message."),
    click.option(
        "--processes", default=1, show_default=True,
        help="Worker processes for the producers, and as many for the consumers.",
    ),
    click.option(
        "--warmup", "warmup_s", default=1.0, show_default=True,
        help="Seconds at the start whose latencies are not recorded (rates are).",
    ),
    click.option("--interval", "interval_s", default=1.0, show_default=True, help="Progress every N s."),
    click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the summary here."),
    click.option("--broker-pid", type=int, help="A local broker's pid: report its CPU per message."),
    click.option(
        "--token", envvar="STABLELINE_TOKEN", default=None,
        help="Authentication token (see `stableline tokens create`).",
    ),
    click.option(
        "--tls-trust-certs-file", envvar="STABLELINE_TLS_TRUST_CERTS_FILE", default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="CA certificate of a TLS broker (turns TLS on).",
    ),
]  # fmt: skip

_producing = [
    click.option("-r", "--rate", default=0.0, show_default=True, help="Msgs/s in all; 0 = max."),
    click.option("--producers", default=1, show_default=True, help="Producers per topic."),
    click.option("--batch-max-messages", default=1000, show_default=True),
    click.option("--batch-delay-ms", default=1.0, show_default=True),
    click.option("--txn-size", default=0, show_default=True, help="Messages per transaction."),
    click.option(
        "--commit-interval-ms", default=0.0, show_default=True,
        help="End a transaction after this long.",
    ),
    click.option(
        "--open-txns", default=1, show_default=True,
        help="Transactions each producer keeps open, written in turn.",
    ),
    click.option("--abort-ratio", default=0.0, show_default=True, help="Fraction of transactions aborted."),
    click.option(
        "--max-lag", default=200_000, show_default=True,
        help="Producers wait while consumers are this many messages behind (0 = never).",
    ),
]  # fmt: skip

_consuming = [
    click.option("--subscriptions", default=1, show_default=True, help="Subscriptions per topic."),
    click.option("--consumers", default=1, show_default=True, help="Consumers per subscription."),
    click.option(
        "--isolation", type=click.Choice(ISOLATION_CHOICES, case_sensitive=False),
        default="read_committed", show_default=True,
        help="mixed: subscriptions alternate READ_COMMITTED, READ_UNCOMMITTED.",
    ),
    click.option(
        "--subscription-type",
        type=click.Choice(["Exclusive", "Shared", "Failover", "KeyShared"], case_sensitive=False),
        default="Shared", show_default=True,
    ),
    click.option("--subscription-prefix", default="perf-sub", show_default=True),
    click.option(
        "-p", "--initial-position", type=click.Choice(["Earliest", "Latest"], case_sensitive=False),
        default="Latest", show_default=True,
    ),
    click.option("--receive-max", default=1000, show_default=True, help="batch_receive size."),
    click.option("--receiver-queue-size", default=20_000, show_default=True),
    click.option(
        "--drain-timeout", "drain_timeout_s", default=60.0, show_default=True,
        help="After producing, wait this long at most for the consumers.",
    ),
]  # fmt: skip


def _options(*groups: list) -> Callable:
    def apply(function: Callable) -> Callable:
        for group in reversed(groups):
            for option in reversed(group):
                function = option(function)
        return function

    return apply


def _run(json_path: Path | None, broker_pid: int | None, **settings) -> None:
    from stableline.perf.coordination import process_cpu_seconds
    from stableline.perf.report import format_summary
    from stableline.perf.runner import PerfError, run
    from stableline.perf.workload import Workload

    settings["isolation"] = settings.get("isolation", "read_committed").lower()
    try:
        workload = Workload(**settings)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    broker_cpu = (lambda: process_cpu_seconds(broker_pid)) if broker_pid else None
    try:
        result = run(workload, out=click.echo, broker_cpu=broker_cpu)
    except PerfError as error:
        from stableline.cli.security import explain_unavailable

        tls = bool(workload.tls_trust_certs_file) or workload.service_url.startswith(
            "stableline+ssl://"
        )
        raise click.ClickException(
            explain_unavailable(str(error), workload.service_url, tls)
        ) from None
    except KeyboardInterrupt:
        click.echo("interrupted before the run started: nothing was measured", err=True)
        raise SystemExit(INTERRUPTED_EXIT_CODE) from None
    click.echo(format_summary(result))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        click.echo(f"wrote {json_path}")
    if result.get("interrupted"):
        raise SystemExit(INTERRUPTED_EXIT_CODE)
    if not result["checks"]["ok"]:
        raise SystemExit(1)


@click.group()
def perf() -> None:
    """Load a broker and measure it: rates, latency percentiles, transactions."""


@perf.command()
@_options(_common, _producing)
def produce(**options) -> None:
    """Publish to TOPIC as fast as allowed; publish latency is send -> durable."""
    _run(subscriptions=0, **options)


@perf.command()
@_options(_common, _consuming)
def consume(**options) -> None:
    """Receive from TOPIC (published by someone else) and acknowledge."""
    _run(producers=0, **options)


@perf.command()
@_options(_common, _producing, _consuming)
def e2e(**options) -> None:
    """Publish and consume at once; end-to-end latency is send -> received."""
    _run(**options)


@perf.command()
@_options(_common, _producing, _consuming)
def txn(**options) -> None:
    """Publish in transactions and consume; commit latency and commit -> RC visible.

    Without --txn-size or --commit-interval-ms, a transaction commits every 100 ms.
    """
    if not options["txn_size"] and not options["commit_interval_ms"]:
        options["commit_interval_ms"] = 100.0
    _run(**options)
