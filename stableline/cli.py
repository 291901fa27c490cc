"""The `stableline` command: serve, produce, consume, admin."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from stableline.cli_security import (
    admin_request,
    client_credentials,
    credential_options,
    finish_serve_config,
    permissions,
    serve_security_options,
    serve_security_overrides,
    tokens,
)

DEFAULT_SERVICE = "127.0.0.1:6650"
DEFAULT_ADMIN = "http://127.0.0.1:8080"


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
    "--config",
    "config_file",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="A TOML config file.",
)
@serve_security_options
def serve(
    data_dir: Path | None,
    grpc_address: str | None,
    http_address: str | None,
    config_file: Path | None,
) -> None:
    """Start a broker."""
    from stableline.broker.config import load_config
    from stableline.broker.server import StartupError, lock_data_dir, run

    try:
        config = load_config(
            config_file,
            {
                "data_dir": data_dir,
                "grpc_address": grpc_address,
                "http_address": http_address,
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
@click.option(
    "-m", "--message", "messages", multiple=True, required=True, help="Message text (repeatable)."
)
@click.option(
    "-n", "--num-produce", default=1, show_default=True, help="Times to send each message."
)
@click.option("-k", "--key", default=None, help="Partition key.")
@click.option("--service-url", default=DEFAULT_SERVICE, show_default=True)
@credential_options
def produce(
    topic: str, messages: tuple[str, ...], num_produce: int, key: str | None, service_url: str
) -> None:
    """Send messages to TOPIC."""
    import stableline

    with stableline.Client(service_url, **client_credentials()) as client:
        sent = 0
        try:
            producer = client.create_producer(topic)
            for _ in range(num_produce):
                for text in messages:
                    producer.send_async(text.encode(), _raise_on_error, partition_key=key)
                    sent += 1
            producer.flush()
        except stableline.StableLineError as error:
            raise click.ClickException(f"{type(error).__name__}: {error}") from None
        producer.close()
    click.echo(f"{sent} message(s) produced to {topic}")


def _raise_on_error(error, _message_id) -> None:
    if error is not None:
        click.echo(f"send failed: {error}", err=True)


@main.command()
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option(
    "-n", "--num-messages", default=1, show_default=True, help="Messages to consume; 0 = forever."
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
@click.option(
    "-p",
    "--initial-position",
    type=click.Choice(["Earliest", "Latest"], case_sensitive=False),
    default="Latest",
    show_default=True,
)
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
    """Receive and acknowledge messages of TOPIC, printing them."""
    import stableline

    level = _isolation(isolation)
    types = {t.name.lower(): t for t in stableline.ConsumerType}
    positions = {p.name.lower(): p for p in stableline.InitialPosition}
    with stableline.Client(service_url, **client_credentials()) as client:
        try:
            consumer = client.subscribe(
                topic,
                subscription,
                consumer_type=types[sub_type.lower()],
                initial_position=positions[initial_position.lower()],
                isolation_level=level,
            )
        except stableline.StableLineError as error:
            raise click.ClickException(f"{type(error).__name__}: {error}") from None
        received = 0
        try:
            while num_messages == 0 or received < num_messages:
                try:
                    message = consumer.receive(int(timeout * 1000) if timeout else None)
                except stableline.Timeout:
                    break
                click.echo(f"{message.message_id()}\t{message.data().decode(errors='replace')}")
                consumer.acknowledge(message)
                received += 1
        finally:
            consumer.close()
    click.echo(f"{received} message(s) consumed", err=True)


@main.group()
def admin() -> None:
    """Inspect the broker over its HTTP admin API."""


def _admin_get(admin_url: str, path: str):
    return admin_request(admin_url, path)


def _topic_path(topic: str) -> str:
    from stableline.topic_name import InvalidTopicNameError, TopicName

    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError as error:
        raise click.BadParameter(str(error)) from None
    return f"/admin/v2/persistent/{name.tenant}/{name.namespace}/{name.local_name}"


@admin.group()
def topics() -> None:
    """Topics: list, stats, internal-stats."""


def _admin_url(function):
    function = credential_options(function)
    return click.option("--admin-url", default=DEFAULT_ADMIN, show_default=True)(function)


main.add_command(tokens)
admin.add_command(permissions)


@topics.command("list")
@click.argument("namespace", default="public/default")
@_admin_url
def topics_list(namespace: str, admin_url: str) -> None:
    """List the topics of NAMESPACE (tenant/namespace)."""
    for name in _admin_get(admin_url, f"/admin/v2/persistent/{namespace}"):
        click.echo(name)


@topics.command("stats")
@click.argument("topic")
@_admin_url
def topics_stats(topic: str, admin_url: str) -> None:
    """Print TOPIC's stats, with each subscription's isolation level."""
    click.echo(json.dumps(_admin_get(admin_url, _topic_path(topic) + "/stats"), indent=2))


@topics.command("internal-stats")
@click.argument("topic")
@_admin_url
def topics_internal_stats(topic: str, admin_url: str) -> None:
    """Print TOPIC's ledgers and cursors."""
    click.echo(json.dumps(_admin_get(admin_url, _topic_path(topic) + "/internalStats"), indent=2))


@admin.command("txn-buffer")
@click.argument("topic")
@_admin_url
def admin_txn_buffer(topic: str, admin_url: str) -> None:
    """Print TOPIC's transaction buffer: state, maxReadPosition, ongoing and aborted."""
    path = _topic_path(topic).replace(
        "/admin/v2/persistent/", "/admin/v3/transactions/transactionBufferStats/"
    )
    click.echo(json.dumps(_admin_get(admin_url, path), indent=2))


@main.group()
def txn() -> None:
    """Transactions: list the open ones, show one, or run one from the shell."""


@txn.command("list")
@_admin_url
def txn_list(admin_url: str) -> None:
    """List open transactions, oldest first, with their age and topics."""
    stats = _admin_get(admin_url, "/admin/v3/transactions/coordinatorStats")
    click.echo(
        f"low watermark {stats['lowWaterMark']}, open {stats['openTxns']}, committed "
        f"{stats['committedCount']}, aborted {stats['abortedCount']} ({stats['timedOutCount']} timed out)"
    )
    for meta in stats["openTransactions"]:
        topics = ", ".join(meta["producedPartitions"]) or "-"
        click.echo(f"{meta['txnId']}\t{meta['status']}\t{meta['ageMs'] / 1000:.1f}s\t{topics}")


@txn.command("show")
@click.argument("txn_id")
@_admin_url
def txn_show(txn_id: str, admin_url: str) -> None:
    """Show transaction TXN_ID (MOST:LEAST)."""
    click.echo(
        json.dumps(
            _admin_get(admin_url, f"/admin/v3/transactions/transactionMetadata?txnId={txn_id}"),
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
            raise click.ClickException(f"{type(error).__name__}: {error}") from None
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
    from stableline.perf.cli import perf

    main.add_command(perf)


_add_perf()
