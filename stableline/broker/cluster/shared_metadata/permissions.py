"""Grants in the cluster's metadata store (PermissionStore), enforced by every broker.

`/stableline/permissions/{tenant}/{namespace}` holds a namespace's grants and
`/stableline/permissions/{tenant}/{namespace}/{topic}` one topic's, each
`{role: ["consume", "produce"]}` as on one broker. Every broker checks against a
mirror kept current by a watch: a grant or revocation made through one broker is
enforced by the others once their watch brings it (a few milliseconds here), and by
the broker that made it when the call returns. A change from any broker re-checks
the open producers and consumers here too (`change_listeners`), so a revocation
made elsewhere ends the streams it no longer allows. A change is read-modify-write
by compare-and-set on the resource's key: two roles granted on one namespace
through two brokers at once are both kept.
"""

from __future__ import annotations

import asyncio
import contextlib

from stableline.broker.security.permissions import (
    Action,
    PermissionStore,
    Scope,
    decode_grants,
    encode_grants,
    with_role,
)
from stableline.metadata import ClusterMetadataStore, NotFound
from stableline.metadata.layout import (
    namespace_permissions_path,
    permissions_dir,
    relative_segments,
    topic_permissions_path,
)
from stableline.metadata.mirror import PrefixMirror
from stableline.metadata.updates import update_key
from stableline.topic_name import TopicName


def _path(scope: Scope, resource: str) -> str:
    if scope is Scope.NAMESPACE:
        return namespace_permissions_path(resource)
    return topic_permissions_path(TopicName.parse(resource).storage_name)


class ClusterPermissionStore(PermissionStore):
    """PermissionStore shared by a cluster's brokers."""

    def __init__(self, store: ClusterMetadataStore):
        super().__init__()
        self.store = store
        self._mirror = PrefixMirror(store, permissions_dir())
        self._mirror.listeners.append(self._on_change)
        # Many keys changed at once (a start, a re-read) re-check open streams once.
        self._recheck: asyncio.Handle | None = None

    async def start(self) -> None:
        await self._mirror.start()

    async def close(self) -> None:
        await self._mirror.close()
        if self._recheck is not None:
            self._recheck.cancel()

    def _on_change(self, path: str) -> None:
        segments = relative_segments(permissions_dir(), path)
        if len(segments) == 2:
            table, resource = self._namespaces, "/".join(segments)
        else:
            table, resource = self._topics, str(TopicName(*segments))
        result = self._mirror.get(path)
        if result is None:
            table.pop(resource, None)
        else:
            table[resource] = decode_grants(result.value)
        if self._recheck is None:
            self._recheck = asyncio.get_running_loop().call_soon(self._recheck_now)

    def _recheck_now(self) -> None:
        self._recheck = None
        self._changed()

    async def forget_topic(self, topic: TopicName) -> None:
        with contextlib.suppress(NotFound):
            revision = await self.store.delete(_path(Scope.TOPIC, str(topic)))
            await self._mirror.caught_up(revision)

    async def _set(
        self, scope: Scope, resource: str, role: str, actions: frozenset[Action] | None
    ) -> bool:
        def changed(raw: bytes | None) -> bytes | None:
            grants = with_role(decode_grants(raw) if raw else {}, resource, role, actions)
            if grants is None:
                return raw
            return encode_grants(grants) if grants else None

        revision = await update_key(self.store, _path(scope, resource), changed)
        if not revision:
            return False
        await self._mirror.caught_up(revision)
        return True
