"""`stableline admin topics ...`, `admin subscriptions ...` and `admin namespaces ...` over the
HTTP admin API.

Each command is one call on Pulsar's admin paths with the command's --token and
--tls-trust-certs-file; the broker's answer is printed (JSON as JSON, a refusal as
`Error: STATUS: reason` with exit code 1).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import click

from stableline.cli.security import admin_request, credential_options

DEFAULT_ADMIN = "http://127.0.0.1:8080"


def admin_url_option(function):
    function = credential_options(function)
    return click.option("--admin-url", default=DEFAULT_ADMIN, show_default=True)(function)


# Where a new subscription starts reading: the same choice whether a consumer or the
# admin API makes it.
initial_position_option = click.option(
    "-p",
    "--initial-position",
    type=click.Choice(["Earliest", "Latest"], case_sensitive=False),
    default="Latest",
    show_default=True,
)


def _topic_parts(topic: str) -> str:
    """A topic name (short or full) -> "tenant/namespace/topic", as its paths hold it."""
    from stableline.topic_name import InvalidTopicNameError, TopicName

    try:
        name = TopicName.parse(topic)
    except InvalidTopicNameError as error:
        raise click.BadParameter(str(error)) from None
    return f"{name.tenant}/{name.namespace}/{name.local_name}"


def topic_path(topic: str) -> str:
    """A topic name (short or full) -> its admin path."""
    return f"/admin/v2/persistent/{_topic_parts(topic)}"


def _subscription_path(topic: str, subscription: str) -> str:
    return f"{topic_path(topic)}/subscription/{urllib.parse.quote(subscription, safe='')}"


def _print_json(document) -> None:
    click.echo(json.dumps(document, indent=2))


# ---------------------------------------------------------------- topics


@click.group()
def topics() -> None:
    """Topics: create, delete, list, stats, internal-stats, lookup, unload, transfer, and
    partitioned topics."""


@topics.command("create")
@click.argument("topic")
@admin_url_option
def topics_create(topic: str, admin_url: str) -> None:
    """Create TOPIC (409 if it exists)."""
    admin_request(admin_url, topic_path(topic), "PUT")
    click.echo(f"created {topic}")


@topics.command("delete")
@click.argument("topic")
@admin_url_option
def topics_delete(topic: str, admin_url: str) -> None:
    """Delete TOPIC with its subscriptions, messages and topic-level grants."""
    admin_request(admin_url, topic_path(topic), "DELETE")
    click.echo(f"deleted {topic}")


@topics.command("list")
@click.argument("namespace", default="public/default")
@admin_url_option
def topics_list(namespace: str, admin_url: str) -> None:
    """List the topics of NAMESPACE (tenant/namespace)."""
    if namespace.count("/") != 1 or not all(namespace.split("/")):
        raise click.BadParameter(f"expected tenant/namespace, got {namespace!r}")
    for name in admin_request(admin_url, f"/admin/v2/persistent/{namespace}"):
        click.echo(name)


@topics.command("stats")
@click.argument("topic")
@admin_url_option
def topics_stats(topic: str, admin_url: str) -> None:
    """Print TOPIC's stats, with each subscription's isolation level."""
    _print_json(admin_request(admin_url, topic_path(topic) + "/stats"))


@topics.command("internal-stats")
@click.argument("topic")
@admin_url_option
def topics_internal_stats(topic: str, admin_url: str) -> None:
    """Print TOPIC's ledgers and cursors."""
    _print_json(admin_request(admin_url, topic_path(topic) + "/internalStats"))


@topics.command("lookup")
@click.argument("topic")
@admin_url_option
def topics_lookup(topic: str, admin_url: str) -> None:
    """Print the broker that owns TOPIC: its service URL, then its HTTP admin URL (as
    pulsar-admin prints the first). Any broker of a cluster answers."""
    answer = admin_request(admin_url, f"/lookup/v2/topic/persistent/{_topic_parts(topic)}")
    # One port serves plaintext or TLS: the other URL is null.
    click.echo(answer.get("brokerUrl") or answer.get("brokerUrlTls"))
    click.echo(answer.get("httpUrl") or answer.get("httpUrlTls"))


@topics.command("unload")
@click.argument("topic")
@admin_url_option
def topics_unload(topic: str, admin_url: str) -> None:
    """Unload TOPIC (Pulsar's): a replicated topic is handed to the least loaded other
    broker of its ensemble, a topic of one copy is closed and loaded again on its next
    use. Its clients follow by themselves; no accepted send fails. Any broker answers."""
    admin_request(admin_url, topic_path(topic) + "/unload", "PUT")
    click.echo(f"unloaded {topic}")


@topics.command("transfer")
@click.argument("topic")
@click.option(
    "--to",
    "broker",
    required=True,
    help="The broker id (HOST:PORT, as `admin brokers list` prints) to serve TOPIC: a "
    "member of its ensemble.",
)
@admin_url_option
def topics_transfer(topic: str, broker: str, admin_url: str) -> None:
    """Move TOPIC to BROKER, another member of its ensemble, as unload does; refused for a
    topic of one copy (its data is on its owner's disk only). Any broker answers."""
    query = urllib.parse.urlencode({"broker": broker})
    answer = admin_request(admin_url, f"{topic_path(topic)}/transfer?{query}", "POST")
    click.echo(f"{topic} is served by {answer['broker']}")


# ---------------------------------------------------------------- partitioned topics

partitions_option = click.option(
    "-p",
    "--partitions",
    type=int,
    required=True,
    help="The number of partitions (topics TOPIC-partition-0 .. N-1).",
)


@topics.command("create-partitioned-topic")
@click.argument("topic")
@partitions_option
@admin_url_option
def topics_create_partitioned(topic: str, partitions: int, admin_url: str) -> None:
    """Create partitioned TOPIC with N partitions (409 if the name is taken)."""
    admin_request(admin_url, topic_path(topic) + "/partitions", "PUT", partitions)
    click.echo(f"created {topic} with {partitions} partitions")


@topics.command("update-partitioned-topic")
@click.argument("topic")
@partitions_option
@admin_url_option
def topics_update_partitioned(topic: str, partitions: int, admin_url: str) -> None:
    """Grow partitioned TOPIC to N partitions (the count never shrinks)."""
    admin_request(admin_url, topic_path(topic) + "/partitions", "POST", partitions)
    click.echo(f"updated {topic} to {partitions} partitions")


@topics.command("get-partitioned-topic-metadata")
@click.argument("topic")
@admin_url_option
def topics_partitioned_metadata(topic: str, admin_url: str) -> None:
    """Print TOPIC's partition count, {"partitions": N} (0: not partitioned)."""
    _print_json(admin_request(admin_url, topic_path(topic) + "/partitions"))


@topics.command("delete-partitioned-topic")
@click.argument("topic")
@click.option("-f", "--force", is_flag=True, help="Disconnect producers and consumers first.")
@admin_url_option
def topics_delete_partitioned(topic: str, force: bool, admin_url: str) -> None:
    """Delete partitioned TOPIC and every partition (refused while in use, unless -f)."""
    suffix = "?force=true" if force else ""
    admin_request(admin_url, topic_path(topic) + "/partitions" + suffix, "DELETE")
    click.echo(f"deleted {topic}")


@topics.command("partitioned-stats")
@click.argument("topic")
@admin_url_option
def topics_partitioned_stats(topic: str, admin_url: str) -> None:
    """Print partitioned TOPIC's summed stats and each partition's (with each
    subscription's isolation level)."""
    _print_json(admin_request(admin_url, topic_path(topic) + "/partitioned-stats"))


# ---------------------------------------------------------------- subscriptions


@click.group()
def subscriptions() -> None:
    """Subscriptions: list, create, unsubscribe, reset-cursor, skip, peek."""


@subscriptions.command("list")
@click.argument("topic")
@admin_url_option
def subscriptions_list(topic: str, admin_url: str) -> None:
    """List TOPIC's subscriptions."""
    for name in admin_request(admin_url, topic_path(topic) + "/subscriptions"):
        click.echo(name)


_ISOLATION = click.Choice(["read_committed", "read_uncommitted"], case_sensitive=False)


@subscriptions.command("create")
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option(
    "--isolation",
    type=_ISOLATION,
    default="read_committed",
    show_default=True,
    help="Fixed for the subscription's life; its consumers must ask for the same.",
)
@initial_position_option
@admin_url_option
def subscriptions_create(
    topic: str, subscription: str, isolation: str, initial_position: str, admin_url: str
) -> None:
    """Create a durable subscription on TOPIC before any consumer joins it."""
    query = urllib.parse.urlencode(
        {"isolationLevel": isolation.upper(), "initialPosition": initial_position.lower()}
    )
    admin_request(admin_url, f"{_subscription_path(topic, subscription)}?{query}", "PUT")
    click.echo(f"created subscription {subscription} on {topic} ({isolation.upper()})")


@subscriptions.command("unsubscribe")
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option("-f", "--force", is_flag=True, help="Disconnect its consumers first.")
@admin_url_option
def subscriptions_unsubscribe(topic: str, subscription: str, force: bool, admin_url: str) -> None:
    """Delete a subscription of TOPIC (refused while consumers are connected, unless -f)."""
    suffix = "?force=true" if force else ""
    admin_request(admin_url, _subscription_path(topic, subscription) + suffix, "DELETE")
    click.echo(f"deleted subscription {subscription} on {topic}")


_DURATION = re.compile(r"^(\d+)\s*(ms|s|m|h|d|w)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def _timestamp_ms(text: str) -> int:
    """'10m' (that long ago) or milliseconds since the epoch -> a timestamp."""
    match = _DURATION.match(text.strip().lower())
    if match:
        return int(time.time() * 1000) - int(match.group(1)) * _UNIT_MS[match.group(2)]
    if text.strip().isdigit():
        return int(text)
    raise click.BadParameter(
        f"{text!r}: give a time ago such as 30s, 10m, 2h, 1d, or milliseconds since the epoch",
        param_hint="'-t' / '--time'",
    )


def _message_id(text: str) -> dict[str, int]:
    lowered = text.strip().lower()
    if lowered == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if lowered == "latest":
        return {"ledgerId": 2**62, "entryId": 0}
    ledger, _, entry = lowered.partition(":")
    if not (ledger.isdigit() and entry.isdigit()):
        raise click.BadParameter(
            f"{text!r}: give LEDGER:ENTRY (as consume prints it), earliest or latest",
            param_hint="'-m' / '--message-id'",
        )
    return {"ledgerId": int(ledger), "entryId": int(entry)}


@subscriptions.command("reset-cursor")
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option("-t", "--time", "when", default=None, help="Messages published since: 10m, 2h...")
@click.option(
    "-m", "--message-id", default=None, help="LEDGER:ENTRY to read next, earliest or latest."
)
@admin_url_option
def subscriptions_reset_cursor(
    topic: str, subscription: str, when: str | None, message_id: str | None, admin_url: str
) -> None:
    """Move a subscription of TOPIC back or forward: to a time, or to a message id."""
    if (when is None) == (message_id is None):
        raise click.UsageError("give exactly one of -t/--time or -m/--message-id")
    path = _subscription_path(topic, subscription) + "/resetcursor"
    if when is not None:
        admin_request(admin_url, f"{path}/{_timestamp_ms(when)}", "POST")
        click.echo(f"reset {subscription} on {topic} to messages published since {when}")
    else:
        admin_request(admin_url, path, "POST", _message_id(message_id))
        click.echo(f"reset {subscription} on {topic} to {message_id}")


@subscriptions.command("skip")
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option(
    "-n", "--count", type=click.IntRange(1), default=None, help="Entries to skip (a batch is one)."
)
@click.option("--all", "skip_all", is_flag=True, help="Skip the whole backlog.")
@admin_url_option
def subscriptions_skip(
    topic: str, subscription: str, count: int | None, skip_all: bool, admin_url: str
) -> None:
    """Acknowledge a subscription's next entries without reading them."""
    if (count is None) == (not skip_all):
        raise click.UsageError("give exactly one of -n/--count or --all")
    path = _subscription_path(topic, subscription)
    path += "/skip_all" if skip_all else f"/skip/{count}"
    answer = admin_request(admin_url, path, "POST") or {}
    click.echo(f"skipped {answer.get('skippedEntries', 0)} entries of {subscription} on {topic}")


@subscriptions.command("peek")
@click.argument("topic")
@click.option("-s", "--subscription", required=True, help="Subscription name.")
@click.option("-n", "--count", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option(
    "--isolation",
    type=_ISOLATION,
    default=None,
    help="Peek as this level reads [the subscription's own].",
)
@admin_url_option
def subscriptions_peek(
    topic: str, subscription: str, count: int, isolation: str | None, admin_url: str
) -> None:
    """Print a subscription's next messages without moving its cursor."""
    query = {"count": count}
    if isolation:
        query["isolationLevel"] = isolation.upper()
    path = f"{_subscription_path(topic, subscription)}/peek?{urllib.parse.urlencode(query)}"
    _print_json(admin_request(admin_url, path))


# ---------------------------------------------------------------- namespaces


def _namespace_path(namespace: str) -> str:
    if namespace.count("/") != 1 or not all(namespace.split("/")):
        raise click.BadParameter(f"expected tenant/namespace, got {namespace!r}")
    return f"/admin/v2/namespaces/{namespace}"


@click.group()
def namespaces() -> None:
    """Namespace policies: policies, set-, get-, remove-auto-topic-creation and
    set-, get-, remove-persistence; unload (every topic of a namespace)."""


@namespaces.command("unload")
@click.argument("namespace")
@admin_url_option
def namespaces_unload(namespace: str, admin_url: str) -> None:
    """Unload every topic of NAMESPACE (tenant/namespace), as `topics unload` does each,
    wherever it is served; prints where each went. Exit code 1 if any was not moved."""
    answer = admin_request(admin_url, _namespace_path(namespace) + "/unload", "PUT")
    for topic, broker in sorted(answer["unloaded"].items()):
        click.echo(f"{topic}: {broker or 'unloaded'}")
    for topic, reason in sorted(answer["failed"].items()):
        click.echo(f"{topic}: not unloaded: {reason}", err=True)
    if answer["failed"]:
        raise click.exceptions.Exit(1)


@namespaces.command("policies")
@click.argument("namespace")
@admin_url_option
def namespaces_policies(namespace: str, admin_url: str) -> None:
    """Print NAMESPACE's policies (tenant/namespace)."""
    _print_json(admin_request(admin_url, _namespace_path(namespace)))


@namespaces.command("set-auto-topic-creation")
@click.argument("namespace")
@click.option("--enable/--disable", "enable", required=True, help="Create topics on first use?")
@click.option(
    "-t",
    "--type",
    "topic_type",
    type=click.Choice(["non-partitioned"], case_sensitive=False),
    default="non-partitioned",
    show_default=True,
)
@admin_url_option
def namespaces_set_auto_topic_creation(
    namespace: str, enable: bool, topic_type: str, admin_url: str
) -> None:
    """Whether NAMESPACE's topics are created by their first use, whatever the broker's
    allow_auto_topic_creation says (with authorization on, still only by a role with
    produce on the topic)."""
    body = {"allowAutoTopicCreation": enable, "topicType": topic_type.lower()}
    admin_request(admin_url, _namespace_path(namespace) + "/autoTopicCreation", "POST", body)
    click.echo(f"auto topic creation {'enabled' if enable else 'disabled'} on {namespace}")


@namespaces.command("get-auto-topic-creation")
@click.argument("namespace")
@admin_url_option
def namespaces_get_auto_topic_creation(namespace: str, admin_url: str) -> None:
    """Print NAMESPACE's auto topic creation policy (null: the broker's default)."""
    _print_json(admin_request(admin_url, _namespace_path(namespace) + "/autoTopicCreation"))


@namespaces.command("remove-auto-topic-creation")
@click.argument("namespace")
@admin_url_option
def namespaces_remove_auto_topic_creation(namespace: str, admin_url: str) -> None:
    """Drop NAMESPACE's auto topic creation policy: the broker's default applies again."""
    admin_request(admin_url, _namespace_path(namespace) + "/autoTopicCreation", "DELETE")
    click.echo(f"auto topic creation on {namespace} follows the broker's default")


@namespaces.command("set-persistence")
@click.argument("namespace")
@click.option("-e", "--ensemble", type=int, required=True, help="Brokers holding each ledger (E).")
@click.option(
    "-w", "--write-quorum", type=int, required=True, help="Brokers each entry is written to (Qw)."
)
@click.option(
    "-a",
    "--ack-quorum",
    type=int,
    required=True,
    help="Brokers that must hold an entry before it is acknowledged (Qa).",
)
@admin_url_option
def namespaces_set_persistence(
    namespace: str, ensemble: int, write_quorum: int, ack_quorum: int, admin_url: str
) -> None:
    """How many brokers hold each ledger of NAMESPACE's topics placed from now on, and
    how many must have an entry before it is acknowledged (1 <= Qa <= Qw <= E)."""
    body = {
        "bookkeeperEnsemble": ensemble,
        "bookkeeperWriteQuorum": write_quorum,
        "bookkeeperAckQuorum": ack_quorum,
    }
    admin_request(admin_url, _namespace_path(namespace) + "/persistence", "POST", body)
    click.echo(
        f"persistence of {namespace}: ensemble {ensemble}, write quorum {write_quorum}, "
        f"ack quorum {ack_quorum}"
    )


@namespaces.command("get-persistence")
@click.argument("namespace")
@admin_url_option
def namespaces_get_persistence(namespace: str, admin_url: str) -> None:
    """Print NAMESPACE's persistence policy (null: the broker's default)."""
    _print_json(admin_request(admin_url, _namespace_path(namespace) + "/persistence"))


@namespaces.command("remove-persistence")
@click.argument("namespace")
@admin_url_option
def namespaces_remove_persistence(namespace: str, admin_url: str) -> None:
    """Drop NAMESPACE's persistence policy: the broker's default applies again."""
    admin_request(admin_url, _namespace_path(namespace) + "/persistence", "DELETE")
    click.echo(f"persistence of {namespace} follows the broker's default")


# ---------------------------------------------------------------- brokers


@click.group()
def brokers() -> None:
    """The cluster's live brokers."""


@brokers.command("list")
@click.argument("cluster", required=False)
@admin_url_option
def brokers_list(cluster: str | None, admin_url: str) -> None:
    """Print the live brokers of CLUSTER (every cluster when omitted), one host:port a line."""
    names = [cluster] if cluster else admin_request(admin_url, "/admin/v2/clusters")
    for name in names:
        for broker_id in admin_request(
            admin_url, f"/admin/v2/brokers/{urllib.parse.quote(name, safe='')}"
        ):
            click.echo(broker_id)


_LOAD_COLUMNS = (
    "BROKER",
    "TOPICS",
    "MSG/S IN",
    "MSG/S OUT",
    "MB/S IN",
    "MB/S OUT",
    "CPU",
    "RSS MB",
)


def _load_row(report: dict) -> tuple[str, ...]:
    load = report.get("load", {})
    return (
        report["brokerId"] + (" *" if report.get("thisBroker") else ""),
        f"{load.get('topicsLed', load.get('topics', 0)):.0f}",
        f"{load.get('msgRateIn', 0):.1f}",
        f"{load.get('msgRateOut', 0):.1f}",
        f"{load.get('msgThroughputIn', 0) / 1e6:.2f}",
        f"{load.get('msgThroughputOut', 0) / 1e6:.2f}",
        f"{load.get('cpu', 0):.2f}",
        f"{load.get('rssBytes', 0) / 1e6:.0f}",
    )


@brokers.command("load")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@admin_url_option
def brokers_load(as_json: bool, admin_url: str) -> None:
    """The cluster's brokers' last load reports, a table: topics led, msgs/s and MB/s
    in and out over the report interval, CPU (cores busy), RSS; * marks the broker
    asked. --json adds each broker's busiest topics and load score."""
    reports = admin_request(admin_url, "/admin/v2/brokers/load")
    if as_json:
        _print_json(reports)
        return
    rows = [_LOAD_COLUMNS, *(_load_row(report) for report in reports)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_LOAD_COLUMNS))]
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        click.echo("  ".join(cells).rstrip())


@brokers.command("decommission")
@click.argument("broker")
@click.option(
    "--status",
    "show_status",
    is_flag=True,
    help="Only print how many copies BROKER still holds (nothing is changed).",
)
@click.option("--cancel", is_flag=True, help="Take BROKER back into placement.")
@admin_url_option
def brokers_decommission(broker: str, show_status: bool, cancel: bool, admin_url: str) -> None:
    """Move BROKER's copies to the other brokers before it is removed: no new topic or
    copy is placed on it, the topics it leads are handed to other members of their
    ensembles, and each topic it holds a copy of gets one on another live broker. Stop
    it once `--status` shows no copies left."""
    path = f"/admin/v2/brokers/{urllib.parse.quote(broker, safe=':')}/decommission"
    if cancel:
        admin_request(admin_url, path, "DELETE")
        click.echo(f"broker {broker} is no longer draining")
        return
    if not show_status:
        admin_request(admin_url, path, "POST")
        click.echo(f"broker {broker} is draining: its copies are being made on other brokers")
    _print_json(admin_request(admin_url, path))
