"""`stableline cluster up`: a cluster to try on one machine, etcd and N brokers on 127.0.0.1.

The work is stableline.local_cluster's; this module maps the options onto it and
owns the process's signals and exit code: 0 after a Ctrl-C (or SIGTERM) that
stopped everything cleanly, 1 when something failed to start, died while it ran or
did not stop cleanly, 2 for options that contradict the cluster recorded in the
data dir.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from stableline.local_cluster.layout import MAX_BROKERS, LayoutError, Requested, load, plan

DEFAULT_CLUSTER_DIR = Path("stableline-cluster")
DEFAULT_CLUSTER_NAME = "local"
_PORT = click.IntRange(0, 65535)


@click.group()
def cluster() -> None:
    """A local cluster to try: an etcd and brokers on 127.0.0.1."""


@cluster.command("up", context_settings={"show_default": True})
@click.option(
    "-n", "--brokers", default=3, type=click.IntRange(1, MAX_BROKERS), help="How many brokers."
)
@click.option(
    "--base-grpc-port",
    default=6650,
    type=_PORT,
    help="Broker i's gRPC port is this + i; 0: free ports.",
)
@click.option(
    "--base-http-port",
    default=8080,
    type=_PORT,
    help="Broker i's HTTP port is this + i; 0: free ports.",
)
@click.option(
    "--base-kafka-port",
    default=9092,
    type=_PORT,
    help="Broker i's Kafka port is this + i; 0: free ports.",
)
@click.option("--cluster", "cluster_name", default=DEFAULT_CLUSTER_NAME, help="The cluster's name.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_CLUSTER_DIR,
    help="Base dir: etcd's data, each broker's data dir and log, the recorded layout.",
)
@click.option(
    "--etcd",
    "etcd_url",
    default="",
    help="Use this etcd (etcd://HOST:PORT[,...]) instead of starting one.",
)
@click.argument("broker_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def up(
    context: click.Context,
    brokers: int,
    base_grpc_port: int,
    base_http_port: int,
    base_kafka_port: int,
    cluster_name: str,
    data_dir: Path,
    etcd_url: str,
    broker_args: tuple[str, ...],
) -> None:
    """Start an etcd and BROKERS brokers, print their addresses, and run until Ctrl-C.

    Each broker gets its own data dir under --data-dir; all share the etcd and one
    cluster name. Starting again on the same --data-dir brings back the same brokers
    on the same ports, with their topics. Flags after `--` go to every broker's
    `stableline serve` (e.g. `-- --config broker.toml`).
    """
    from stableline.local_cluster.etcd import INSTALL_HINT, find_etcd
    from stableline.local_cluster.supervisor import (
        Interrupted,
        LocalCluster,
        StartFailed,
        StopSignals,
    )
    from stableline.metadata import InvalidMetadataStoreUrl, InvalidPath, parse_etcd_url
    from stableline.metadata.layout import check_cluster_name

    try:
        check_cluster_name(cluster_name)
        if etcd_url:
            parse_etcd_url(etcd_url)
    except (InvalidPath, InvalidMetadataStoreUrl) as error:
        raise click.BadParameter(str(error)) from None
    for flag, base in (
        ("--base-grpc-port", base_grpc_port),
        ("--base-http-port", base_http_port),
        ("--base-kafka-port", base_kafka_port),
    ):
        if base and base + brokers - 1 > 65535:
            raise click.BadParameter(f"{flag} {base} leaves no room for {brokers} brokers")
    given = frozenset(
        name
        for name, parameter in (
            ("brokers", "brokers"),
            ("base_grpc_port", "base_grpc_port"),
            ("base_http_port", "base_http_port"),
            ("base_kafka_port", "base_kafka_port"),
            ("cluster", "cluster_name"),
            ("etcd", "etcd_url"),
        )
        if context.get_parameter_source(parameter)
        in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    )
    requested = Requested(
        brokers, base_grpc_port, base_http_port, base_kafka_port, cluster_name, etcd_url, given
    )
    try:
        layout = plan(requested, load(data_dir), data_dir)
    except LayoutError as error:
        raise click.UsageError(str(error)) from None
    etcd_binary = None
    if not layout.etcd_url:
        etcd_binary = find_etcd()
        if etcd_binary is None:
            raise click.ClickException(INSTALL_HINT)

    local = LocalCluster(data_dir, layout, etcd_binary, list(broker_args), click.echo)
    failure: str | None = None
    signals = StopSignals()
    try:
        local.start(signals)
        click.echo("")
        for line in local.describe():
            click.echo(line)
        local.watch(signals)
    except Interrupted:
        click.echo("")
    except StartFailed as error:
        failure = str(error)
    finally:
        signals.ignore()
        clean = local.stop()
        signals.close()
    if failure is not None:
        click.echo(f"Error: {failure}", err=True)
        sys.exit(1)
    if not clean:
        sys.exit(1)
