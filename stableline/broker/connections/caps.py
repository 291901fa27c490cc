"""How many connections each port may hold: the configured caps, cut to fit the
process's open-file limit.

Every connection costs a file descriptor, and a process out of descriptors fails
everything at once: accepts (which the network libraries then log in a loop), ledger
files, the health check of the operator trying to see what is wrong. So the caps of
the three ports together stay under what the limit leaves once the broker's own
files are counted: the ledger file cache (`max_open_ledger_files`, half the limit by
default) and RESERVED_FILES for the rest (metadata store, logs, the event loop's
and gRPC's own descriptors, calls to etcd and peers, one descriptor for each
refused connection while it is closed). When the configured caps do not fit, each
is cut in proportion [Kafka: max.connections, max.connections.per.ip].

A port's per-address cap is at most its total; when the caps are cut, at most half
of it, so one address can never hold a whole port: the others have the rest.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from stableline.broker.config import BrokerConfig

# Descriptors kept for the broker itself, beyond the ledger file cache.
RESERVED_FILES = 128
# gRPC's own "no cap" (its channel arguments are C ints).
GRPC_UNCAPPED = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PortCaps:
    """At most `total` connections on a port, at most `per_address` from one address."""

    total: int
    per_address: int

    @classmethod
    def of(cls, total: int, per_address: int) -> PortCaps:
        total = max(1, total)
        return cls(total, max(1, min(per_address, total)))


@dataclass(frozen=True, slots=True)
class ConnectionCaps:
    grpc: PortCaps
    kafka: PortCaps
    http: PortCaps
    # gRPC connections, calls or not (gRPC closes one more at its accept): what the
    # budget leaves beside the other ports, never below grpc.total. `grpc` counts
    # only clients with an authenticated call open, as max_connections always did.
    grpc_sockets: int
    # Descriptors the three ports may hold together; None: no limit to fit under.
    budget: int | None
    # Whether the configured caps were cut to fit the budget.
    reduced: bool


def connection_caps(
    config: BrokerConfig, open_files_limit: int, ledger_files: int
) -> ConnectionCaps:
    """The caps in force for a process whose open-files soft limit is
    `open_files_limit` and whose ledger file cache holds up to `ledger_files`."""
    wanted = {
        "grpc": (config.max_connections, config.max_connections_per_address),
        "kafka": (config.kafka_max_connections, config.kafka_max_connections_per_address),
        "http": (config.max_http_connections, config.http_max_connections_per_address),
    }
    if config.kafka_address == "":
        wanted["kafka"] = (0, 0)
    budget = None
    if open_files_limit != resource.RLIM_INFINITY and open_files_limit > 0:
        budget = max(3, open_files_limit - ledger_files - RESERVED_FILES)
    total = sum(cap for cap, _ in wanted.values())
    reduced = budget is not None and total > budget
    caps = {}
    for port, (cap, per_address) in wanted.items():
        if reduced:
            cap = cap * budget // total
            per_address = min(per_address, cap // 2)
        caps[port] = PortCaps.of(cap, per_address)
    grpc_sockets = GRPC_UNCAPPED
    if budget is not None:
        grpc_sockets = max(caps["grpc"].total, budget - wanted["kafka"][0] - wanted["http"][0])
        if reduced:
            grpc_sockets = caps["grpc"].total
    return ConnectionCaps(**caps, grpc_sockets=grpc_sockets, budget=budget, reduced=reduced)
