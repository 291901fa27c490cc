"""The broker's topics: created on first use, loaded from the metadata store on start.

A namespace exists once a topic was created in it (it stays when its topics are
deleted, as a Pulsar namespace does) or when it is `public/default`, which every
broker has from the start, as Pulsar's standalone does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from dispatcher import DispatchLimits
from managed_ledger import ManagedLedger, MetadataStore
from stableline.broker.config import BrokerConfig
from stableline.broker.topic import Topic
from stableline.topic_name import TopicName
from txnbuffer import SnapshotPolicy
from txnbuffer.failpoint import Failpoint

log = logging.getLogger(__name__)

TOPICS_DB = b"broker"
_TOPIC_PREFIX = "topic:"
_NAMESPACE_PREFIX = "namespace:"
DEFAULT_NAMESPACE = "public/default"


class TopicNotFoundError(LookupError):
    pass


class TopicRegistry:
    def __init__(self, config: BrokerConfig, store: MetadataStore):
        self.config = config
        self.store = store
        self._topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Task] = {}
        # Given to every topic loaded from now on (see Topic.on_recovered, failpoints).
        self.on_recovered: Callable[[Topic], Awaitable[None]] | None = None
        self.failpoint: Failpoint | None = None
        # Called after a topic is deleted, to drop what else belongs to it (its grants).
        self.on_deleted: list[Callable[[TopicName], Awaitable[None]]] = []
        self.dispatch_limits = DispatchLimits(
            max_unacked_per_consumer=config.max_unacked_messages_per_consumer,
            max_unacked_per_subscription=config.max_unacked_messages_per_subscription,
            max_consumers=config.max_consumers_per_subscription,
        )
        self._known: set[str] = {
            key[len(_TOPIC_PREFIX) :] for key, _ in store.scan_prefix(TOPICS_DB, _TOPIC_PREFIX)
        }
        self._namespaces: set[str] = {DEFAULT_NAMESPACE}
        self._namespaces.update(
            key[len(_NAMESPACE_PREFIX) :]
            for key, _ in store.scan_prefix(TOPICS_DB, _NAMESPACE_PREFIX)
        )
        # Topics written before namespaces were recorded still make theirs exist.
        self._namespaces.update(TopicName.parse(key).namespace_path for key in self._known)

    def _directory(self, name: TopicName) -> Path:
        return self.config.ledgers_dir / name.tenant / name.namespace / name.local_name

    def names(self, namespace: str | None = None) -> list[str]:
        names = sorted(self._known)
        if namespace:
            prefix = f"persistent://{namespace}/"
            names = [n for n in names if n.startswith(prefix)]
        return names

    def namespace_exists(self, namespace: str) -> bool:
        """True for public/default and for every namespace a topic was ever created in."""
        return namespace in self._namespaces

    def loaded(self) -> list[Topic]:
        return list(self._topics.values())

    def exists(self, name: TopicName) -> bool:
        return str(name) in self._known

    async def get(self, name: TopicName, create: bool = True) -> Topic:
        key = str(name)
        topic = self._topics.get(key)
        if topic is not None:
            return topic
        if not create and key not in self._known:
            raise TopicNotFoundError(f"topic {key} does not exist")
        task = self._loading.get(key)
        if task is None:
            task = asyncio.create_task(self._load(name))
            self._loading[key] = task
        try:
            return await asyncio.shield(task)
        finally:
            self._loading.pop(key, None)

    async def _load(self, name: TopicName) -> Topic:
        key = str(name)
        ledger = await ManagedLedger.open(
            name.storage_name, self._directory(name), self.store, self.config.ledger
        )
        if key not in self._known:
            self.store.put(TOPICS_DB, _TOPIC_PREFIX + key, b"")
            self._known.add(key)
            if name.namespace_path not in self._namespaces:
                self.store.put(TOPICS_DB, _NAMESPACE_PREFIX + name.namespace_path, b"")
                self._namespaces.add(name.namespace_path)
            log.info("created topic %s", key)
        topic = Topic(
            name,
            ledger,
            SnapshotPolicy(
                self.config.txn_snapshot_every_changes, self.config.txn_snapshot_interval_s
            ),
            self.dispatch_limits,
        )
        topic.on_recovered = self.on_recovered
        topic.buffer.failpoint = self.failpoint
        self._topics[key] = topic
        topic.start_recovery()
        return topic

    async def load_all(self) -> None:
        for key in sorted(self._known):
            await self.get(TopicName.parse(key))

    async def delete(self, name: TopicName) -> None:
        topic = await self.get(name, create=False)
        await topic.delete()
        self._topics.pop(str(name), None)
        self._known.discard(str(name))
        self.store.delete(TOPICS_DB, _TOPIC_PREFIX + str(name))
        for forget in self.on_deleted:
            await forget(name)

    async def close(self) -> None:
        for topic in list(self._topics.values()):
            await topic.close()
        self._topics.clear()
