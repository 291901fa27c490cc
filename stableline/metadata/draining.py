"""Brokers being decommissioned: their copies are moved to other brokers.

    /stableline/draining/{cluster}/{host:port}
        {"since_ms": T}: an operator asked that the broker's copies be moved away
        (`admin brokers decommission`). Persistent (the broker need not be live);
        deleted to take the broker back into placement.

Every broker reads the set: none places a new topic or ensemble member on a
draining broker, and each topic's writer replaces a draining member at once.
"""

from __future__ import annotations

import contextlib
import json
import time

from stableline.metadata.errors import NotFound
from stableline.metadata.layout import ROOT, broker_path, check_cluster_name
from stableline.metadata.store import ClusterMetadataStore


def draining_dir(cluster: str) -> str:
    return f"{ROOT}/draining/{check_cluster_name(cluster)}"


def draining_path(cluster: str, broker_id: str) -> str:
    # The same checks as a registration's key.
    broker_path(cluster, broker_id)
    return f"{draining_dir(cluster)}/{broker_id}"


async def mark_draining(store: ClusterMetadataStore, cluster: str, broker_id: str) -> None:
    """Mark the broker draining (again: its first mark's time is kept)."""
    path = draining_path(cluster, broker_id)
    if await store.get(path) is None:
        value = json.dumps({"since_ms": int(time.time() * 1000)}).encode()
        await store.put(path, value)


async def unmark_draining(store: ClusterMetadataStore, cluster: str, broker_id: str) -> None:
    with contextlib.suppress(NotFound):
        await store.delete(draining_path(cluster, broker_id))


async def list_draining(store: ClusterMetadataStore, cluster: str) -> set[str]:
    """The ids of the cluster's brokers being decommissioned."""
    return set(await store.children(draining_dir(cluster)))
