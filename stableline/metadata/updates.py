"""Read-modify-write of one key by compare-and-set, retried until it applies.

Two writers changing different parts of one value (two roles granted on one
namespace by two brokers) both keep their change: each writes only over the
version it read, and the loser reads again and reapplies its change.
"""

from __future__ import annotations

from collections.abc import Callable

from stableline.metadata.errors import BadVersion, MetadataStoreUnavailable, NotFound
from stableline.metadata.store import ClusterMetadataStore

# Attempts before a key changed by others every time is reported as unavailable.
MAX_ATTEMPTS = 64


async def update_key(
    store: ClusterMetadataStore, path: str, change: Callable[[bytes | None], bytes | None]
) -> int:
    """Apply `change(current value or None) -> new value or None (delete)` to `path`.

    Returns the store's revision of the write, 0 when `change` left the key as it
    was. `change` may run several times; it may raise to refuse the change.
    """
    for _ in range(MAX_ATTEMPTS):
        current = await store.get(path)
        old = current.value if current is not None else None
        new = change(old)
        if new == old:
            return 0
        try:
            if new is None:
                assert current is not None
                return await store.delete(path, current.stat.version)
            version = current.stat.version if current is not None else -1
            return (await store.put(path, new, version)).modified_revision
        except (BadVersion, NotFound):
            continue  # changed meanwhile: read it again
    raise MetadataStoreUnavailable(
        f"metadata key {path} changed under every one of {MAX_ATTEMPTS} attempts to "
        f"update it; retry later"
    )
