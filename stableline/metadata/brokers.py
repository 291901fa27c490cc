"""Live brokers: each registers itself as an ephemeral key of its cluster.

`/stableline/brokers/{cluster}/{broker_id}` holds a `BrokerInfo` (JSON); the key
lives as long as the broker's metadata session, so the children of the cluster's
directory are its live brokers. The broker id is the advertised gRPC address
(`host:port`, what clients dial), so two brokers advertising one address cannot
both register: the second is refused (`BrokerAlreadyRegistered`), unless the key is
a leftover of a dead run on this host (same host name, its pid gone; this process
could bind the port, so nothing else on this host serves it), which is replaced.
After a lost session is re-established, the registration writes its key again,
retrying while etcd refuses, until it is written (`on_registered` listeners run
then), the session is lost again, or another live broker holds the id (an error is
logged and the broker stays out of the cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from stableline.metadata.broker_addresses import (
    InvalidBrokerAddress,
    check_host_port,
    check_http_url,
)
from stableline.metadata.errors import (
    AlreadyExists,
    BadVersion,
    MetadataStoreError,
    MetadataStoreUnavailable,
    NotFound,
)
from stableline.metadata.layout import broker_path, brokers_dir, cluster_path, clusters_dir
from stableline.metadata.store import ClusterMetadataStore
from stableline.metadata.values import SessionEvent, SessionState

log = logging.getLogger(__name__)

# Retries of a registration etcd refused (after a new session) back off up to this.
_MAX_REGISTER_RETRY_DELAY_S = 1.0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: str  # the advertised gRPC address, host:port
    grpc_address: str
    http_url: str
    version: str
    started_ms: int
    hostname: str
    pid: int
    # Unique per broker run: tells this run's key from one a previous run left.
    instance: str
    # Its last load report (observability/load_report.py): rates over the report
    # interval, CPU, memory, topics; placement and the balancer weigh `loadScore`.
    load: dict[str, float] = field(default_factory=dict)
    # Its other protocol: the advertised Kafka address ("" when its Kafka port is
    # off) and its Kafka node id (kafka_nodes.py; -1 when off).
    kafka_address: str = ""
    kafka_node_id: int = -1
    # Its data dir's identity (made on its first start there): a broker back with
    # another data dir holds none of the copies it held before.
    data_dir_id: str = ""
    # Its busiest topics in that report (full name -> load score): what the
    # balancer may move off it.
    topic_loads: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # InvalidBrokerAddress: a registration is followed (redirects, peers) and
        # linked to (the dashboard), so only addresses a broker could have pass.
        check_host_port("broker id", self.broker_id)
        check_host_port("gRPC address", self.grpc_address)
        check_http_url("HTTP URL", self.http_url)
        if self.kafka_address:
            check_host_port("Kafka address", self.kafka_address)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> BrokerInfo:
        # Fields a newer broker added are left out, so brokers of two versions can
        # read each other's registrations while a cluster is upgraded. Anything that
        # is not a registration is InvalidBrokerAddress.
        try:
            value = json.loads(raw)
            return cls(**{name: value[name] for name in cls.__dataclass_fields__ if name in value})
        except InvalidBrokerAddress:
            raise
        except (ValueError, TypeError) as error:
            raise InvalidBrokerAddress(f"not a broker registration: {error}") from None


class BrokerAlreadyRegistered(MetadataStoreError):
    """Another live broker holds this broker id (advertised address)."""

    def __init__(self, cluster: str, existing: BrokerInfo):
        self.existing = existing
        super().__init__(
            f"broker {existing.broker_id} is already registered in cluster {cluster} by "
            f"pid {existing.pid} on {existing.hostname}; two brokers cannot advertise one "
            f"address: stop that broker or pass another --grpc (or advertised_address)"
        )


def _alive_here(info: BrokerInfo) -> bool:
    """Whether `info`'s process may still run: on another host we cannot tell (yes)."""
    if info.hostname != socket.gethostname():
        return True
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BrokerRegistration:
    """This broker's key: written at start, rewritten after a new session, deleted at stop."""

    def __init__(self, store: ClusterMetadataStore, cluster: str, info: BrokerInfo):
        self.store = store
        self.cluster = cluster
        self.info = info
        self.path = broker_path(cluster, info.broker_id)
        self._version: int | None = None
        self._tasks: set[asyncio.Task] = set()
        # Called after the key is written again under a new session.
        self.on_registered: list[Callable[[], None]] = []
        store.add_session_listener(self._on_session_event)

    async def register(self) -> None:
        """Write the key or raise BrokerAlreadyRegistered (MetadataStoreUnavailable)."""
        with contextlib.suppress(AlreadyExists):
            await self.store.put(cluster_path(self.cluster), b"{}", -1)
        while True:
            try:
                stat = await self.store.put(self.path, self.info.to_json(), -1, ephemeral=True)
            except AlreadyExists:
                existing = await self.store.get(self.path)
                if existing is None:
                    continue  # it lapsed meanwhile
                try:
                    other = BrokerInfo.from_json(existing.value)
                except InvalidBrokerAddress as error:
                    # No broker wrote that: a forged or damaged key under this id.
                    log.warning("replacing %s, which is no registration (%s)", self.path, error)
                    with contextlib.suppress(NotFound, BadVersion):
                        await self.store.delete(self.path, existing.stat.version)
                    continue
                if other.instance != self.info.instance and _alive_here(other):
                    raise BrokerAlreadyRegistered(self.cluster, other) from None
                log.info(
                    "replacing the registration %s left by %s (pid %d, no longer running)",
                    self.path,
                    "this run" if other.instance == self.info.instance else "a previous run",
                    other.pid,
                )
                with contextlib.suppress(NotFound, BadVersion):
                    await self.store.delete(self.path, existing.stat.version)
                continue
            self._version = stat.version
            return

    async def update_load(
        self, load: dict[str, float], topic_loads: dict[str, float] | None = None
    ) -> None:
        """Publish a new load report (compare-and-set on this run's key)."""
        if self._version is None:
            return
        info = BrokerInfo(**{**asdict(self.info), "load": load, "topic_loads": topic_loads or {}})
        try:
            stat = await self.store.put(self.path, info.to_json(), self._version, ephemeral=True)
        except (BadVersion, MetadataStoreUnavailable) as error:
            log.debug("load report skipped: %s", error)
            return
        self.info, self._version = info, stat.version

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            self._version = None
            # A registration under way belongs to the session just lost: the next
            # SESSION_REESTABLISHED starts another, so on_registered never runs late.
            for task in list(self._tasks):
                task.cancel()
        elif event is SessionEvent.SESSION_REESTABLISHED:
            task = asyncio.get_running_loop().create_task(self._register_again())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _register_again(self) -> None:
        delay = 0.1
        while True:
            try:
                await self.register()
                break
            except MetadataStoreUnavailable as error:
                if self.store.session_state in (SessionState.LOST, SessionState.CLOSED):
                    return  # lost again (or closed): a new session starts another try
                log.warning(
                    "broker %s could not register again yet (%s); retrying",
                    self.info.broker_id,
                    error,
                )
            except MetadataStoreError as error:  # BrokerAlreadyRegistered among them
                log.error("broker %s could not register again: %s", self.info.broker_id, error)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_REGISTER_RETRY_DELAY_S)
        log.info("broker %s registered again in cluster %s", self.info.broker_id, self.cluster)
        for listener in list(self.on_registered):
            listener()

    async def unregister(self) -> None:
        """Delete the key (best effort: closing the session deletes it anyway)."""
        for task in list(self._tasks):
            task.cancel()
        if self._version is None:
            return
        with contextlib.suppress(MetadataStoreError):
            await self.store.delete(self.path, self._version)
        self._version = None


async def list_brokers(store: ClusterMetadataStore, cluster: str) -> list[BrokerInfo]:
    """The cluster's live brokers, by id; a key that lapses while read is left out."""
    brokers = []
    for broker_id in await store.children(brokers_dir(cluster)):
        result = await store.get(broker_path(cluster, broker_id))
        if result is None:
            continue
        try:
            info = BrokerInfo.from_json(result.value)
            if info.broker_id != broker_id:
                raise InvalidBrokerAddress(f"it names broker {info.broker_id!r}, not its key")
            brokers.append(info)
        except InvalidBrokerAddress as error:
            # Never followed nor linked to: a forged or damaged key is left out.
            log.warning("cluster %s: ignoring the registration %s: %s", cluster, broker_id, error)
    return brokers


async def list_clusters(store: ClusterMetadataStore) -> list[str]:
    """Clusters a broker has started in (their records stay when the brokers go)."""
    return await store.children(clusters_dir())
