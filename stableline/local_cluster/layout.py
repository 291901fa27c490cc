"""What `stableline cluster up` keeps in its base dir, so that a restart brings back
the same cluster.

BASE/cluster.json holds the cluster's name, its etcd (the ports of the etcd that
`cluster up` runs, or the URL of one it was given) and each broker's gRPC, HTTP and
Kafka ports. A broker's id is its advertised gRPC address and ownership records name a
topic's owner by that id, so a broker started again on another port would own none
of its topics: ports are chosen once and every later start reuses them.

Promises (`plan`):
- A new base dir gets the options asked for: broker i on base port + i, or on
  free ports where a base port is 0 (the ports bound are recorded once the
  brokers are ready, `with_bound_ports`).
- A recorded cluster starts as recorded. An option given explicitly that
  contradicts the record is refused with a message naming the file (a new cluster
  needs another --data-dir); `--brokers` may grow the cluster (broker i added on
  base port + i, as a new cluster would have it) but never shrink it, since the
  topics of a broker left out would be unavailable.
- Kafka ports are no broker's identity (Kafka node ids follow the gRPC address):
  `--base-kafka-port` given moves every broker's; left out, the recorded ones stand
  (a record made before brokers had Kafka ports gets free ones, then recorded).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from stableline.local_cluster.etcd import free_port

LAYOUT_FILE = "cluster.json"
MAX_BROKERS = 64


class LayoutError(ValueError):
    """The options asked for contradict the recorded cluster, or the record is unreadable."""


@dataclass(frozen=True, slots=True)
class BrokerSlot:
    """One broker of the cluster: its ports (0: a free one, until recorded)."""

    index: int
    grpc_port: int
    http_port: int
    kafka_port: int = 0

    @property
    def name(self) -> str:
        return f"broker-{self.index}"


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    cluster: str
    # An etcd run elsewhere ("etcd://host:port"); "" when `cluster up` runs its own
    # on these ports.
    etcd_url: str
    etcd_client_port: int
    etcd_peer_port: int
    brokers: tuple[BrokerSlot, ...]

    def __post_init__(self) -> None:
        assert [b.index for b in self.brokers] == list(range(len(self.brokers))), self
        assert self.etcd_url or (self.etcd_client_port and self.etcd_peer_port), self

    @property
    def metadata_store_url(self) -> str:
        return self.etcd_url or f"etcd://127.0.0.1:{self.etcd_client_port}"

    def with_bound_ports(self, bound: dict[int, tuple[int, int, int]]) -> ClusterLayout:
        """The layout with broker index -> (gRPC, HTTP, Kafka) ports as bound."""
        return replace(
            self,
            brokers=tuple(
                BrokerSlot(b.index, *bound.get(b.index, (b.grpc_port, b.http_port, b.kafka_port)))
                for b in self.brokers
            ),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "cluster": self.cluster,
                "etcd": (
                    {"url": self.etcd_url}
                    if self.etcd_url
                    else {"clientPort": self.etcd_client_port, "peerPort": self.etcd_peer_port}
                ),
                "brokers": [
                    {
                        "name": b.name,
                        "grpcPort": b.grpc_port,
                        "httpPort": b.http_port,
                        "kafkaPort": b.kafka_port,
                    }
                    for b in self.brokers
                ],
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> ClusterLayout:
        value = json.loads(text)
        etcd = value["etcd"]
        return cls(
            value["cluster"],
            etcd.get("url", ""),
            etcd.get("clientPort", 0),
            etcd.get("peerPort", 0),
            tuple(
                BrokerSlot(i, int(b["grpcPort"]), int(b["httpPort"]), int(b.get("kafkaPort", 0)))
                for i, b in enumerate(value["brokers"])
            ),
        )


@dataclass(frozen=True, slots=True)
class Requested:
    """The options of one `cluster up`, and which of them the user gave."""

    brokers: int
    base_grpc_port: int
    base_http_port: int
    base_kafka_port: int
    cluster: str
    etcd_url: str  # "" runs an etcd
    given: frozenset[str]  # names of the options given explicitly


def load(base_dir: Path) -> ClusterLayout | None:
    """The recorded layout, None for a base dir never started; LayoutError if unreadable."""
    path = base_dir / LAYOUT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return ClusterLayout.from_json(text)
    except (ValueError, KeyError, TypeError, AssertionError) as error:
        raise LayoutError(f"{path} is not a cluster layout ({error}); move it away") from None


def save(base_dir: Path, layout: ClusterLayout) -> None:
    """Write the layout durably (a crash leaves the old one or the new one)."""
    base_dir.mkdir(parents=True, exist_ok=True)
    path = base_dir / LAYOUT_FILE
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as file:
        file.write(layout.to_json() + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _port(base: int, index: int) -> int:
    return base + index if base else 0


def plan(requested: Requested, recorded: ClusterLayout | None, base_dir: Path) -> ClusterLayout:
    """The layout to start (see the module docstring); LayoutError on a contradiction."""
    if not 1 <= requested.brokers <= MAX_BROKERS:
        raise LayoutError(f"--brokers must be 1..{MAX_BROKERS}, not {requested.brokers}")
    if recorded is None:
        return ClusterLayout(
            requested.cluster,
            requested.etcd_url,
            0 if requested.etcd_url else free_port(),
            0 if requested.etcd_url else free_port(),
            tuple(
                BrokerSlot(
                    i,
                    _port(requested.base_grpc_port, i),
                    _port(requested.base_http_port, i),
                    _port(requested.base_kafka_port, i),
                )
                for i in range(requested.brokers)
            ),
        )
    path = base_dir / LAYOUT_FILE
    restart = f"{path} records"
    fresh = "pass a new --data-dir for a new cluster"
    given = requested.given
    if "cluster" in given and requested.cluster != recorded.cluster:
        raise LayoutError(f"{restart} cluster {recorded.cluster!r}; {fresh}")
    if "etcd" in given and requested.etcd_url != recorded.etcd_url:
        where = recorded.etcd_url or "an etcd of its own"
        raise LayoutError(f"{restart} its metadata in {where}; {fresh}")
    first = recorded.brokers[0]
    for option, asked, had in (
        ("base_grpc_port", requested.base_grpc_port, first.grpc_port),
        ("base_http_port", requested.base_http_port, first.http_port),
    ):
        if option in given and asked and asked != had:
            flag = "--" + option.replace("_", "-")
            raise LayoutError(
                f"{restart} broker-0 on port {had}, not {asked} ({flag}): a broker's id is "
                f"its address and its topics are owned by that id; leave {flag} out to "
                f"start it as recorded, or {fresh}"
            )
    count = requested.brokers if "brokers" in given else len(recorded.brokers)
    if count < len(recorded.brokers):
        raise LayoutError(
            f"{restart} {len(recorded.brokers)} brokers and each holds its own topics: "
            f"pass --brokers {len(recorded.brokers)} or more, or {fresh}"
        )
    added = tuple(
        BrokerSlot(
            index,
            _port(requested.base_grpc_port, index),
            _port(requested.base_http_port, index),
            _port(requested.base_kafka_port, index),
        )
        for index in range(len(recorded.brokers), count)
    )
    brokers = recorded.brokers + added
    if "base_kafka_port" in given:
        brokers = tuple(
            replace(b, kafka_port=_port(requested.base_kafka_port, b.index)) for b in brokers
        )
    return replace(recorded, brokers=brokers)
