"""A real broker in a child process, for tests, benchmarks and crash tools.

The code lives in stableline.local_cluster.broker_process (`stableline cluster up`
runs its brokers with it too); this module is the name tests and scripts import.
"""

from stableline.local_cluster.broker_process import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    BrokerExited,
    BrokerProcess,
    cluster_brokers,
    open_files_limited,
    persistence_env,
    temporary_broker,
)

__all__ = [
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "BrokerExited",
    "BrokerProcess",
    "cluster_brokers",
    "open_files_limited",
    "persistence_env",
    "temporary_broker",
]
