"""This broker in its cluster: the metadata store, its registration, its load reports.

Opened before the broker recovers anything (an unreachable etcd stops the start at
once, naming the URL); the broker registers once its ports are bound, reports its
load every LOAD_REPORT_INTERVAL_S, and unregisters first thing when it stops. With
no `metadata_store_url` the store is the embedded one in the data dir and the
cluster is this one broker.
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

from stableline.broker.config import BrokerConfig
from stableline.broker.lookup import BrokerAddresses
from stableline.metadata import (
    BrokerInfo,
    BrokerRegistration,
    MetadataStore,
    SessionEvent,
    open_metadata_store,
)

log = logging.getLogger(__name__)

LOAD_REPORT_INTERVAL_S = 15.0


def with_advertised_address(addresses: BrokerAddresses, advertised_address: str) -> BrokerAddresses:
    """`addresses` as `advertised_address` ("" | HOST | HOST:PORT) overrides them: the
    host for both ports, the port for gRPC."""
    if not advertised_address:
        return addresses
    host, _, port = advertised_address.rpartition(":")
    if not port.isdigit() or not host:
        host, port = advertised_address, addresses.grpc_address.rpartition(":")[2]
    http_port = addresses.http_address.rpartition(":")[2]
    return replace(addresses, grpc_address=f"{host}:{port}", http_address=f"{host}:{http_port}")


class Membership:
    def __init__(self, config: BrokerConfig, store: MetadataStore):
        self.config = config
        self.store = store
        self.registration: BrokerRegistration | None = None
        self._reporter: asyncio.Task | None = None

    @classmethod
    async def open(cls, config: BrokerConfig) -> Membership:
        """MetadataStoreError (its text names the store) if the store cannot be opened."""
        store = await open_metadata_store(
            config.metadata_store_url,
            embedded_dir=config.data_dir / "cluster-metadata",
            session_timeout_s=config.metadata_session_timeout_s,
        )
        store.add_session_listener(_log_session_event)
        return cls(config, store)

    async def register(
        self, addresses: BrokerAddresses, version: str, load: Callable[[], dict[str, float]]
    ) -> BrokerInfo:
        """Register this broker under its advertised gRPC address (BrokerAlreadyRegistered
        if a live broker holds it) and start reporting its load."""
        info = BrokerInfo(
            broker_id=addresses.grpc_address,
            grpc_address=addresses.grpc_address,
            http_url=addresses.http_url,
            version=version,
            started_ms=int(time.time() * 1000),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            instance=uuid.uuid4().hex,
            load=load(),
        )
        self.registration = BrokerRegistration(self.store, self.config.cluster_name, info)
        await self.registration.register()
        self._reporter = asyncio.create_task(self._report_load(load))
        return info

    async def _report_load(self, load: Callable[[], dict[str, float]]) -> None:
        while True:
            await asyncio.sleep(LOAD_REPORT_INTERVAL_S)
            await self.registration.update_load(load())

    async def close(self) -> None:
        """Unregister, then close the store (its session's keys go with it)."""
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
