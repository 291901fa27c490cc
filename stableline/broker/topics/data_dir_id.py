"""The data dir's identity: made once, when a broker first starts on an empty data dir.

A broker registers it with its cluster, and a replicated topic's record keeps the one
each member of its ensemble had when it was placed (or last caught up). A member whose
data dir is not the one the record knows (it was lost, or swapped for another) holds
none of the copies the record counts on: its answers never count towards a fence's
quorum and it never takes the topic, until its copy has been made again
(cluster/ledger_recovery.py, cluster/replication.py).
"""

from __future__ import annotations

import uuid

from managed_ledger import LocalStore
from stableline.broker.topics.database import BROKER_DB

_KEY = "data_dir_id"


def data_dir_id(store: LocalStore) -> str:
    """The data dir's identity, made and stored durably on first use."""
    existing = store.get(BROKER_DB, _KEY)
    if existing is not None:
        return existing.decode()
    made = uuid.uuid4().hex
    store.put(BROKER_DB, _KEY, made.encode())
    store.sync()
    return made
