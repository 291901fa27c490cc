"""The `stableline` command: serve, produce, consume, admin."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from stableline.cli.admin import (
    admin_url_option,
    brokers,
    initial_position_option,
    namespaces,
    subscriptions,
    topic_path,
    topics,
)
from stableline.cli.cluster import cluster
from stableline.cli.security import (
    admin_request,
    broker_error,
    client_credentials,
    credential_options,
    finish_serve_config,
    permissions,
    serve_security_options,
    serve_security_overrides,
    tokens,
)

DEFAULT_SERVICE = "127.0.0.1:6650"
# What a shell reports for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT_CODE = 130


class _Refused(click.ClickException):
    """A one-line refusal (`Error: ...` on stderr) with the usage-error exit code."""

    exit_code = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="stableline", prog_name="stableline")
def main() -> None:
    """stableline: a message broker with transactions you can trust."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where ledgers and metadata live [./stableline-data].",
)
@click.option("--grpc", "grpc_address", default=None, help="gRPC listen address [127.0.0.1:6650].")
@click.option(
    "--http", "http_address", default=None, help="HTTP admin listen address [127.0.0.1:8080]."
)
@click.option(
    "--kafka",
    "kafka_address",
    default=None,
    help="Kafka protocol listen address [127.0.0.1:9092; '' turns it off].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="A TOML config file.",
)
@click.option(
    "--metadata-store",
    "metadata_store_url",
    default=None,
    help="Cluster metadata: etcd://[USER@]HOST:PORT[,HOST:PORT...] [in the data dir].",
)
@click.option(
    "--metadata-store-password-file",
    "metadata_store_password_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="File holding the etcd password of the --metadata-store URL's USER@ (or set "
    "STABLELINE_METADATA_STORE_PASSWORD); a password is never given on the command line.",
)
@click.option("--cluster", "cluster_name", default=None, help="Cluster name [standalone].")
@serve_security_options
def serve(
    data_dir: Path | None,
    grpc_address: str | None,
    http_address: str | None,
    kafka_address: str | None,
    config_file: Path | None,
    metadata_store_url: str | None,
    metadata_store_password_file: str | None,
    cluster_name: str | None,
) -> None:
    """Start a broker."""
    from stableline.broker.app.server import StartupError, lock_data_dir, run
    from stableline.broker.config import load_config

    try:
        config = load_config(
            config_file,
            {
                "data_dir": data_dir,
                "grpc_address": grpc_address,
                "http_address": http_address,
                "kafka_address": kafka_address,
                "metadata_store_url": metadata_store_url,
                "metadata_store_password_file": metadata_store_password_file,
                "cluster_name": cluster_name,
                **serve_security_overrides(),
            },
        )
    except (ValueError, OSError) as error:
        raise click.UsageError(str(error)) from None
    try:
        # Held until the process ends, taken before anything writes under the data
        # dir (--secure's files included): a second broker stops here.
        lock_data_dir(config)
        try:
            config = finish_serve_config(config)
        except (ValueError, OSError) as error:
            raise click.UsageError(str(error)) from None
        run(config)
    except StartupError as error:
        raise _Refused(str(error)) from None


def _isolation(value: str):
    import stableline

    try:
        return stableline.IsolationLevel.parse(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@main.command()
@click.argument("topic")
@click.option("-m", "--message", "messages", multiple=True, help="Message text (repeatable).")
@click.option(
    "-f",
    "--file",
    "source",
    type=click.File("r", encoding="utf-8", errors="surrogateescape"),
    default=None,
    help="Send each line of this file as a message; - reads stdin.",
)
@click.option(
    "-n",
    "--num-produce",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Times to send each -m message.",
)
@click.option("-k", "--key", default=None, help="Partition key.")
@click.option("--service-url", default=DEFAULT_SERVICE, show_default=True)
@credential_options
def produce(
    topic: str,
    messages: tuple[str, ...],
    source,
    num_produce: int,
    key: str | None,
    service_url: str,
) -> None:
    """Send messages to TOPIC: -m texts, or one message a line of -f FILE (- for stdin).

    A line is sent without its line ending; an empty line is an empty message.
    """
    import stableline

    if not messages and source is None:
        raise click.UsageError("give messages with -m TEXT or -f FILE (- reads stdin)")
    if source is not None and num_produce != 1:
        raise click.UsageError("-n repeats -m messages; the lines of -f are sent once")

    def texts():
        for _ in range(num_produce):
            yield from messages
        if source is not None:
            for line in source:
                yield line.rstrip("\r\n") if line.endswith("\n") else line

    sent = 0
    interrupted = False
    with stableline.Client(service_url, **client_credentials()) as client:
        try:
            producer = client.create_producer(topic)
            try:
                for text in texts():
                    data = text.encode("utf-8", errors="surrogateescape")
                    producer.send_async(data, _raise_on_error, partition_key=key)
                    sent += 1
            except KeyboardInterrupt:
                interrupted = True
            producer.flush()
        except stableline.StableLineError as error:
            raise broker_error(error, service_url) from None
        producer.close()
    click.echo(f"{sent} message(s) produced to {topic}" + (" (interrupted)" if interrupted else ""))
    if interrupted:
        sys.exit(INTERRUPTED_EXIT_CODE)


def _raise_on_error(error, _message_id) -> None:
    if error is not None:
        click.echo(f"send failed: {error}", err=True)


@main.command()
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option(
    "-n",
    "--num-messages",
    default=1,
    show_default=True,
    type=click.IntRange(0),
    help="Messages to consume; 0 = forever.",
)
@click.option(
    "-t",
    "--type",
    "sub_type",
    type=click.Choice(["Exclusive", "Shared", "Failover", "KeyShared"], case_sensitive=False),
    default="Exclusive",
    show_default=True,
)
@click.option(
    "--isolation",
    default="read_committed",
    show_default=True,
    help="read_committed | read_uncommitted",
)
@initial_position_option
@click.option(
    "--timeout", default=0.0, help="Stop after this many seconds without a message; 0 = wait."
)
@click.option("--service-url", default=DEFAULT_SERVICE, show_default=True)
@credential_options
def consume(
    topic: str,
    subscription: str,
    num_messages: int,
    sub_type: str,
    isolation: str,
    initial_position: str,
    timeout: float,
    service_url: str,
) -> None:
    """Receive and acknowledge messages of TOPIC, printing them.

    Ctrl-C stops it: the count so far goes to stderr, the exit code is 130.
    """
    import stableline

    level = _isolation(isolation)
    types = {t.name.lower(): t for t in stableline.ConsumerType}
    positions = {p.name.lower(): p for p in stableline.InitialPosition}
    received = 0
    acknowledged = 0

    def receive_and_print() -> None:
        nonlocal received, acknowledged
        with stableline.Client(service_url, **client_credentials()) as client:
            consumer = client.subscribe(
                topic,
                subscription,
                consumer_type=types[sub_type.lower()],
                initial_position=positions[initial_position.lower()],
                isolation_level=level,
            )
            try:
                while num_messages == 0 or received < num_messages:
                    try:
                        message = consumer.receive(int(timeout * 1000) if timeout else None)
                    except stableline.Timeout:
                        break
                    data = message.data().decode(errors="replace")
                    click.echo(f"{message.message_id()}\t{data}")
                    received += 1
                    consumer.acknowledge(message)
                    acknowledged += 1
            finally:
                consumer.close()

    interrupted = False
    try:
        receive_and_print()
    except KeyboardInterrupt:  # at any point, subscribing included
        interrupted = True
    except stableline.StableLineError as error:
        if received:
            click.echo(_consumed_summary(received, acknowledged), err=True)
        raise broker_error(error, service_url) from None
    click.echo(
        _consumed_summary(received, acknowledged) + (" (interrupted)" if interrupted else ""),
        err=True,
    )
    if interrupted:
        sys.exit(INTERRUPTED_EXIT_CODE)


def _consumed_summary(received: int, acknowledged: int) -> str:
    """What consume did: an interrupt can land between printing a message and its ack."""
    if acknowledged == received:
        return f"{received} message(s) consumed"
    return f"{received} message(s) consumed, {acknowledged} acknowledged"


@main.group()
def admin() -> None:
    """Inspect the broker over its HTTP admin API."""


main.add_command(tokens)
main.add_command(cluster)
admin.add_command(brokers)
admin.add_command(permissions)
admin.add_command(topics)
admin.add_command(subscriptions)
admin.add_command(namespaces)


@admin.command("txn-buffer")
@click.argument("topic")
@admin_url_option
def admin_txn_buffer(topic: str, admin_url: str) -> None:
    """Print TOPIC's transaction buffer: state, maxReadPosition, ongoing and aborted."""
    path = topic_path(topic).replace(
        "/admin/v2/persistent/", "/admin/v3/transactions/transactionBufferStats/"
    )
    click.echo(json.dumps(admin_request(admin_url, path), indent=2))


@main.group()
def txn() -> None:
    """Transactions: list the open ones, show one, or run one from the shell."""


@txn.command("list")
@admin_url_option
def txn_list(admin_url: str) -> None:
    """List open transactions, oldest first, with their age and topics."""
    stats = admin_request(admin_url, "/admin/v3/transactions/coordinatorStats")
    click.echo(
        f"low watermark {stats['lowWaterMark']}, open {stats['openTxns']}, committed "
        f"{stats['committedCount']}, aborted {stats['abortedCount']} ({stats['timedOutCount']} timed out)"
    )
    for meta in stats["openTransactions"]:
        topics = ", ".join(meta["producedPartitions"]) or "-"
        click.echo(f"{meta['txnId']}\t{meta['status']}\t{meta['ageMs'] / 1000:.1f}s\t{topics}")


@txn.command("show")
@click.argument("txn_id")
@admin_url_option
def txn_show(txn_id: str, admin_url: str) -> None:
    """Show transaction TXN_ID (MOST:LEAST)."""
    click.echo(
        json.dumps(
            admin_request(admin_url, f"/admin/v3/transactions/transactionMetadata?txnId={txn_id}"),
            indent=2,
        )
    )


@txn.command("produce")
@click.argument("topic")
@click.option(
    "-m", "--message", "messages", multiple=True, required=True, help="Message text (repeatable)."
)
@click.option("--abort", is_flag=True, help="Abort instead of committing.")
@click.option("--timeout-ms", default=60_000, show_default=True)
@click.option("--service-url", default=DEFAULT_SERVICE, show_default=True)
@credential_options
def txn_produce(
    topic: str, messages: tuple[str, ...], abort: bool, timeout_ms: int, service_url: str
) -> None:
    """Send messages to TOPIC in one transaction, then commit (or abort) it."""
    import stableline
    from stableline._types import txn_id_text

    with stableline.Client(service_url, **client_credentials()) as client:
        try:
            transaction = client.new_transaction(timeout_ms=timeout_ms)
            producer = client.create_producer(topic)
            for text in messages:
                producer.send(text.encode(), txn=transaction)
            transaction.abort() if abort else transaction.commit()
        except stableline.StableLineError as error:
            raise broker_error(error, service_url) from None
    click.echo(
        f"transaction {txn_id_text(transaction.id)} {transaction.state}: "
        f"{len(messages)} message(s) to {topic}"
    )


if __name__ == "__main__":
    sys.exit(main())


@main.group()
def demo() -> None:
    """Demonstrations: `stableline demo bank`."""


@demo.command("bank")
@click.option(
    "--service", default=None, help="A broker's gRPC host:port [start one in a temp dir]."
)
@click.option("--requests", "count", default=1500, show_default=True, type=click.IntRange(1))
@click.option("--accounts", default=8, show_default=True, type=click.IntRange(2))
@click.option("--seed", default=1, show_default=True, type=int)
def demo_bank(service: str | None, count: int, accounts: int, seed: int) -> None:
    """PIP-298's bank: a READ_UNCOMMITTED monitor and a READ_COMMITTED Spark job on one topic."""
    try:
        from stableline.demo.bank import run
    except ImportError as error:
        raise click.ClickException(
            f"the demo needs the spark extra (pip install 'stableline[spark]'): {error}"
        ) from None
    if not run(service, count, accounts, seed, out=lambda line: click.echo(line)):
        sys.exit(1)


def _add_perf() -> None:
    from stableline.cli.perf import perf

    main.add_command(perf)


_add_perf()
