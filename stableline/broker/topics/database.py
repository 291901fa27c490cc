"""The broker's own database in its local store (managed_ledger's LocalStore).

Beside the engines' databases (ledgers, cursors, snapshots, the coordinator's log)
the broker keeps its records in one database, each kind under a key prefix of its
own: the topics it has made, namespace policies, partition counts, grants, held
acks, the cluster it joined, the Kafka face's group indexes.
"""

from __future__ import annotations

BROKER_DB = b"broker"
