"""Where each kind of cluster metadata lives (see the package docstring for the plan)."""

from __future__ import annotations

import re

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
