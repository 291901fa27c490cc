"""This broker in its cluster: the metadata store, its registration, its load reports,
and the write gate that follows them.

Opened before the broker recovers anything (an unreachable etcd stops the start at
once, naming the URL); the broker registers once its ports are bound, reports its
load every `load_report_interval_s` (its first report with its registration), and
unregisters first thing when it stops. With
no `metadata_store_url` the store is the embedded one in the data dir and the
cluster is this one broker.

The write gate (topics/write_gate.py) is this module's alone to close and open. In a
cluster it is closed until the broker is registered, closed when the metadata
session is LOST (on the event, before anything else runs; the store declares LOST a
sixth of the lease before etcd could expire it) and when the broker stops, and
opened once the broker is registered, again after a new session, if the session
still holds then (WriteGate.open checks). Standalone it never closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from stableline.broker.cluster.lookup import BrokerAddresses
from stableline.broker.config import BrokerConfig, metadata_store_password
from stableline.broker.topics.write_gate import WriteGate
from stableline.metadata import (
    BrokerInfo,
    BrokerRegistration,
    ClusterMetadataStore,
    InvalidMetadataStoreUrl,
    SessionEvent,
    SessionState,
    open_metadata_store,
)

log = logging.getLogger(__name__)

# A load report: broker-wide figures, and its busiest topics' load scores
# (observability/load_report.py makes them).
LoadFigures = tuple[dict[str, float], dict[str, float]]


def with_advertised_address(addresses: BrokerAddresses, advertised_address: str) -> BrokerAddresses:
    """`addresses` as `advertised_address` ("" | HOST | HOST:PORT) overrides them: the
    host for every port, the port for gRPC."""
    if not advertised_address:
        return addresses
    host, _, port = advertised_address.rpartition(":")
    if not port.isdigit() or not host:
        host, port = advertised_address, addresses.grpc_address.rpartition(":")[2]
    http_port = addresses.http_address.rpartition(":")[2]
    kafka_address = ""
    if addresses.kafka_address:
        kafka_address = f"{host}:{addresses.kafka_address.rpartition(':')[2]}"
    return replace(
        addresses,
        grpc_address=f"{host}:{port}",
        http_address=f"{host}:{http_port}",
        kafka_address=kafka_address,
    )


class Membership:
    def __init__(self, config: BrokerConfig, store: ClusterMetadataStore):
        self.config = config
        self.store = store
        self.registration: BrokerRegistration | None = None
        self._reporter: asyncio.Task | None = None
        self.clustered = bool(config.metadata_store_url)
        if self.clustered:
            self.write_gate = WriteGate(
                store.session_holds,
                closed_because=(
                    f"broker fenced: not registered in cluster {config.cluster_name} yet"
                ),
            )
            store.add_session_listener(self._on_session_event)
        else:
            # The embedded store: this broker is the whole cluster and its session
            # never lapses.
            self.write_gate = WriteGate()

    @classmethod
    async def open(cls, config: BrokerConfig) -> Membership:
        """MetadataStoreError (its text names the store) if the store cannot be opened."""
        try:
            password = metadata_store_password(config)
        except ValueError as error:
            raise InvalidMetadataStoreUrl(str(error)) from None
        store = await open_metadata_store(
            config.metadata_store_url,
            embedded_dir=config.data_dir / "cluster-metadata",
            session_timeout_s=config.metadata_session_timeout_s,
            password=password,
        )
        store.add_session_listener(_log_session_event)
        return cls(config, store)

    async def register(
        self,
        addresses: BrokerAddresses,
        version: str,
        load: Callable[[], LoadFigures],
        kafka_node_id: int = -1,
        data_dir_id: str = "",
    ) -> BrokerInfo:
        """Register this broker under its advertised gRPC address (BrokerAlreadyRegistered
        if a live broker holds it), with its Kafka address and node id when its Kafka
        port is open, and start reporting its load."""
        figures, topic_loads = load()
        info = BrokerInfo(
            broker_id=addresses.grpc_address,
            grpc_address=addresses.grpc_address,
            http_url=addresses.http_url,
            version=version,
            started_ms=int(time.time() * 1000),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            instance=uuid.uuid4().hex,
            load=figures,
            kafka_address=addresses.kafka_address,
            kafka_node_id=kafka_node_id if addresses.kafka_address else -1,
            data_dir_id=data_dir_id,
            topic_loads=topic_loads,
        )
        self.registration = BrokerRegistration(self.store, self.config.cluster_name, info)
        self.registration.on_registered.append(self._open_writes)
        await self.registration.register()
        self._open_writes()
        self._reporter = asyncio.create_task(self._report_load(load))
        return info

    @property
    def _broker_id(self) -> str:
        return "" if self.registration is None else self.registration.info.broker_id

    def _open_writes(self) -> None:
        """Registered (again): writes resume, unless the session was lost meanwhile
        (the next registration opens the gate then)."""
        if self.store.session_state is SessionState.CONNECTED:
            self.write_gate.open()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_LOST:
            lost_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            self.write_gate.close(
                f"broker {self._broker_id} is fenced: its cluster metadata session with "
                f"{self.store.description} was lost at {lost_at} (the store stopped "
                f"answering, so its lease may lapse and another broker act on its topics)"
            )

    async def _report_load(self, load: Callable[[], LoadFigures]) -> None:
        while True:
            await asyncio.sleep(self.config.load_report_interval_s)
            figures, topic_loads = load()
            await self.registration.update_load(figures, topic_loads)

    async def close(self) -> None:
        """Stop writes (in a cluster), unregister, then close the store (its
        session's keys go with it, and others may act on that at once)."""
        if self.clustered:
            self.write_gate.close(f"broker {self._broker_id} is stopping")
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter
        if self.registration is not None:
            await self.registration.unregister()
        await self.store.close()


def _log_session_event(event: SessionEvent) -> None:
    if event is SessionEvent.SESSION_LOST:
        log.error(
            "cluster metadata session lost: this broker's registration is gone until "
            "the metadata store answers again"
        )
