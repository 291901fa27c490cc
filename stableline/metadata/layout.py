"""Where each kind of cluster metadata lives (see the package docstring for the plan)."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from stableline.metadata.errors import InvalidPath

ROOT = "/stableline"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_cluster_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise InvalidPath(
            f"cluster name {name!r}: use 1-64 letters, digits, '_', '.', '-' "
            f"(starting with a letter or digit)"
        )
    return name


def clusters_dir() -> str:
    return f"{ROOT}/clusters"


def cluster_path(cluster: str) -> str:
    return f"{clusters_dir()}/{check_cluster_name(cluster)}"


def brokers_dir(cluster: str) -> str:
    return f"{ROOT}/brokers/{check_cluster_name(cluster)}"


def broker_path(cluster: str, broker_id: str) -> str:
    if not broker_id or "/" in broker_id:
        raise InvalidPath(f"broker id {broker_id!r} must be a non-empty HOST:PORT")
    return f"{brokers_dir(cluster)}/{broker_id}"


# Shared by every cluster on the store, as Pulsar's configuration store is: a
# namespace's policies, its grants and a partitioned topic's count are the same for
# all of them (each cluster places its own partitions; ownership is per cluster).


def namespaces_dir() -> str:
    return f"{ROOT}/namespaces"


def namespace_path(namespace: str) -> str:
    """`namespace` is "tenant/namespace", checked by the caller (TopicName's rules)."""
    return f"{namespaces_dir()}/{_checked(namespace, 2)}"


def permissions_dir() -> str:
    return f"{ROOT}/permissions"


def namespace_permissions_path(namespace: str) -> str:
    """Grants on every topic of "tenant/namespace"."""
    return f"{permissions_dir()}/{_checked(namespace, 2)}"


def topic_permissions_path(topic: str) -> str:
    """Grants on one topic, "tenant/namespace/topic"."""
    return f"{permissions_dir()}/{_checked(topic, 3)}"


def partitioned_topics_dir() -> str:
    return f"{ROOT}/partitioned-topics"


def partitioned_topic_path(topic: str) -> str:
    """A partitioned topic's count, "tenant/namespace/topic"."""
    return f"{partitioned_topics_dir()}/{_checked(topic, 3)}"


def kafka_transactional_ids_dir(cluster: str) -> str:
    return f"{ROOT}/kafka/{check_cluster_name(cluster)}/transactional-ids"


def kafka_transactional_id_path(cluster: str, owner: str, transactional_id: str) -> str:
    """A Kafka transactional id's producer id, epoch and current transaction, per
    the role that owns it ("" with authentication off): one segment, "ID@OWNER",
    each percent-encoded (Kafka allows any string; '@' is encoded in both)."""
    segment = f"{quote(transactional_id, safe='')}@{quote(owner, safe='')}"
    return f"{kafka_transactional_ids_dir(cluster)}/{segment}"


def kafka_transactional_id_of(path: str) -> tuple[str, str]:
    """(owner, transactional id) of a kafka_transactional_id_path."""
    encoded_id, _, encoded_owner = path.rpartition("/")[2].partition("@")
    return unquote(encoded_owner), unquote(encoded_id)


def kafka_groups_dir(cluster: str) -> str:
    return f"{ROOT}/kafka/{check_cluster_name(cluster)}/groups"


def kafka_group_partitions_path(cluster: str, group_id: str, topic: str) -> str:
    """The partitions of Kafka topic `topic` a consumer group has committed on (the
    group's index, one key per topic); group and topic each percent-encoded."""
    return (
        f"{kafka_groups_dir(cluster)}/{quote(group_id, safe='')}/partitions/{quote(topic, safe='')}"
    )


def kafka_group_owner_path(cluster: str, group_id: str) -> str:
    """The role that owns a consumer group (with authorization on)."""
    return f"{kafka_groups_dir(cluster)}/{quote(group_id, safe='')}/owner"


def kafka_group_key_of(cluster: str, path: str) -> tuple[str, str | None]:
    """(group id, Kafka topic) of a kafka_group_partitions_path, (group id, None) of a
    kafka_group_owner_path; InvalidPath for anything else under kafka_groups_dir."""
    segments = relative_segments(kafka_groups_dir(cluster), path)
    if len(segments) == 2 and segments[1] == "owner":
        return unquote(segments[0]), None
    if len(segments) == 3 and segments[1] == "partitions":
        return unquote(segments[0]), unquote(segments[2])
    raise InvalidPath(f"{path!r} is neither a group's owner nor its partitions of a topic")


def relative_segments(directory: str, path: str) -> list[str]:
    """The segments of `path` below `directory` (which it must be under)."""
    assert path.startswith(directory + "/"), (directory, path)
    return path[len(directory) + 1 :].split("/")


def _checked(name: str, segments: int) -> str:
    parts = name.split("/")
    if len(parts) != segments or not all(parts):
        raise InvalidPath(f"{name!r} is not {segments} non-empty names joined by '/'")
    return name
